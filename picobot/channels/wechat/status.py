"""A WeChat channel's state for /health and `picobot health`: polling | login_required | standby | error.

The poller (and an adapter that meets -14) write `picobot:wechat:status:<key>` in Redis; with no such
key the credentials file decides (no file: login_required). `login_required` is reported ok=True: the
gateway is healthy and waits for `picobot channels login <key>` (the detail says so).
"""

from __future__ import annotations

import json
import time
from typing import TYPE_CHECKING, Any

from picobot.channels.wechat import keys

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

LOGIN_REQUIRED, POLLING, STANDBY, ERROR, STARTING = "login_required", "polling", "standby", "error", "starting"
STALE_SECS = 120.0  # a poller state not refreshed this long: the poller is not running


def set_state(r: Any, channel: str, state: str, detail: str = "") -> None:
    r.set(keys.status(channel), json.dumps({"state": state, "detail": detail[:300], "at": time.time()}),
          ex=24 * 3600)


def get_state(r: Any, channel: str) -> dict[str, Any] | None:
    raw = r.get(keys.status(channel))
    try:
        value = json.loads(raw) if raw else None
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def login_hint(channel: str) -> str:
    return f"waiting for a QR login: run `picobot channels login {channel}`"


def health_entry(ports: Ports, channel: str) -> dict[str, Any]:
    from picobot.channels.wechat import creds
    from picobot.channels.wechat.config import WeChatConfig

    cfg = WeChatConfig.from_channel(ports.config.channels[channel])
    current = get_state(ports.redis, channel) or {}
    state = str(current.get("state") or "")
    login = creds.load(cfg.credentials_path(ports.config.home))
    if login is None or not login.usable:
        state = LOGIN_REQUIRED
    if state == LOGIN_REQUIRED:
        detail = current.get("detail") if current.get("state") == LOGIN_REQUIRED else ""
        return {"ok": True, "state": LOGIN_REQUIRED, "detail": f"login_required: {detail or login_hint(channel)}"}
    if not state or time.time() - float(current.get("at") or 0) > STALE_SECS:
        return {"ok": True, "state": STARTING,
                "detail": f"no poller is running (start `picobot wechat --channel {channel}`)"}
    detail = current.get("detail")
    return {"ok": state != ERROR, "state": state, "detail": f"{state}: {detail}" if detail else state}
