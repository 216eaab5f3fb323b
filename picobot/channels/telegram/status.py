"""The intake's heartbeat in Redis (`picobot:telegram:status:<channel>`), and the /health entry built from it.

The poller writes its state after every getUpdates (polling, standby, conflict, unauthorized,
error), the time of the last update and the last error (redacted); the webhook writes the time
of the last update and the outcome of setWebhook. The hash expires: a poller that died leaves no
stale "polling" behind.
"""

from __future__ import annotations

import time
from typing import Any

from picobot.channels.telegram import keys

TTL_SECS = 120  # the poller's: a dead poller's "polling" goes away by itself
WEBHOOK_TTL_SECS = 7 * 86400


def write(r: Any, channel: str, ttl: int = TTL_SECS, **fields: Any) -> None:
    """Merge fields into the heartbeat (best effort: a Redis error is the caller's to ignore)."""
    values = {k: ("" if v is None else str(v)) for k, v in fields.items()}
    values["heartbeat_at"] = f"{time.time():.3f}"
    key = keys.status(channel)
    pipe = r.pipeline()
    pipe.hset(key, mapping=values)
    pipe.expire(key, ttl)
    pipe.execute()


def read(r: Any, channel: str) -> dict[str, str]:
    raw = r.hgetall(keys.status(channel)) or {}
    return {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
            for k, v in raw.items()}


def _age(value: str | None, now: float) -> float | None:
    try:
        return now - float(value) if value else None
    except ValueError:
        return None


def health_entry(r: Any, channel: str, mode: str, poll_timeout: int) -> dict[str, Any]:
    """{"ok", "detail", "mode", "state", "last_update_at", "last_error", …} for /health."""
    now = time.time()
    found = read(r, channel)
    entry: dict[str, Any] = {"mode": mode, "state": found.get("state") or None,
                             "last_update_at": float(found["last_update_at"]) if found.get("last_update_at") else None,
                             "last_error": found.get("last_error") or None}
    since = _age(found.get("last_update_at"), now)
    seen = f"last update {since:.0f} s ago" if since is not None else "no update yet"
    if mode == "webhook":
        ok = found.get("state") != "webhook_failed"
        entry.update(ok=ok, detail=f"webhook: {seen}" if ok else f"setWebhook failed: {entry['last_error']}")
        return entry
    beat = _age(found.get("heartbeat_at"), now)
    if not found or beat is None or beat > poll_timeout + 40:
        entry.update(ok=False, state="stopped",
                     detail=f"no poller is running (start `picobot telegram --channel {channel}`)")
        return entry
    state = found.get("state")
    if state == "polling":
        entry.update(ok=True, detail=f"polling; {seen}")
    else:
        entry.update(ok=False, detail=f"{state}: {entry['last_error'] or 'no detail'}; {seen}")
    return entry
