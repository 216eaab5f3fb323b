"""Spend counters in Redis: an atomic check-and-reserve across workers, seeded from the SQL ledger.

A counter is a hash (`t` tokens, `c` micro-dollars, `s` the id of the seed that created it). Before
a model call, one Lua script checks every counter the call falls under (its dialog, its user's day
and month, its job's run and day, the day overall) and, when none would go over its limit with the
call's estimate added, adds the estimate to all of them; otherwise it changes nothing and says which
one is over. After the call the difference between what it used and the estimate is added (settle),
only to counters still holding the same seed: a counter re-created in between was seeded from SQL.

A missing counter (first use, expiry, a Redis restart or FLUSHALL) makes the script answer "seed":
the caller sums the ledger (`usage_records`) for it and creates it only if it is still missing
(first seeder wins), then tries again. So spend survives a flush, and two workers racing for one
user's last tokens can overshoot only by what calls already admitted use beyond their estimates.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import redis

MICRO = 1_000_000  # counters hold cost in micro-dollars (integers: HINCRBY)

# KEYS: counters. ARGV: est_tokens, est_micro, then per counter: limit_tokens, limit_micro (-1: none).
_RESERVE = """
local missing = {}
for i, k in ipairs(KEYS) do
  if redis.call('EXISTS', k) == 0 then missing[#missing + 1] = i end
end
if #missing > 0 then return {'seed', missing} end
local et, ec = tonumber(ARGV[1]), tonumber(ARGV[2])
for i, k in ipairs(KEYS) do
  local v = redis.call('HMGET', k, 't', 'c')
  local t, c = tonumber(v[1]) or 0, tonumber(v[2]) or 0
  local lt, lc = tonumber(ARGV[1 + 2 * i]), tonumber(ARGV[2 + 2 * i])
  if lt >= 0 and t + et > lt then return {'over', i, 't', tostring(t)} end
  if lc >= 0 and c + ec > lc then return {'over', i, 'c', tostring(c)} end
end
local seeds = {}
for i, k in ipairs(KEYS) do
  redis.call('HINCRBY', k, 't', et)
  redis.call('HINCRBY', k, 'c', ec)
  seeds[i] = redis.call('HGET', k, 's') or ''
end
return {'ok', seeds}
"""
# KEYS: counters. ARGV: seed id, then per counter: tokens, micro, ttl seconds. Only missing ones are set.
_SEED = """
for i, k in ipairs(KEYS) do
  if redis.call('EXISTS', k) == 0 then
    redis.call('HSET', k, 't', ARGV[3 * i - 1], 'c', ARGV[3 * i], 's', ARGV[1])
    redis.call('EXPIRE', k, ARGV[3 * i + 1])
  end
end
return 1
"""
# KEYS: counters. ARGV: delta_tokens, delta_micro, then per counter the seed id it was reserved under.
_SETTLE = """
for i, k in ipairs(KEYS) do
  if redis.call('HGET', k, 's') == ARGV[2 + i] then
    redis.call('HINCRBY', k, 't', ARGV[1])
    redis.call('HINCRBY', k, 'c', ARGV[2])
  end
end
return 1
"""


@dataclass(frozen=True)
class Counter:
    """One limit scope a call falls under, with its limits (None: none) and how to rebuild it from SQL."""

    name: str  # the config key path, e.g. "budgets.user.daily" (+ "_tokens" / "_cost_usd" when reported)
    key: str  # the Redis key
    tokens: int | None
    cost_usd: float | None
    ttl_secs: int
    seed: Callable[[], tuple[int, float]]  # (tokens, cost_usd) spent so far, from the ledger


@dataclass(frozen=True)
class Over:
    """A counter the call would push over its limit."""

    counter: Counter
    unit: str  # tokens | cost_usd
    used: float  # tokens, or dollars


@dataclass(frozen=True)
class Reservation:
    keys: tuple[str, ...]
    seeds: tuple[str, ...]
    tokens: int
    micro: int


class Counters:
    """The three scripts on one Redis client."""

    def __init__(self, r: redis.Redis) -> None:
        self.r = r
        self._reserve = r.register_script(_RESERVE)
        self._seed = r.register_script(_SEED)
        self._settle = r.register_script(_SETTLE)

    def reserve(self, counters: Sequence[Counter], tokens: int, cost_usd: float) -> Reservation | Over:
        """Add the estimate to every counter, or to none and say which would go over."""
        micro = to_micro(cost_usd)
        keys = [c.key for c in counters]
        args: list[Any] = [tokens, micro]
        for c in counters:
            args += [-1 if c.tokens is None else c.tokens, -1 if c.cost_usd is None else to_micro(c.cost_usd)]
        for _attempt in range(3):  # a counter may vanish again between the seed and the retry
            answer = self._reserve(keys=keys, args=args)
            kind = _text(answer[0])
            if kind == "ok":
                return Reservation(tuple(keys), tuple(_text(s) for s in answer[1]), tokens, micro)
            if kind == "over":
                counter, unit, used = counters[int(answer[1]) - 1], _text(answer[2]), int(_text(answer[3]))
                return Over(counter, "tokens" if unit == "t" else "cost_usd", used if unit == "t" else used / MICRO)
            self.seed([counters[int(i) - 1] for i in answer[1]])
        raise redis.RedisError("budget counters kept vanishing while being seeded")

    def seed(self, counters: Sequence[Counter]) -> None:
        """Create the missing counters from the ledger (a counter created meanwhile is left as it is)."""
        args: list[Any] = [secrets.token_hex(8)]
        for c in counters:
            tokens, cost = c.seed()
            args += [tokens, to_micro(cost), c.ttl_secs]
        self._seed(keys=[c.key for c in counters], args=args)

    def settle(self, reservation: Reservation, tokens: int, cost_usd: float) -> None:
        """Replace the estimate by what the call used (0, 0 releases it: the call failed)."""
        args: list[int | str] = [tokens - reservation.tokens, to_micro(cost_usd) - reservation.micro,
                                 *reservation.seeds]
        self._settle(keys=list(reservation.keys), args=args)


def to_micro(usd: float) -> int:
    return int(round(usd * MICRO))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
