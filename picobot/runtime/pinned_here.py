"""Sessions whose turns run on this worker host, remembered so their turns skip placement's SQL read.

A chat pinned to a host leaves it only when another host judges it dead: its last heartbeat in
Redis older than placement.HOST_TTL_SECS. So an answer "run it here" stays true while this host's
own heartbeats have gone out without a long gap. An entry counts only when it was looked up after
the start of the current unbroken run of beats (no gap over `fresh_secs`) and while the last beat is
at most `fresh_secs` old; a gap restarts the run, which drops every earlier entry. With no beat at all
(the web, the CLI, placement off) nothing is remembered.
"""

from __future__ import annotations

import threading
import time
from typing import Callable


class PinnedHere:
    def __init__(self, fresh_secs: float, max_entries: int = 10_000,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.fresh_secs = fresh_secs
        self.max_entries = max_entries
        self.clock = clock
        self._beats: dict[str, tuple[float, float]] = {}  # host -> (unbroken run of beats since, last beat)
        self._seen: dict[tuple[str, str], float] = {}  # (host, session) -> when its route was asked
        self._lock = threading.Lock()

    def beat(self, host: str) -> None:
        """`host`'s heartbeat reached Redis just now."""
        now = self.clock()
        with self._lock:
            since, last = self._beats.get(host, (now, now))
            if now - last > self.fresh_secs:  # a gap: other hosts may have judged this one dead
                since = now
            self._beats[host] = (since, now)

    def knows(self, host: str, session_id: str) -> bool:
        """The session's turns run on `host`, as looked up within the current run of beats."""
        now = self.clock()
        with self._lock:
            beats = self._beats.get(host)
            if beats is None or now - beats[1] > self.fresh_secs:
                return False
            asked = self._seen.get((host, session_id))
            return asked is not None and asked >= beats[0]

    def remember(self, host: str, session_id: str, asked: float) -> None:
        """Placement answered "here" for the session, from a lookup started at `asked` (this clock)."""
        with self._lock:
            if host not in self._beats:
                return
            key = (host, session_id)
            self._seen.pop(key, None)  # re-inserted last: the oldest entries go first
            self._seen[key] = asked
            while len(self._seen) > self.max_entries:
                del self._seen[next(iter(self._seen))]
