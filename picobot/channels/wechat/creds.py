"""The login a QR scan gave: {token, baseUrl, userId, botId, savedAt} at `cred_path`, mode 600.

Written atomically (a temp file created 0600, then renamed), so a poller reading it never sees half a
file; the poller notices a new login by the token changing and resumes without a restart. After -14 the
file is kept with `expiredAt` set: the login command, /health and the adapter then know a new
login is needed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Credentials:
    token: str
    base_url: str
    user_id: str = ""
    bot_id: str = ""
    saved_at: float = 0.0
    expired_at: float = 0.0  # iLink answered -14 for this token: a new login is needed

    @property
    def usable(self) -> bool:
        return not self.expired_at


def load(path: Path) -> Credentials | None:
    """The saved login, or None when there is none (or it can not be read)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or not isinstance(data.get("token"), str) or not data["token"]:
        return None
    return Credentials(token=data["token"], base_url=str(data.get("baseUrl") or ""),
                       user_id=str(data.get("userId") or ""), bot_id=str(data.get("botId") or ""),
                       saved_at=float(data.get("savedAt") or 0), expired_at=float(data.get("expiredAt") or 0))


def save(path: Path, creds: Credentials) -> None:
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    body: dict[str, Any] = {"token": creds.token, "baseUrl": creds.base_url, "userId": creds.user_id,
                            "botId": creds.bot_id, "savedAt": creds.saved_at or time.time()}
    if creds.expired_at:
        body["expiredAt"] = creds.expired_at
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        json.dump(body, f)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def mark_expired(path: Path, token: str) -> bool:
    """Note that `token` is dead (-14), unless a newer login replaced it meanwhile; True when noted."""
    current = load(path)
    if current is None or current.token != token or current.expired_at:
        return False
    from dataclasses import replace

    save(path, replace(current, expired_at=time.time()))
    return True


def discard(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except FileNotFoundError:
        return False
