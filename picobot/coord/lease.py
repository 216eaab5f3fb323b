"""Leases in Redis: one holder at a time of a key, across processes and workers.

A lease is the key set to the holder's random token with an expiry (SET NX PX). Renew and release
touch the key only while it still holds this lease's token (compare-and-expire, compare-and-delete
in Lua), so a holder whose lease expired and was taken can never extend or free the new holder's.
A holder that dies stops renewing; its lease expires after the TTL and another can take it.

`Lease` is renewed by its holder's own calls (the turn supervisor renews many at once in one
pipeline, `renew_in`). `KeptLease` renews itself in a thread while held and notes when it was lost.
"""

from __future__ import annotations

import secrets
import threading
import time
from typing import Any

import redis

# acquire: take a free key, or extend it when it is already ours (re-entrant for this token)
_ACQUIRE = """
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 1 end
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# renew: extend while ours; 0 when expired or another holder's
_EXTEND = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
"""
# renew, re-taking a key that vanished (expired, or Redis lost it: a restart, a FLUSHALL): 2 when re-taken
_EXTEND_OR_RETAKE = """
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


def held(r: redis.Redis, key: str) -> bool:
    """Whether anyone holds the lease on `key` now."""
    return bool(r.exists(key))


class Lease:
    """A lease on `key` for `ttl_secs` (at least 1 s), under a random token of its own.

    retake: renew() also takes the key back when it vanished (nobody else holds it), e.g. after a
    Redis restart; without it, renew() is False once the lease expired, and the holder must stop.
    """

    def __init__(self, r: redis.Redis, key: str, ttl_secs: float, *, retake: bool = False):
        self.r = r
        self.key = key
        self.token = secrets.token_hex(16)
        self.ttl_ms = max(1000, int(ttl_secs * 1000))
        self.retake = retake

    def acquire(self) -> bool:
        """Take the lease if nobody holds it (or extend it if we do); True when we hold it now."""
        return bool(_script(self.r, _ACQUIRE)(keys=[self.key], args=[self.token, self.ttl_ms]))

    def acquire_within(self, wait_secs: float, poll_secs: float = 0.02) -> bool:
        """acquire(), trying again every `poll_secs` for up to `wait_secs`; True when we hold it now."""
        deadline = time.monotonic() + wait_secs
        while not self.acquire():
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_secs)
        return True

    def renew(self) -> bool:
        """Extend the lease (re-taking it, with `retake`, if Redis lost it). False: it is not ours."""
        return bool(self._renew_script()(keys=[self.key], args=[self.token, self.ttl_ms]))

    def renew_in(self, pipe: redis.client.Pipeline) -> None:
        """Queue a renew() on a pipeline; its result is truthy when the lease is (again) ours."""
        self._renew_script()(keys=[self.key], args=[self.token, self.ttl_ms], client=pipe)

    def release(self) -> None:
        """Free the key if it still holds our token (an expired lease taken by another stays theirs)."""
        _script(self.r, _RELEASE)(keys=[self.key], args=[self.token])

    def is_held(self) -> bool:
        """Whether this lease holds its key now."""
        value = self.r.get(self.key)
        return (value.decode() if isinstance(value, bytes) else value) == self.token

    def holder(self) -> str | None:
        """The token of the current holder, ours or another's (for status and tests)."""
        value = self.r.get(self.key)
        return value.decode() if isinstance(value, bytes) else value

    def _renew_script(self) -> Any:
        return _script(self.r, _EXTEND_OR_RETAKE if self.retake else _EXTEND)


class KeptLease(Lease):
    """A lease renewed by a thread every `renew_secs` while held; `held` turns False when it was lost.

    Lost means expired or taken (e.g. after a FLUSHALL): the holder finishes the step at hand and
    stops. A Redis error while renewing is ignored (the lease has the rest of its TTL to go).
    """

    def __init__(self, r: redis.Redis, key: str, ttl_secs: float, renew_secs: float):
        super().__init__(r, key, ttl_secs)
        self.renew_secs = renew_secs
        self.held = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def acquire(self) -> bool:
        self.held = super().acquire()
        if self.held and self._thread is None:
            self._thread = threading.Thread(target=self._keep, name=f"lease {self.key}", daemon=True)
            self._thread.start()
        return self.held

    def _keep(self) -> None:
        while not self._stop.wait(self.renew_secs):
            try:
                if not self.renew():
                    self.held = False
                    return
            except redis.RedisError:
                pass

    def release(self) -> None:
        """Stop renewing and free the key; a Redis error is ignored (the lease expires on its own)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.held:
            try:
                super().release()
            except redis.RedisError:
                pass
        self.held = False
