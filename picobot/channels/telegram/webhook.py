"""The Telegram webhook, framework-free: (headers, raw body) -> (HTTP status, JSON answer).

Checks in order: the secret (`X-Telegram-Bot-Api-Secret-Token`, constant-time, 401), the size
(1 MB, 413), the JSON (an object, ≤ 32 deep, no NaN/Infinity, with an integer update_id: else 400),
then intake.accept records a message in the event inbox. Telegram retries any non-2xx answer, so
an update we ignore on purpose — another type, a malformed message, a stranger — gets 200. A storage
outage answers 500: Telegram delivers the update again later. Every answer is a small JSON object;
rejections log one line without secrets or content.
"""

from __future__ import annotations

import hmac
import json
import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.channels.telegram import intake, status
from picobot.domain.headers import RequestHeaders

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.channels.telegram.config import TelegramConfig

log = logging.getLogger("picobot.channels.telegram")

MAX_BODY_BYTES = 1024 * 1024
SECRET_HEADER = "x-telegram-bot-api-secret-token"

Answer = tuple[int, dict[str, Any]]


def webhook_channels(config: Any) -> list[tuple[str, str, TelegramConfig]]:
    """(channel key, path, settings) of each enabled Telegram channel in webhook mode: what the web serves."""
    from picobot.channels.telegram.config import TelegramConfig

    found = []
    for key, channel in config.channels.items():
        if (channel.type or key) == "telegram" and channel.enabled:
            cfg = TelegramConfig.from_channel(channel)
            if cfg.mode == "webhook":
                found.append((key, cfg.path_for(key), cfg))
    return found


def _answer(status_code: int, description: str) -> Answer:
    return status_code, {"ok": status_code < 400, "description": description}


def handle(rt: ChannelPorts, cfg: TelegramConfig, headers: RequestHeaders, body: bytes,
           channel: str = "telegram") -> Answer:
    """Answer one webhook request; never raises."""
    try:
        return _handle(rt, cfg, headers, body, channel)
    except Exception as exc:  # a bug must still answer JSON; the type only: the text may hold content
        log.error("telegram webhook (%s): failed with %s", channel, type(exc).__name__)
        return _answer(500, "internal error, retry later")


def _reject(channel: str, status_code: int, reason: str) -> Answer:
    log.info("telegram webhook (%s): rejected with %d: %s", channel, status_code, reason)
    return _answer(status_code, reason)


def _handle(rt: ChannelPorts, cfg: TelegramConfig, headers: RequestHeaders, body: bytes, channel: str) -> Answer:
    if not cfg.webhook_secret:  # config load refuses this; never run open
        return _reject(channel, 401, "no webhook_secret is configured")
    given = next((str(v) for k, v in headers.items() if str(k).lower() == SECRET_HEADER), "")
    if not hmac.compare_digest(given.encode("utf-8", "replace"), cfg.webhook_secret.encode()):
        return _reject(channel, 401, "the secret token does not match")
    if len(body) > MAX_BODY_BYTES:
        return _reject(channel, 413, f"the body is over {MAX_BODY_BYTES} bytes")
    try:
        update = intake.clean(parse(body))
    except (ValueError, RecursionError) as exc:
        reason = str(exc) if isinstance(exc, intake.Malformed) else "the body is not a JSON object"
        return _reject(channel, 400, reason)
    if intake.update_id(update) is None:
        return _reject(channel, 400, "the update has no integer update_id")
    try:
        outcome = intake.accept(rt, channel, update)
    except Exception as exc:  # storage down: Telegram redelivers later
        log.warning("telegram webhook (%s): could not record an update (%s)", channel, type(exc).__name__)
        return _answer(500, "storage unavailable, retry later")
    if outcome == intake.RECORDED:
        try:
            status.write(rt.redis, channel, ttl=status.WEBHOOK_TTL_SECS, last_update_at=f"{time.time():.3f}")
        except Exception:
            pass
    return _answer(200, outcome)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def parse(raw: bytes) -> dict[str, Any]:
    data = json.loads(raw, parse_constant=_no_constant)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    return data
