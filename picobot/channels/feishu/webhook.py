"""The Feishu event webhook, framework-free: (headers, raw body) -> (HTTP status, JSON answer).

Checks, in the lark-oapi SDK's order: size, JSON shape, decryption, verification token
(constant-time), then X-Lark-Signature with a freshness window. A url_verification gets its
challenge back; an `im.message.receive_v1` is recorded in the SQL event inbox (deduped on the
message id, with the token removed) and its processing enqueued. Nothing else happens here
(no LLM, no Feishu API call), so Feishu gets its answer well within 3 s. Other event types get
200, or Feishu would redeliver them for hours. Each rejection logs one line, without secrets
or message content; every answer is a small JSON object that encodes even when the input held
lone surrogates.
"""

from __future__ import annotations

import json
import logging
from typing import TYPE_CHECKING, Any

from picobot.channels.feishu.crypto import BadPayload, CryptoError, check_signature, check_token, decrypt
from picobot.domain.headers import RequestHeaders
from picobot.domain.text import repair_text

if TYPE_CHECKING:
    from picobot.channels.feishu.config import FeishuConfig
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 1024 * 1024
MAX_DEPTH = 32  # Feishu's events nest about 5 deep
MESSAGE_EVENT = "im.message.receive_v1"
CARD_ACTION_EVENT = "card.action.trigger"  # a button pressed on one of the bot's cards (an approval's)
MAX_COMMAND_CHARS = 64
MAX_ID_CHARS = 200

Answer = tuple[int, dict[str, Any]]
OK: Answer = (200, {"code": 0, "msg": "ok"})


def webhook_channels(config: Any) -> list[tuple[str, str, FeishuConfig]]:
    """(channel key, path, settings) of each enabled Feishu channel in webhook mode: what the web serves."""
    from picobot.channels.feishu.config import FeishuConfig

    found = []
    for key, channel in config.channels.items():
        if channel.type == "feishu" and channel.enabled:
            cfg = FeishuConfig.from_channel(channel)
            if cfg.mode == "webhook":
                found.append((key, cfg.webhook_path, cfg))
    return found


class Rejected(Exception):
    def __init__(self, status: int, reason: str):
        super().__init__(reason)
        self.status = status
        self.reason = reason


def handle(rt: ChannelPorts, cfg: FeishuConfig, headers: RequestHeaders, body: bytes,
           channel: str = "feishu") -> Answer:
    """Answer one webhook request; never raises."""
    try:
        return _handle(rt, cfg, headers, body, channel)
    except Rejected as exc:
        log.info("feishu webhook (%s): rejected with %d: %s", channel, exc.status, exc.reason)
        return exc.status, {"code": exc.status, "msg": exc.reason}
    except Exception as exc:  # a bug must still answer JSON; the type only: the text may hold content
        log.error("feishu webhook (%s): failed with %s", channel, type(exc).__name__)
        return 500, {"code": 500, "msg": "internal error, retry later"}


def _handle(rt: ChannelPorts, cfg: FeishuConfig, headers: RequestHeaders, body: bytes, channel: str) -> Answer:
    if not (cfg.verification_token or cfg.encrypt_key):  # config load refuses this; never run open
        raise Rejected(401, "neither verification_token nor encrypt_key is configured")
    if len(body) > MAX_BODY_BYTES:
        raise Rejected(413, f"the body is over {MAX_BODY_BYTES} bytes")
    data = parse(body)
    encrypted = "encrypt" in data
    if encrypted:
        data = _decrypted(data, cfg)
    if data.get("type") == "url_verification":
        return _challenge(data, cfg, encrypted)
    if cfg.verification_token:
        _check(lambda: check_token(_token(data), cfg.verification_token))
    if cfg.encrypt_key:
        lowered = {str(k).lower(): str(v) for k, v in headers.items()}
        _check(lambda: check_signature(lowered, body, cfg.encrypt_key, cfg.signature_max_age_secs))
    return accept_event(rt, channel, data)


def accept_event(rt: ChannelPorts, channel: str, data: dict[str, Any]) -> Answer:
    """Record an authenticated event (from `parse`) and enqueue it; the long connection uses it too."""
    if _event_type(data) == CARD_ACTION_EVENT:
        return _record_card_action(rt, channel, data)
    if _event_type(data) != MESSAGE_EVENT:
        log.debug("feishu (%s): ignored event type %.80r", channel, _event_type(data))
        return OK
    return _record(rt, channel, data)


def card_action_problem(data: dict[str, Any]) -> str | None:
    """Why a card.action.trigger event is not a button press PicoBot takes (a slash command), or None."""
    header, event = data.get("header"), data.get("event")
    if not (isinstance(header, dict) and isinstance(header.get("event_id"), str)
            and 0 < len(header["event_id"]) <= MAX_ID_CHARS):
        return "the event has no event_id"
    if not isinstance(event, dict):
        return "the event has no body"
    operator, action, context = event.get("operator"), event.get("action"), event.get("context")
    if not (isinstance(operator, dict) and isinstance(operator.get("open_id"), str)
            and 0 < len(operator["open_id"]) <= MAX_ID_CHARS):
        return "operator.open_id is missing"
    if not (isinstance(context, dict) and isinstance(context.get("open_chat_id"), str)
            and 0 < len(context["open_chat_id"]) <= MAX_ID_CHARS):
        return "context.open_chat_id is missing"
    value = action.get("value") if isinstance(action, dict) else None
    command = value.get("command") if isinstance(value, dict) else None
    if not (isinstance(command, str) and command.startswith("/") and len(command) <= MAX_COMMAND_CHARS):
        return "action.value.command is not a slash command"
    return None


def _record_card_action(rt: ChannelPorts, channel: str, data: dict[str, Any]) -> Answer:
    problem = card_action_problem(data)
    if problem:
        log.info("feishu (%s): ignored a card action: %s", channel, problem)
        return OK
    from picobot.channels import events

    payload = _without_token(data)
    payload["event"] = {k: v for k, v in payload["event"].items() if k != "token"}  # the card's own token
    try:
        event_id, created = events.record(rt.db, channel, f"card:{payload['header']['event_id']}", payload)
    except Exception as exc:  # storage down: 500 makes Feishu redeliver later
        log.warning("feishu (%s): could not record a card action (%s)", channel, type(exc).__name__)
        return 500, {"code": 500, "msg": "storage unavailable, retry later"}
    if created:
        try:
            rt.queue.enqueue_channel_event(event_id)
        except Exception as exc:  # recorded: the sweeper enqueues it once the broker is back
            log.warning("feishu (%s): event %s recorded, not enqueued (%s)", channel, event_id, type(exc).__name__)
    return 200, {"toast": {"type": "info", "content": "Received"}}


def parse(raw: bytes | str) -> dict[str, Any]:
    """A JSON object, checked for depth, NaN/Infinity and unencodable text; Rejected(400) if not."""
    try:
        data = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise Rejected(400, "the JSON nests too deep") from None
    except ValueError:  # JSONDecodeError, bad UTF-8, NaN / Infinity
        raise Rejected(400, "the body is not valid JSON") from None
    if not isinstance(data, dict):
        raise Rejected(400, "the body is not a JSON object")
    return _clean(data, 0)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _clean(value: Any, depth: int) -> Any:
    # Lone surrogates and NUL cannot be stored (Postgres) or re-encoded everywhere: replace them.
    if depth > MAX_DEPTH:
        raise Rejected(400, f"the JSON nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        return repair_text(value)
    if isinstance(value, dict):
        return {repair_text(k): _clean(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v, depth + 1) for v in value]
    return value


def _decrypted(data: dict[str, Any], cfg: FeishuConfig) -> dict[str, Any]:
    if not cfg.encrypt_key:
        raise Rejected(400, "an encrypted event arrived but channels.feishu.encrypt_key is not set")
    encrypted = data.get("encrypt")
    if not isinstance(encrypted, str):
        raise Rejected(400, "the encrypt field is not a string")
    try:
        plain = decrypt(encrypted, cfg.encrypt_key)
    except BadPayload as exc:
        raise Rejected(400, str(exc)) from None
    return parse(plain)


def _check(step: Any) -> None:
    try:
        step()
    except CryptoError as exc:
        raise Rejected(401, str(exc)) from None


def _challenge(data: dict[str, Any], cfg: FeishuConfig, encrypted: bool) -> Answer:
    # As in the SDK: the token, no signature. Without a token configured only decrypting proves the sender.
    if cfg.verification_token:
        _check(lambda: check_token(data.get("token"), cfg.verification_token))
    elif not encrypted:
        raise Rejected(401, "a plain url_verification needs channels.feishu.verification_token")
    challenge = data.get("challenge")
    if not isinstance(challenge, str) or not 0 < len(challenge) <= 1024:
        raise Rejected(400, "url_verification without a challenge string")
    return 200, {"challenge": challenge}


def _token(data: dict[str, Any]) -> Any:
    header = data.get("header")
    if data.get("schema") == "2.0" and isinstance(header, dict):
        return header.get("token")
    return data.get("token")


def _event_type(data: dict[str, Any]) -> Any:
    header = data.get("header")
    if isinstance(header, dict) and "event_type" in header:
        return header.get("event_type")
    event = data.get("event")
    return event.get("type") if isinstance(event, dict) else None


def _message_problem(data: dict[str, Any]) -> str | None:
    event = data.get("event")
    message = event.get("message") if isinstance(event, dict) else None
    if not isinstance(message, dict):
        return "the event has no message"
    for key in ("message_id", "chat_id"):
        value = message.get(key)
        if not isinstance(value, str) or not 0 < len(value) <= MAX_ID_CHARS:
            return f"message.{key} is missing or not an id"
    content = message.get("content")
    try:
        parsed = json.loads(content, parse_constant=_no_constant) if isinstance(content, str) else None
    except (ValueError, RecursionError):
        parsed = None
    return None if isinstance(parsed, dict) else "message.content is not a JSON object"


def _record(rt: ChannelPorts, channel: str, data: dict[str, Any]) -> Answer:
    problem = _message_problem(data)
    if problem:  # Feishu's own malformed event: redelivering it would not help, so 200
        log.info("feishu (%s): ignored a message event: %s", channel, problem)
        return 200, {"code": 0, "msg": "ignored"}
    from picobot.channels import events

    payload = _without_token(data)
    message_id = payload["event"]["message"]["message_id"]
    try:
        event_id, created = events.record(rt.db, channel, message_id, payload)
    except Exception as exc:  # storage down: 500 makes Feishu redeliver later
        log.warning("feishu (%s): could not record an event (%s)", channel, type(exc).__name__)
        return 500, {"code": 500, "msg": "storage unavailable, retry later"}
    if created:
        try:
            rt.queue.enqueue_channel_event(event_id)
        except Exception as exc:  # recorded: the sweeper enqueues it once the broker is back
            log.warning("feishu (%s): event %s recorded, not enqueued (%s)", channel, event_id,
                        type(exc).__name__)
    return OK


def _without_token(data: dict[str, Any]) -> dict[str, Any]:
    # The verification token is a secret: it never goes into SQL.
    payload = {k: v for k, v in data.items() if k != "token"}
    if isinstance(payload.get("header"), dict):
        payload["header"] = {k: v for k, v in payload["header"].items() if k != "token"}
    return payload
