"""redbeat, hardened for a Redis that may lose everything.

Stock redbeat exits when its lock vanishes and fires nothing after a FLUSHALL (its static
entries live only in Redis), and it keeps one producer whose broken connection makes every
send fail with only a log line. Here a vanished lock is re-taken when nobody else holds it,
static entries are re-installed when they are gone, and a failed send gets a new producer.

Scheduled jobs (picobot/scheduler): their entries are rebuilt from SQL at start and after a flush
(picobot.scheduler.sync.rebuild); a job entry is due when its `due_at` argument has passed (not
its whole-second rrule, and read from the schedule's score without loading the entry). The jobs due
in a tick are marked sent in one Redis pipeline and sent as batches of at most FIRE_BATCH_MAX (job_id, due_at) pairs (picobot.scheduler.fire_batch);
at most scheduler.worker_queue_capacity tasks wait in the `scheduled` queue (a batch counts as one)
— due jobs beyond that stay in the schedule for the next tick. After a tick that sent jobs, the next
waits at least BURST_GATHER_SECS, so a burst goes out in a few large batches.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from redbeat import RedBeatScheduler
from redbeat.schedulers import get_redis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import LockError
from redis.exceptions import TimeoutError as RedisTimeoutError

from picobot.runtime import broker_queues
from picobot.runtime.task_names import JOB_FIRE_BATCH_TASK, QUEUE_SCHEDULED
from picobot.scheduler import redbeat_entries
from picobot.scheduler.batch import FIRE_BATCH_MAX

log = logging.getLogger("picobot.beat")

# After a tick that sent due jobs, the next one waits at least this long: a burst (many jobs due within a
# second) goes out as a few batches of many jobs, not hundreds of batches of one or two, which on PostgreSQL
# all ran at once and queued on the same rows. A job due while beat is idle still goes out on time.
BURST_GATHER_SECS = 0.1


class PicoBeatScheduler(RedBeatScheduler):
    _job_room: int | None = None  # job fires the `scheduled` queue may still take this tick (None: not counted yet)
    _due_jobs: list[tuple[str, float]] | None = None  # jobs found due this tick, sent as batches at its end

    def setup_schedule(self) -> None:
        self._add_plugin_entries()
        super().setup_schedule()
        self._rebuild_jobs()

    def _add_plugin_entries(self) -> None:
        """The periodic tasks the plugins register (`picobot_beat`: the scheduler's sync, memory maintenance, …),
        into the static schedule redbeat installs (once per process; they are the same on every setup)."""
        host = getattr(self.app, "plugins", None)
        if host is None:
            return
        from worker.tasks import plugin_beat_schedule

        self.app.conf.beat_schedule.update(plugin_beat_schedule(host))  # the same entries each time: idempotent

    def _rebuild_jobs(self) -> None:
        runtime = getattr(self.app, "runtime", None)
        if runtime is None:
            return
        try:
            from picobot.scheduler.sync import rebuild

            rebuild(runtime)
        except Exception:  # the periodic sync (every 30 s) tries again
            log.exception("beat: rebuilding the scheduled jobs from SQL failed")

    def tick(self, min: Any = min, **kwargs: Any) -> float:
        try:
            return self._tick(min)
        except (RedisConnectionError, RedisTimeoutError) as exc:  # Redis restarting: wait for it, don't exit
            log.warning("beat: Redis unavailable (%s); retrying", exc)
            return self.max_interval

    def _tick(self, min: Any) -> float:
        if self.lock_key and self.lock is not None:
            try:
                self.lock.extend(int(self.lock_timeout))
            except LockError:
                self._retake_lock()
        self._reinstall_if_flushed()
        self._job_room = None
        self._due_jobs = []
        remaining = []
        try:
            entries, jobs, job_wake = self._select()
            if job_wake is not None:
                wait = job_wake - time.time()
                remaining.append(max(wait, BURST_GATHER_SECS if jobs else 0.001))
            for job_id, due_at in jobs:
                if not self._take_job_room():
                    remaining.append(self.max_interval)  # the queue is full: the next tick tries again
                    break
                self._due_jobs.append((job_id, due_at))
            for entry in entries.values():
                nxt = self.maybe_due(entry, **self._maybe_due_kwargs)
                if nxt:
                    remaining.append(nxt)
        except RuntimeError:
            log.debug("beat: RuntimeError", exc_info=True)
        finally:
            self._send_job_batches()
        return min(remaining + [self.max_interval])

    def _send_job_batches(self) -> None:
        """Mark this tick's due jobs sent (their entries re-scored -1, as redbeat's own reserve does, in
        one pipeline), then send them as batches. A batch that cannot be sent is not lost: the sync
        re-writes the entry of a job whose due time passed with no run (after IN_FLIGHT_SECS)."""
        due, self._due_jobs = self._due_jobs or [], []
        if not due:
            return
        now = time.time()
        with get_redis(self.app).pipeline(transaction=False) as pipe:
            for job_id, _ in due:
                redbeat_entries.mark_sent(pipe, job_id, now)
            pipe.execute()
        pairs = [[job_id, due_at] for job_id, due_at in due]
        for start in range(0, len(pairs), FIRE_BATCH_MAX):
            self._send_batch(pairs[start:start + FIRE_BATCH_MAX])

    def _send_batch(self, pairs: list[list[Any]]) -> None:
        for attempt in (1, 2):
            try:
                self.send_task(JOB_FIRE_BATCH_TASK, args=[pairs], queue=QUEUE_SCHEDULED, producer=self.producer)
                return
            except Exception as exc:  # a dead broker connection: the next send goes through a new producer
                log.warning("beat: sending a batch of %d job fires failed (%s)%s", len(pairs), exc,
                            "; reconnecting" if attempt == 1 else "; the sync re-sends them")
                self.__dict__.pop("producer", None)
                self.__dict__.pop("_maybe_due_kwargs", None)

    @property
    def schedule(self) -> dict[str, Any]:
        return self._select()[0]

    def _select(self) -> tuple[dict[str, Any], list[tuple[str, float]], float | None]:
        """(due and next static entries, due scheduled jobs as (job_id, due_at), the next job's due time).

        redbeat's selection with the exact time: redbeat floors "now" to the second, which made an
        entry due at 12.3 wait until 13 (and only one entry of the next second was peeked at). A job
        entry is never loaded: its key names the job and its score is the exact due time, so a burst
        of 1,000 due jobs costs one round trip, not 1,000 entry loads."""
        now = time.time()
        conf = self.app.redbeat_conf
        client = get_redis(self.app)
        with client.pipeline() as pipe:
            pipe.zrangebyscore(conf.schedule_key, 0, now, withscores=True)
            pipe.zrangebyscore(conf.schedule_key, f"({now}", now + self.max_interval, start=0, num=1, withscores=True)
            due, peek = pipe.execute()
        entries: dict[str, Any] = {}
        jobs: list[tuple[str, float]] = []
        job_wake = None
        for key, score in due + peek:
            key = key.decode() if isinstance(key, bytes) else key
            job_id = redbeat_entries.job_id_of_key(key)
            if job_id is not None:
                if score <= now:
                    jobs.append((job_id, float(score)))
                else:
                    job_wake = float(score)
                continue
            try:
                entry = self.Entry.from_key(key, app=self.app)
            except KeyError:
                log.warning("beat: failed to load %s, removing", key)
                client.zrem(conf.schedule_key, key)
                continue
            entries[entry.name] = entry
        return entries, jobs, job_wake

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
            self.setup_schedule()  # and the scheduled jobs' entries, from SQL

    def _job_due(self, entry: Any) -> tuple[bool, float | None] | None:
        """(due, seconds to wait) of a scheduled job's entry, or None for any other entry."""
        if not entry.name.startswith(redbeat_entries.ENTRY_PREFIX):
            return None
        due_at = redbeat_entries.due_of(entry.args)
        if due_at is None or entry.last_run_at is None or entry.last_run_at.timestamp() >= due_at:
            return False, None  # sent already (redbeat re-scored it -1); its fire task writes the next one
        wait = due_at - time.time()
        if wait > 0:
            return False, wait
        if not self._take_job_room():
            return False, self.max_interval  # the queue is full: the next tick tries again
        return True, None

    def _take_job_room(self) -> bool:
        """Room for one more due job this tick: the `scheduled` queue's free task slots (counted once a
        tick), each a batch of up to FIRE_BATCH_MAX jobs."""
        if self._job_room is None:
            capacity = self.app.picobot_config.scheduler.worker_queue_capacity
            self._job_room = (capacity - self._scheduled_depth()) * FIRE_BATCH_MAX
        if self._job_room <= 0:
            return False
        self._job_room -= 1
        return True

    def _scheduled_depth(self) -> int:
        """Tasks waiting in the `scheduled` queue, on the Redis or RabbitMQ broker."""
        depths = broker_queues.configured_depths(self.app.picobot_config, [QUEUE_SCHEDULED], get_redis(self.app))
        return depths[QUEUE_SCHEDULED]

    def maybe_due(self, entry: Any, **kwargs: Any) -> float | None:
        job = self._job_due(entry)
        is_due, next_time_to_run = entry.is_due() if job is None else job
        if not is_due:
            return next_time_to_run
        due_at = redbeat_entries.due_of(entry.args) if job is not None else None
        if due_at is not None and self._due_jobs is not None:  # sent with the tick's other due jobs, as batches
            self._due_jobs.append((entry.args[0], due_at))
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
