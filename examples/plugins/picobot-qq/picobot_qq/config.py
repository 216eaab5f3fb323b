"""A QQ channel's own keys (`channels.<key>`), the plugin's settings (`plugins.settings.qq`) and the
start-time check of both.

    "channels": {"qq": {"type": "qq", "enabled": true, "ws_url": "ws://127.0.0.1:3001",
                        "access_token": "…", "allow_from": ["12345678"]}}

Exactly one way to reach the platform: `ws_url` (PicoBot dials it), `reverse_path` (the platform
dials PicoBot at `/qq/ws/<key>`) or `http_url` (PicoBot calls the platform's HTTP API; the platform
POSTs events to `/qq/<key>`, signed with `secret`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from pydantic import BaseModel, Field

FORWARD, REVERSE, HTTP = "forward", "reverse", "http"
_QQ_ID = re.compile(r"^[1-9][0-9]{4,11}$")


class QQSettings(BaseModel):
    """`plugins.settings.qq`: shared by every QQ channel."""

    api_timeout_secs: float = Field(15.0, gt=0, le=120)  # one OneBot API call (a send), relayed or over HTTP
    max_media_bytes: int = Field(10 * 1024 * 1024, gt=0, le=64 * 1024 * 1024)  # an image or file, either way
    max_frame_bytes: int = Field(4 * 1024 * 1024, gt=0, le=64 * 1024 * 1024)  # a larger event is dropped
    max_message_chars: int = Field(4500, ge=100, le=20000)  # QQ cuts longer messages; answers are split
    sent_ids_ttl_secs: int = Field(3 * 24 * 3600, gt=0)  # how long a reply to the bot's message counts as addressed


def reverse_path_for(key: str) -> str:
    return f"/qq/ws/{key}"


def events_path_for(key: str) -> str:
    return f"/qq/{key}"


@dataclass(frozen=True)
class QQChannel:
    """The keys of one QQ channel, read from its config (a dict or the kernel's pydantic model)."""

    key: str
    enabled: bool = False
    ws_url: str = ""
    reverse_path: str = ""
    http_url: str = ""
    access_token: str = ""
    secret: str = ""
    allow_from: tuple[str, ...] = ("*",)

    @classmethod
    def of(cls, key: str, cfg: Any) -> "QQChannel":
        raw = cfg if isinstance(cfg, dict) else cfg.model_dump()

        def text(name: str) -> str:
            value = raw.get(name)
            return value if isinstance(value, str) else ""

        allow = raw.get("allow_from")
        allow = tuple(str(a).strip() for a in allow) if isinstance(allow, list) else ("*",)
        return cls(key, bool(raw.get("enabled")), text("ws_url"), text("reverse_path"), text("http_url").rstrip("/"),
                   text("access_token"), text("secret"), allow)

    @property
    def mode(self) -> str:
        return FORWARD if self.ws_url else REVERSE if self.reverse_path else HTTP

    def allows(self, sender: str) -> bool:
        return not self.allow_from or "*" in self.allow_from or sender in self.allow_from


def is_qq(cfg: Any) -> bool:
    return getattr(cfg, "type", None) == "qq" or (isinstance(cfg, dict) and cfg.get("type") == "qq")


def forward_channels(config: Any) -> list[str]:
    """The enabled QQ channels PicoBot dials (`ws_url`): one `connection` process each."""
    return [key for key, cfg in config.channels.items()
            if is_qq(cfg) and cfg.enabled and isinstance((cfg.model_extra or {}).get("ws_url"), str)
            and cfg.model_extra["ws_url"]]


def problems(config: Any) -> list[tuple[str, str]]:
    """(key path, why) for each QQ channel's bad keys."""
    found: list[tuple[str, str]] = []
    for key, cfg in config.channels.items():
        if is_qq(cfg):
            found += channel_problems(key, cfg if isinstance(cfg, dict) else cfg.model_dump())
    return found


def channel_problems(key: str, raw: dict[str, Any]) -> list[tuple[str, str]]:
    at = f"channels.{key}"
    found: list[tuple[str, str]] = []
    for name in ("ws_url", "reverse_path", "http_url", "access_token", "secret"):
        if name in raw and not isinstance(raw[name], str):
            found.append((f"{at}.{name}", "must be a string"))
    modes = [name for name in ("ws_url", "reverse_path", "http_url") if isinstance(raw.get(name), str) and raw[name]]
    if len(modes) != 1:
        found.append((at, "needs exactly one of ws_url (forward WebSocket), reverse_path (reverse WebSocket) "
                          f"or http_url (HTTP API), not {', '.join(modes) or 'none'}"))
    found += _url_problem(f"{at}.ws_url", raw.get("ws_url"), ("ws", "wss"))
    found += _url_problem(f"{at}.http_url", raw.get("http_url"), ("http", "https"))
    path = raw.get("reverse_path")
    if isinstance(path, str) and path and path != reverse_path_for(key):
        found.append((f"{at}.reverse_path", f"must be {reverse_path_for(key)!r}: the path PicoBot's web serves "
                                            "this channel's reverse WebSocket at"))
    if isinstance(path, str) and path and not raw.get("access_token"):
        found.append((f"{at}.access_token", "a reverse WebSocket needs one: anyone who reaches the web "
                                            "could pose as the platform otherwise"))
    allow = raw.get("allow_from", ["*"])
    if not isinstance(allow, list):
        found.append((f"{at}.allow_from", "must be a list of QQ ids as strings, or [\"*\"]"))
    else:
        for i, entry in enumerate(allow):
            if not (isinstance(entry, str) and (entry == "*" or _QQ_ID.match(entry))):
                found.append((f"{at}.allow_from[{i}]", f"{str(entry)[:40]!r} is not a QQ id (5-12 digits, "
                                                       "as a string) or \"*\""))
    return found


def _url_problem(at: str, value: Any, schemes: tuple[str, ...]) -> list[tuple[str, str]]:
    if not isinstance(value, str) or not value:
        return []
    try:
        parts = urlsplit(value)
        host = parts.hostname
    except ValueError:
        host, parts = None, None
    if parts is None or parts.scheme not in schemes or not host:
        return [(at, f"must be a {' or '.join(s + '://' for s in schemes)} URL with a host")]
    return []
