"""What a Telegram bot is told when its intake starts: its command menu (setMyCommands), its webhook.

Both are best effort and done by one process at a time (a short Redis flag per bot): a failure is
logged and noted in the channel's status, never a reason not to start.
"""

from __future__ import annotations

import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from picobot.channels.telegram import keys, status
from picobot.security.redact import redact

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.channels.telegram.api import TelegramApi
    from picobot.channels.telegram.config import TelegramConfig

log = logging.getLogger("picobot.channels.telegram")

# edited messages, reactions, … are not asked for (intake.py ignores them); callback_query: a pressed
# inline button (an approval's), taken as the slash command it carries
ALLOWED_UPDATES = ["message", "callback_query"]
_HELP_LINE = re.compile(r"^\s+/([a-z0-9_]{1,32})\b[^\n]*?\s{2,}(\S[^\n]*)$", re.M)
_NAME = re.compile(r"[a-z0-9_]{1,32}")


def bot_commands(rt: Any) -> list[dict[str, str]]:
    """PicoBot's slash commands as Telegram's menu: the built-ins (from /help), then the plugins'."""
    from picobot.gateway.commands import HELP

    found = {name: desc.strip() for name, desc in _HELP_LINE.findall(HELP)}
    commands = getattr(rt, "commands", None)
    try:
        extra = commands() if callable(commands) else {}
    except Exception:  # a plugin's trouble never stops the intake
        extra = {}
    for name, command in sorted(extra.items()):
        if _NAME.fullmatch(name) and name not in found:
            found[name] = str(getattr(command, "description", "") or name)
    return [{"command": name, "description": (desc or name)[:256]} for name, desc in list(found.items())[:100]]


def _first(rt: "ChannelPorts", api: "TelegramApi", what: str) -> bool:
    try:
        return bool(rt.redis.set(keys.setup(api.bot_id, what), "1", nx=True, ex=300))
    except Exception:
        return True


def register_commands(rt: "ChannelPorts", cfg: "TelegramConfig", api: "TelegramApi", channel: str) -> None:
    if not cfg.set_commands or not _first(rt, api, "commands"):
        return
    try:
        api.set_my_commands(bot_commands(rt))
    except Exception as exc:
        log.warning("telegram (%s): setMyCommands failed: %s", channel, redact(str(exc), rt.secrets))


def register_webhook(rt: "ChannelPorts", cfg: "TelegramConfig", api: "TelegramApi", channel: str) -> bool:
    """setWebhook(webhook_url, webhook_secret); True when Telegram took it (or another process did)."""
    if not _first(rt, api, "webhook"):
        return True
    try:
        api.set_webhook(cfg.webhook_url, cfg.webhook_secret, ALLOWED_UPDATES)
    except Exception as exc:
        error = redact(str(exc), rt.secrets)[:300]
        log.warning("telegram (%s): setWebhook failed: %s", channel, error)
        rt.redis.delete(keys.setup(api.bot_id, "webhook"))
        _status(rt, channel, state="webhook_failed", last_error=error)
        return False
    _status(rt, channel, state="webhook_set", last_error="")
    log.info("telegram (%s): webhook set", channel)
    return True


def register_in_background(rt: "ChannelPorts", cfg: "TelegramConfig", channel: str) -> threading.Thread:
    """setWebhook, then the command menu, for a channel the web serves: in a thread of its own, so a slow
    Telegram never holds up the web process's start."""
    thread = threading.Thread(target=_register, args=(rt, cfg, channel), name=f"telegram-setup-{channel}",
                              daemon=True)
    thread.start()
    return thread


def _register(rt: "ChannelPorts", cfg: "TelegramConfig", channel: str) -> None:
    from picobot.channels.telegram.api import TelegramApi

    api = TelegramApi(cfg.token, cfg.base_url, redis=rt.redis)
    try:
        if register_webhook(rt, cfg, api, channel):
            register_commands(rt, cfg, api, channel)
    finally:
        api.close()


def _status(rt: "ChannelPorts", channel: str, **fields: Any) -> None:
    try:
        status.write(rt.redis, channel, ttl=status.WEBHOOK_TTL_SECS, **fields)
    except Exception:
        pass
