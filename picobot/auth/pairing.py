"""Device pairing: one-time codes, long-lived device tokens, and the limit on failed attempts.

`picobot pair` (on the server) makes a code; a browser trades it for a token at /pair.
The database keeps only SHA-256 hashes of codes and tokens, so a copy of it (or a backup)
lets nobody in. Codes are short enough to type, so they are short-lived, single use, and
failed attempts are limited per client address (in Redis: the counters are disposable).

The terminal client on the server machine skips the manual step: it can reach the
database, so it issues itself a token and keeps it in <home>/cli/token (mode 0600).
"""

from __future__ import annotations

import secrets
import socket
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from picobot.auth.token_file import cli_token_path, locked, read_cli_token, write_private
from picobot.auth.tokens import clock, digest, is_stale, new_id, new_secret, presentable
from picobot.coord import keys
from picobot.storage import pairing as store

if TYPE_CHECKING:
    import redis

    from picobot.config import Config
    from picobot.storage.db import Database

# No 0/O, 1/I/L: a code read off a terminal and typed on a phone must survive that.
ALPHABET = "ABCDEFGHJKMNPQRSTUVWXYZ23456789"
CODE_LEN = 8  # 31**8 ≈ 8.5e11; with 5 tries per 5 min per address, guessing is hopeless
CODE_TTL_SECS = 600
MAX_FAILURES = 5
FAILURE_WINDOW_SECS = 300
KINDS = ("browser", "cli", "api")


def normalize_code(text: str) -> str:
    """What the user typed, as the code: case, spaces and dashes do not matter."""
    return "".join(ch for ch in text.upper() if ch not in " -\t")


def display_code(code: str) -> str:
    return f"{code[:4]}-{code[4:]}" if len(code) == CODE_LEN else code


@dataclass(frozen=True)
class Device:
    id: str
    name: str
    kind: str
    created_at: float
    last_used_at: float | None
    revoked_at: float | None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class IssuedCode:
    code: str
    expires_at: float

    @property
    def display(self) -> str:
        return display_code(self.code)


@dataclass(frozen=True)
class IssuedToken:
    token: str  # shown once; never stored
    device: Device


def _device(row: Any) -> Device:
    return Device(id=row.id, name=row.name, kind=row.kind, created_at=row.created_at,
                  last_used_at=row.last_used_at, revoked_at=row.revoked_at)


class Pairing:
    """Codes and tokens against the database. Stateless apart from `db`; `now` is injectable for tests."""

    def __init__(self, db: "Database", code_ttl: float = CODE_TTL_SECS):
        self.db = db
        self.code_ttl = code_ttl

    def new_code(self, now: float | None = None) -> IssuedCode:
        now = clock(now)
        code = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LEN))
        with self.db.write() as s:
            store.purge_codes(s, now)
            store.add_code(s, digest(code), now, self.code_ttl)
        return IssuedCode(code, now + self.code_ttl)

    def redeem(self, code: str, name: str, kind: str = "browser", now: float | None = None) -> IssuedToken | None:
        """Trade a code for a token; None if the code is wrong, expired or already used."""
        code = normalize_code(code)
        if len(code) != CODE_LEN or any(ch not in ALPHABET for ch in code):
            return None
        now = clock(now)
        with self.db.write() as s:
            if not store.consume_code(s, digest(code), now):
                return None
            return self._issue(s, name, kind, now)

    def issue_token(self, name: str, kind: str = "cli", now: float | None = None) -> IssuedToken:
        """A token without a code: for callers that already have the database (the local CLI)."""
        with self.db.write() as s:
            return self._issue(s, name, kind, clock(now))

    def _issue(self, s: Any, name: str, kind: str, now: float) -> IssuedToken:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        token = new_secret()
        row = store.add_device(s, new_id("dev_", 5), digest(token), name or kind, kind, now)
        return IssuedToken(token, _device(row))

    def verify(self, token: str | None, now: float | None = None) -> Device | None:
        if not presentable(token):
            return None
        now = clock(now)
        with self.db.read() as s:
            row = store.find_live(s, digest(token))
            if row is None:
                return None
            device = _device(row)
        if is_stale(device.last_used_at, now):
            with self.db.write() as s:
                store.touch(s, device.id, now)
        return device

    def devices(self, include_revoked: bool = False) -> list[Device]:
        with self.db.read() as s:
            return [_device(r) for r in store.list_devices(s, include_revoked)]

    def revoke(self, device_id: str, now: float | None = None) -> bool:
        with self.db.write() as s:
            return store.revoke(s, device_id, clock(now))


class FailureLimiter:
    """At most `limit` failed pairing attempts per client address per window (fixed window)."""

    PREFIX = keys.PAIRING_FAILURES_PREFIX

    def __init__(self, r: "redis.Redis", limit: int = MAX_FAILURES, window: int = FAILURE_WINDOW_SECS):
        self.r = r
        self.limit = limit
        self.window = window

    def retry_after(self, client: str) -> int | None:
        """Seconds until `client` may try again, or None if it may try now."""
        key = self.PREFIX + client
        count = self.r.get(key)
        if count is None or int(count) < self.limit:
            return None
        ttl = self.r.ttl(key)
        return max(1, int(ttl)) if ttl and ttl > 0 else self.window

    def failed(self, client: str) -> None:
        key = self.PREFIX + client
        pipe = self.r.pipeline()
        pipe.set(key, 0, ex=self.window, nx=True)  # the window starts at the first failure
        pipe.incr(key)
        pipe.execute()

    def clear(self, client: str) -> None:
        self.r.delete(self.PREFIX + client)


# --- where to pair, and the terminal's own token ----------------------------------------


def base_url(config: "Config") -> str:
    """The address a person on this machine opens: gateway.public_url if set, else host:port."""
    if config.gateway.public_url:
        return config.gateway.public_url.rstrip("/")
    host = config.gateway.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    host = f"[{host}]" if ":" in host else host
    return f"http://{host}:{config.gateway.port}"


def pairing_url(config: "Config", code: str) -> str:
    return f"{base_url(config)}/pair?code={code}"


def local_cli_token(config: "Config", renew: bool = False) -> str:
    """The terminal's token on the server machine, issued through the database on first use.

    `renew` replaces a token the gateway refused (revoked, or a new database).
    """
    from picobot.storage.db import Database

    path = cli_token_path(config.home)
    with locked(path):
        if not renew and (token := read_cli_token(config.home)):
            return token
        db = Database(config.database_url)
        try:
            db.migrate()  # idempotent; the chat client may run before the gateway ever did
            issued = Pairing(db).issue_token(f"terminal on {socket.gethostname()}", kind="cli")
        finally:
            db.dispose()
        write_private(path, issued.token + "\n")
        return issued.token
