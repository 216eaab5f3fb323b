"""Per-session lease in Redis: one turn at a time per session, across all workers."""

from __future__ import annotations

import secrets
from typing import Any

import redis

from picobot.runtime import keys

_RENEW = """
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not v then
  if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 2 end
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


_scripts: dict[tuple[int, str], Any] = {}


def _script(r: redis.Redis, source: str) -> Any:
    """A registered script (EVALSHA; reloaded by redis-py after a Redis restart), one per client."""
    key = (id(r), source)
    script = _scripts.get(key)
    if script is None:
        script = _scripts[key] = r.register_script(source)
    return script


class Lease:
    def __init__(self, r: redis.Redis, session_id: str, ttl_secs: float, key: str | None = None):
        self.r = r
        self.key = key or keys.lease(session_id)  # another key: a lease on other work of the session
        self.token = secrets.token_hex(12)
        self.ttl_ms = max(1000, int(ttl_secs * 1000))

    def acquire(self) -> bool:
        return bool(self.r.set(self.key, self.token, nx=True, px=self.ttl_ms))

    def renew(self) -> bool:
        """Extend the lease; re-take it if Redis lost it. False: another holder has it."""
        return bool(_script(self.r, _RENEW)(keys=[self.key], args=[self.token, self.ttl_ms]))

    def renew_in(self, pipe: redis.client.Pipeline) -> None:
        """Queue a renew() on a pipeline; its result is truthy when the lease is (again) ours."""
        _script(self.r, _RENEW)(keys=[self.key], args=[self.token, self.ttl_ms], client=pipe)

    def release(self) -> None:
        _script(self.r, _RELEASE)(keys=[self.key], args=[self.token])


def is_held(r: redis.Redis, session_id: str) -> bool:
    return bool(r.exists(keys.lease(session_id)))
