"""RedisLease: one holder at a time for a named job across processes (SET NX PX, renewed, token-checked).

The Feishu long connection takes `picobot:feishu:ws:<app_id>` with it, so however many
`picobot feishu` processes run, one of them holds the app's connection and the others wait.
A holder that dies stops renewing; its lease expires after `ttl_ms` and a standby takes it.
Renew and release only touch the key while it still holds this lease's random token.
"""

from __future__ import annotations

import secrets

import redis

_RENEW = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0"


def feishu_lock_key(app_id: str) -> str:
    return f"picobot:feishu:ws:{app_id}"


class RedisLease:
    def __init__(self, client: redis.Redis, key: str, ttl_ms: int):
        self.client = client
        self.key = key
        self.ttl_ms = ttl_ms
        self.token = secrets.token_hex(16)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it (or we already do); True when we hold it."""
        if self.client.set(self.key, self.token, nx=True, px=self.ttl_ms):
            return True
        return self.renew()

    def renew(self) -> bool:
        """Extend our lease; False when it expired or another process holds it now."""
        return bool(self.client.eval(_RENEW, 1, self.key, self.token, self.ttl_ms))

    def release(self) -> None:
        self.client.eval(_RELEASE, 1, self.key, self.token)

    def holder(self) -> str | None:
        """The token of the current holder (for status and tests)."""
        value = self.client.get(self.key)
        return value.decode() if isinstance(value, bytes) else value
