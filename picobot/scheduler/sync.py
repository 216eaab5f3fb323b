"""Keep redbeat's live schedule equal to SQL: push/remove one job's entry, rebuild them all.

SQL is the authority; a redbeat entry only wakes beat at a job's `next_due_at`. `rebuild` runs
at beat start, after a Redis flush and every 30 s (task picobot.scheduler.sync): it adds missing
entries, fixes stale due times, deletes entries of deleted/paused/completed jobs, handles jobs
that are overdue (beat or Redis was down) per `scheduler.misfire_policy`, and settles runs whose
worker died (picobot/scheduler/recovery.py).

Overdue, decided here and documented in docs/SCHEDULER.md:
- a due time at most LATE_OK_SECS old is simply fired now (a beat restart or a queue backlog is
  not a miss);
- older: every due time but the newest is recorded as a `missed` run (at most MAX_MISSED_RECORDED
  per job and rebuild; the count of the rest is logged), and the newest one fires when the policy
  is `run_once` and it is within `scheduler.misfire_grace_secs`, else it is recorded `missed` too.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from picobot.scheduler import redbeat_entries as entries

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")

LATE_OK_SECS = 60.0
MAX_MISSED_RECORDED = 100
MAX_SCAN = 100_000  # due times enumerated for one overdue job at most (a 1 s interval down for a day)
IN_FLIGHT_SECS = 10.0  # an entry beat sent (-1) this recently is left to its fire task


def push_job(rt: "Ports", job_id: str) -> None:
    """Write the job's entry for its next due time, or remove it (paused, completed, deleted, disabled)."""
    from picobot.storage import jobs as store

    from picobot.scheduler.fire import job_view

    with rt.db.connect() as conn:
        job = job_view(store.get(conn, job_id))
    due = _wake_at(rt, job)
    with rt.redis.pipeline() as pipe:
        if due is None:
            entries.delete(pipe, job_id)
        else:
            entries.write(pipe, job_id, due)
        pipe.execute()


def remove_job(rt: "Ports", job_id: str) -> None:
    with rt.redis.pipeline() as pipe:
        entries.delete(pipe, job_id)
        pipe.execute()


def _wake_at(rt: "Ports", job: Any) -> float | None:
    if job is None or not rt.config.scheduler.enabled or job.state != "active" or job.next_due_at is None:
        return None
    return float(job.next_due_at)


@dataclass
class Plan:
    """What to do with one overdue job: record `missed`, maybe fire one due time, then wait for `next_due`."""

    missed: list[float] = field(default_factory=list)
    more_missed: int = 0  # missed due times beyond MAX_MISSED_RECORDED (logged, not recorded)
    fire: float | None = None
    next_due: float | None = None


def overdue_plan(job: Any, tz: str, now: float, policy: str, grace: float) -> Plan:
    """The misfire decision for a job whose next_due_at is more than LATE_OK_SECS in the past."""
    from picobot.scheduler.schedules import next_due

    due_times = [float(job.next_due_at)]
    nxt = next_due(job.schedule, due_times[-1], tz, job.created_at)
    while nxt is not None and nxt <= now and len(due_times) < MAX_SCAN:
        due_times.append(nxt)
        nxt = next_due(job.schedule, nxt, tz, job.created_at)
    if nxt is not None and nxt <= now:  # still behind after MAX_SCAN: jump to the future
        nxt = next_due(job.schedule, now, tz, job.created_at)
    plan = Plan(next_due=nxt)
    newest = due_times[-1]
    if now - newest <= LATE_OK_SECS or (policy == "run_once" and now - newest <= grace):
        plan.fire = newest
        due_times = due_times[:-1]
    plan.missed = due_times[-MAX_MISSED_RECORDED:]
    plan.more_missed = len(due_times) - len(plan.missed)
    return plan


def rebuild(rt: "Ports") -> dict[str, int]:
    """Make the job entries exactly match SQL; handle overdue jobs; settle runs of dead workers."""
    from picobot.scheduler.config_jobs import upsert_config_jobs
    from picobot.scheduler.fire import job_view
    from picobot.scheduler.recovery import settle_stale_runs
    from picobot.storage import jobs as store

    stats = {"pushed": 0, "removed": 0, "missed": 0, "fired": 0, "settled": 0}
    try:
        upsert_config_jobs(rt)
    except Exception:  # a bad config job must not stop every other job from firing
        log.exception("scheduler: upserting the config jobs failed")
    now = time.time()
    enabled = rt.config.scheduler.enabled
    with rt.db.connect() as conn:
        active = {j["id"]: job_view(j) for j in store.list_jobs(conn, states=("active",))} if enabled else {}
    active = {k: j for k, j in active.items() if j.state == "active" and j.next_due_at is not None}
    live = entries.scores(rt.redis)
    default_tz = rt.config.time.timezone
    with rt.redis.pipeline(transaction=False) as pipe:
        for job_id in live.keys() - active.keys():
            entries.delete(pipe, job_id)
            stats["removed"] += 1
        for job_id, job in active.items():
            due = float(job.next_due_at)
            if now - due > LATE_OK_SECS:
                rescheduled = _misfire(rt, job, now, default_tz, stats)
                if rescheduled is None:
                    entries.delete(pipe, job_id)
                    continue
                due = rescheduled
            score = live.get(job_id)
            if score is not None and abs(score - due) < 1e-6:
                continue
            if score == -1 and now - due < IN_FLIGHT_SECS:
                continue  # just sent: its fire task advances it
            entries.write(pipe, job_id, due)
            stats["pushed"] += 1
        pipe.execute()
    stats["settled"] = settle_stale_runs(rt)
    if any(stats.values()):
        log.info("scheduler sync: %s", stats)
    return stats


def _misfire(rt: "Ports", job: Any, now: float, default_tz: str, stats: dict[str, int]) -> float | None:
    """Record the missed due times of an overdue job and return the due time its entry should wake at."""
    from picobot.storage import jobs as store

    cfg = rt.config.scheduler
    plan = overdue_plan(job, job.timezone or default_tz, now, cfg.misfire_policy, float(cfg.misfire_grace_secs))
    wake = plan.fire if plan.fire is not None else plan.next_due
    with rt.db.begin() as conn:
        for due in plan.missed:
            if store.record_missed(conn, job.id, due):
                stats["missed"] += 1
        if plan.missed:
            store.set_outcome(conn, job.id, "missed")
        # compare-and-set: a fire that advanced the job meanwhile wins
        if not store.set_next_due(conn, job.id, wake, last_due_at=plan.missed[-1] if plan.missed else None,
                                  completed=wake is None, expect_next=job.next_due_at):
            return None if job.next_due_at is None else _current_due(conn, job.id)
    if plan.more_missed:
        log.warning("job %s missed %d more due times (not recorded one by one)", job.id, plan.more_missed)
    if plan.fire is not None:
        stats["fired"] += 1  # the entry wakes at once; its fire advances next_due as usual
    return wake


def _current_due(conn: Any, job_id: str) -> float | None:
    from picobot.storage import jobs as store

    row = store.get(conn, job_id)
    return None if row is None or row["state"] != "active" or row["next_due_at"] is None else float(row["next_due_at"])
