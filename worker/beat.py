"""redbeat, hardened for a Redis that may lose everything.

Stock redbeat exits when its lock vanishes and fires nothing after a FLUSHALL (its static
entries live only in Redis), and it keeps one producer whose broken connection makes every
send fail with only a log line. Here a vanished lock is re-taken when nobody else holds it,
static entries are re-installed when they are gone, and a failed send gets a new producer.
"""

from __future__ import annotations

import logging

from redbeat import RedBeatScheduler
from redbeat.schedulers import get_redis
from redis.exceptions import LockError

log = logging.getLogger("picobot.beat")


class PicoBeatScheduler(RedBeatScheduler):
    def tick(self, min=min, **kwargs):  # type: ignore[no-untyped-def,override]
        if self.lock_key and self.lock is not None:
            try:
                self.lock.extend(int(self.lock_timeout))
            except LockError:
                self._retake_lock()
        self._reinstall_if_flushed()
        remaining = []
        try:
            for entry in self.schedule.values():
                nxt = self.maybe_due(entry, **self._maybe_due_kwargs)
                if nxt:
                    remaining.append(nxt)
        except RuntimeError:
            log.debug("beat: RuntimeError", exc_info=True)
        return min(remaining + [self.max_interval])

    def _retake_lock(self) -> None:
        client = get_redis(self.app)
        if client.exists(self.lock_key):
            raise LockError("another beat holds the lock")  # run exactly one beat: exit by design
        if not self.lock.acquire(blocking=False):
            raise LockError("could not re-take the beat lock")
        log.warning("beat: Redis lost the beat lock (restart or flush); re-took it")

    def _reinstall_if_flushed(self) -> None:
        client = get_redis(self.app)
        if self.app.redbeat_conf.schedule and not client.exists(self.app.redbeat_conf.statics_key):
            log.warning("beat: schedule missing from Redis (restart or flush); re-installing static entries")
            self.setup_schedule()

    def maybe_due(self, entry, **kwargs):  # type: ignore[no-untyped-def]
        is_due, next_time_to_run = entry.is_due()
        if not is_due:
            return next_time_to_run
        try:
            self.apply_async(entry, **kwargs)
        except Exception as exc:  # a dead broker connection: next send goes through a new producer
            log.warning("beat: sending %s failed (%s); reconnecting", entry.name, exc)
            self.__dict__.pop("producer", None)
            self.__dict__.pop("_maybe_due_kwargs", None)
            try:
                self.apply_async(entry, **self._maybe_due_kwargs)
            except Exception:
                log.exception("beat: sending %s failed again", entry.name)
        return next_time_to_run
