"""Rate limits at the gateway: messages per chat and per device, new dialogs, open sockets.

Counters live in Redis, so every web process shares them and a Redis flush only forgets
them. Message and dialog limits are fixed windows (the window starts at the first event and
`retry_after` is what is left of it); open sockets are a sorted set of socket ids that each
live socket refreshes, so a socket of a web process that died stops counting within
`SOCKET_TTL_SECS`. When Redis is unavailable nobody is limited (a limit must not become an
outage) and the problem is logged once per outage.

Limits are checked before anything is written to SQL, so a limited input leaves no trace.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import redis

    from picobot.config.schema import RateLimitsConfig

log = logging.getLogger("picobot.gateway.limits")

PREFIX = "picobot:rl:"
MINUTE = 60
HOUR = 3600
SOCKET_TTL_SECS = 60  # a socket refreshes its slot every SOCKET_REFRESH_SECS; a dead one lapses after this
SOCKET_REFRESH_SECS = 10
SOCKET_RETRY_SECS = 10  # a hint: when a slot frees up depends on the device's other sockets


# count one event in each window KEYS[i] of ARGV[i] seconds; the window starts at its first event.
# Returns count and seconds left for each key, in order.
_INCR = """
local out = {}
for i, key in ipairs(KEYS) do
  redis.call('SET', key, 0, 'EX', ARGV[i], 'NX')
  out[#out + 1] = redis.call('INCR', key)
  out[#out + 1] = redis.call('TTL', key)
end
return out
"""


@dataclass(frozen=True)
class Limited:
    """A refusal: what was exceeded, and when to try again (whole seconds, at least 1)."""

    retry_after: int
    text: str


class RateLimits:
    """The gateway's limits over one Redis client; one instance per process (it remembers outages)."""

    def __init__(self, r: "redis.Redis", cfg: "RateLimitsConfig"):
        self.r = r
        self.cfg = cfg
        self._down = False
        self._incr_script = r.register_script(_INCR)  # EVALSHA: one command per message, not a MULTI of six

    # --- messages and dialogs ----------------------------------------------------------------

    def message(self, chat_key: str, device: str | None) -> Limited | None:
        """Count one message of a chat (`channel:chat_id`) and device; a Limited if either is over."""
        windows = [(f"msg:chat:{chat_key}", self.cfg.messages_per_chat_per_minute, MINUTE, "this chat",
                    "messages_per_chat_per_minute")]
        if device:
            windows.append((f"msg:dev:{device}", self.cfg.messages_per_device_per_minute, MINUTE, "this device",
                            "messages_per_device_per_minute"))
        return self._count(windows, "messages", "a minute")

    def new_dialog(self, chat_key: str) -> Limited | None:
        return self._count([(f"new:chat:{chat_key}", self.cfg.new_dialogs_per_chat_per_hour, HOUR, "this chat",
                             "new_dialogs_per_chat_per_hour")], "new dialogs", "an hour")

    def _count(self, windows: list[tuple[str, int, int, str, str]], what: str, per: str) -> Limited | None:
        live = [w for w in windows if w[1] > 0]
        if not live:
            return None
        counts = self._guarded(lambda: self._incr([(_key(key), secs) for key, _, secs, _, _ in live]))
        if counts is None:
            return None
        for (_, limit, _, whom, name), (count, ttl) in zip(live, counts):
            if count > limit:
                return Limited(max(1, ttl), f"Too many {what} from {whom}: at most {limit} in {per} "
                                            f"(gateway.rate_limits.{name}). Try again in {max(1, ttl)} s.")
        return None

    def _incr(self, keys: list[tuple[bytes, int]]) -> list[tuple[int, int]]:
        replies = self._incr_script(keys=[key for key, _ in keys], args=[secs for _, secs in keys])
        return [(int(replies[i]), int(replies[i + 1])) for i in range(0, len(replies), 2)]

    # --- open sockets ------------------------------------------------------------------------

    def open_socket(self, device: str) -> "SocketSlot | Limited":
        """Take one of the device's socket slots, or say why not."""
        slot = SocketSlot(self, _key("sock:" + device))
        limit = self.cfg.sockets_per_device
        if limit <= 0:
            return slot
        count = self._guarded(lambda: slot.take())
        if count is None or count <= limit:
            return slot
        slot.release()
        return Limited(SOCKET_RETRY_SECS, f"This device already has {limit} open connections "
                                          "(gateway.rate_limits.sockets_per_device); close one and reconnect.")

    # --- Redis trouble -----------------------------------------------------------------------

    def _guarded(self, fn: Any) -> Any:
        """fn(), or None when Redis fails (fail open); the first failure of an outage is logged."""
        try:
            result = fn()
        except Exception as exc:
            if not self._down:
                self._down = True
                log.warning("rate limits are off until Redis answers again (%s)", type(exc).__name__)
            return None
        if self._down:
            self._down = False
            log.info("rate limits are back on (Redis answers)")
        return result


def _key(name: str) -> bytes:
    # surrogatepass: an id that is not valid UTF-8 text still names a counter of its own
    return (PREFIX + name).encode("utf-8", "surrogatepass")


class SocketSlot:
    """One open socket's entry in its device's set; refreshed while the socket lives."""

    def __init__(self, limits: RateLimits, key: bytes):
        self.limits = limits
        self.key = key
        self.member = uuid.uuid4().hex
        self._refreshed = 0.0

    def take(self) -> int:
        """Add this socket and return how many the device has (this one included)."""
        now = time.time()
        # add first, then count: two sockets racing for the last slot may both lose, never both win
        pipe = self.limits.r.pipeline(transaction=True)
        pipe.zremrangebyscore(self.key, "-inf", now)
        pipe.zadd(self.key, {self.member: now + SOCKET_TTL_SECS})
        pipe.zcard(self.key)
        pipe.expire(self.key, SOCKET_TTL_SECS)
        self._refreshed = time.monotonic()
        return int(pipe.execute()[2])

    def keep(self) -> None:
        """Call now and then while the socket is open (cheap: it writes at most every few seconds)."""
        if self.limits.cfg.sockets_per_device <= 0 or time.monotonic() - self._refreshed < SOCKET_REFRESH_SECS:
            return
        self._refreshed = time.monotonic()
        self.limits._guarded(self._refresh)

    def _refresh(self) -> None:
        pipe = self.limits.r.pipeline(transaction=True)
        pipe.zadd(self.key, {self.member: time.time() + SOCKET_TTL_SECS})
        pipe.expire(self.key, SOCKET_TTL_SECS)
        pipe.execute()

    def release(self) -> None:
        if self.limits.cfg.sockets_per_device > 0:
            self.limits._guarded(lambda: self.limits.r.zrem(self.key, self.member))
