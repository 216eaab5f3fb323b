"""The redbeat entries of scheduled jobs, written and read as plain Redis data (no Celery import).

Each active job has one entry, `picobot.job:<job_id>`, that wakes beat once, at the job's next
due time, to send `picobot.scheduler.fire(job_id, due_at)` to the `scheduled` queue. All schedule
maths is ours (picobot/scheduler/schedules.py); redbeat only holds the wake-up.

Format (what redbeat 2.4's RedBeatJSONEncoder writes, so `RedBeatSchedulerEntry.from_key` reads it):
- hash `redbeat:picobot.job:<id>`: `definition` with an `rrule` schedule, freq SECONDLY, count 1,
  dtstart = the due time floored to the second (the encoder keeps whole seconds only), and `meta`
  with `last_run_at` one second before dtstart — so the single occurrence is still ahead of it
  (redbeat issue #74: an occurrence equal to the entry's creation time is skipped);
- sorted set `redbeat::schedule`: the entry's key scored by the exact due time, so beat loads the
  entry only when it is due (10 000 idle jobs cost beat nothing per tick).
Once sent, beat re-scores the entry -1 (`mark_sent`, what redbeat's reserve writes: the rrule has no
occurrence left), which beat never loads; the fire then writes the next due time. PicoBeatScheduler
takes a job entry's due time from its score (its exact `due_at`), not from the whole-second rrule (no
early fire), and never needs to load the entry itself.
"""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from typing import Any

from picobot.runtime.task_names import JOB_FIRE_TASK, QUEUE_SCHEDULED

KEY_PREFIX = "redbeat:"  # redbeat's default `redbeat_key_prefix` (worker/celery_app.py keeps it)
SCHEDULE_KEY = KEY_PREFIX + ":schedule"
ENTRY_PREFIX = "picobot.job:"
_RRULE_SECONDLY = 6  # dateutil.rrule.SECONDLY


def entry_name(job_id: str) -> str:
    return ENTRY_PREFIX + job_id


def entry_key(job_id: str) -> str:
    return KEY_PREFIX + ENTRY_PREFIX + job_id


def job_id_of_key(key: str) -> str | None:
    prefix = KEY_PREFIX + ENTRY_PREFIX
    return key[len(prefix):] if key.startswith(prefix) else None


def _datetime(ts: float) -> dict[str, Any]:
    dt = datetime.fromtimestamp(ts, tz=timezone.utc)
    return {"__type__": "datetime", "year": dt.year, "month": dt.month, "day": dt.day, "hour": dt.hour,
            "minute": dt.minute, "second": dt.second, "microsecond": dt.microsecond, "timezone": "UTC"}


def definition(job_id: str, due_at: float) -> str:
    start = math.floor(due_at)
    schedule = {"__type__": "rrule", "freq": _RRULE_SECONDLY, "interval": 1, "wkst": None, "count": 1,
                "bysetpos": None, "bymonth": None, "bymonthday": None, "byyearday": None, "byeaster": None,
                "byweekno": None, "byweekday": None, "byhour": None, "byminute": None, "bysecond": None,
                "dtstart": start, "dtstart_tz": 0}
    return json.dumps({"name": entry_name(job_id), "task": JOB_FIRE_TASK, "args": [job_id, due_at], "kwargs": {},
                       "options": {"queue": QUEUE_SCHEDULED}, "schedule": schedule, "enabled": True})


def meta(due_at: float) -> str:
    return json.dumps({"last_run_at": _datetime(math.floor(due_at) - 1), "total_run_count": 0})


def write(pipe: Any, job_id: str, due_at: float) -> None:
    """Queue the commands that (re)write the job's entry for `due_at` on a Redis pipeline."""
    key = entry_key(job_id)
    pipe.hset(key, mapping={"definition": definition(job_id, due_at), "meta": meta(due_at)})
    pipe.zadd(SCHEDULE_KEY, {key: due_at})


def mark_sent(pipe: Any, job_id: str, now: float) -> None:
    """What redbeat's own reserve writes once an entry is sent: `last_run_at` now and the score -1 (no
    occurrence left; beat loads no entry with a negative score). The fire writes the next due time."""
    key = entry_key(job_id)
    pipe.hset(key, "meta", json.dumps({"last_run_at": _datetime(now), "total_run_count": 1}))
    pipe.zadd(SCHEDULE_KEY, {key: -1})


def delete(pipe: Any, job_id: str) -> None:
    key = entry_key(job_id)
    pipe.zrem(SCHEDULE_KEY, key)
    pipe.delete(key)


def scores(r: Any) -> dict[str, float]:
    """{job_id: score} of every job entry in the live schedule (-1: sent, waiting for its fire)."""
    out: dict[str, float] = {}
    for key, score in r.zscan_iter(SCHEDULE_KEY, match=KEY_PREFIX + ENTRY_PREFIX + "*", count=1000):
        job_id = job_id_of_key(key if isinstance(key, str) else key.decode())
        if job_id is not None:
            out[job_id] = float(score)
    return out


def due_of(args: Any) -> float | None:
    """The due time a job entry's args carry, or None for anything else."""
    if isinstance(args, (list, tuple)) and len(args) == 2 and isinstance(args[1], (int, float)):
        return float(args[1])
    return None
