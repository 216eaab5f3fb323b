"""Config and builtin jobs into SQL at start (and at each sync): `upsert_config_jobs(rt)`.

- every `scheduler.jobs` entry is upserted with source "config"; a config job gone from the file is
  deleted from SQL (its redbeat entry goes at the next sync);
- `builtin.memory_maintenance_daily` (`0 */4 * * *`, internal_event memory_maintenance) while memory
  maintenance is enabled; `builtin.session_cleanup` (hourly, internal_event session_cleanup) only
  when gateway.session_ttl_secs is set. A builtin no longer wanted is deleted.
Idempotent: an unchanged job keeps its state (paused stays paused), next_due_at and version; a changed
definition is replaced (version+1, due times counted afresh from now). `enabled: false` in the file
pauses the job. A bad config job is logged and skipped; the others still land.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from picobot.runtime.task_names import MEMORY_MAINTENANCE_CRON, MEMORY_MAINTENANCE_JOB
from picobot.scheduler.jobs import Job, JobError, parse_job
from picobot.scheduler.schedules import next_due
from picobot.storage import jobs as store

if TYPE_CHECKING:
    from picobot.config.schema import Config
    from picobot.runtime.ports import Ports

log = logging.getLogger(__name__)

SESSION_CLEANUP_JOB = "builtin.session_cleanup"
SESSION_CLEANUP_CRON = "0 * * * *"
_DEFINITION = ("kind", "schedule", "target", "payload", "timezone")


def builtin_jobs(config: "Config") -> list[dict[str, Any]]:
    """The builtin jobs this config wants, as job JSON."""
    jobs = []
    if config.memory.enabled and config.memory.maintenance_enabled:
        jobs.append({"id": MEMORY_MAINTENANCE_JOB, "kind": "internal_event",
                     "schedule": {"type": "cron", "expression": MEMORY_MAINTENANCE_CRON},
                     "payload": {"event": "memory_maintenance"}})
    if config.gateway.session_ttl_secs:
        jobs.append({"id": SESSION_CLEANUP_JOB, "kind": "internal_event",
                     "schedule": {"type": "cron", "expression": SESSION_CLEANUP_CRON},
                     "payload": {"event": "session_cleanup"}})
    return jobs


def wanted_jobs(config: "Config") -> tuple[list[Job], dict[str, str]]:
    """(the jobs the config and builtins define, {id: error} of the bad ones)."""
    out: list[Job] = []
    errors: dict[str, str] = {}
    sources = [(j.model_dump(mode="json", exclude_none=True), "config") for j in config.scheduler.jobs]
    sources += [(j, "builtin") for j in builtin_jobs(config)]
    for data, source in sources:
        try:
            # now=0: an `at` already past is not an error here; it is stored completed
            job = parse_job(data, config, now=0.0)
        except JobError as e:
            errors[str(data.get("id"))] = f"{source} job {data.get('id')!r}: {e}"
            continue
        job.source = source
        out.append(job)
    return out, errors


def upsert_config_jobs(rt: "Ports", now: float | None = None) -> dict[str, int]:
    """Bring SQL's config and builtin jobs in line with the config; returns counts."""
    now = time.time() if now is None else now
    jobs, errors = wanted_jobs(rt.config)
    for err in errors.values():
        log.error("scheduler: %s (skipped)", err)
    stats = {"created": 0, "updated": 0, "unchanged": 0, "deleted": 0, "invalid": len(errors)}
    for job in jobs:
        for attempt in (1, 2):  # two processes starting at once: the loser retries and finds the row
            try:
                with rt.db.begin() as conn:
                    stats[_upsert_one(conn, job, rt.config, now)] += 1
                break
            except IntegrityError:
                if attempt == 2:
                    raise
    keep = {j.id for j in jobs} | set(errors)  # a bad entry keeps its old row (fix the file, not lose history)
    with rt.db.begin() as conn:
        for source in ("config", "builtin"):
            for row in store.list_jobs(conn, source=source):
                if row["id"] not in keep:
                    store.delete_job(conn, row["id"])
                    stats["deleted"] += 1
    return stats


def _upsert_one(conn: Any, job: Job, config: "Config", now: float) -> str:
    old = store.get(conn, job.id, for_update=True)
    new = job.row()
    if old is not None and old["source"] == "user":
        log.warning("scheduler: config job %r replaces a user job of the same id", job.id)
    if old is not None and old["source"] == job.source and all(old[k] == new[k] for k in _DEFINITION):
        if job.state == "paused" and old["state"] == "active":  # enabled: false in the file
            store.set_state(conn, job.id, "paused", now=now)
            return "updated"
        return "unchanged"
    nxt = next_due(job.schedule, now, job.tz(config), now)
    paused = job.state == "paused" or (old is not None and old["state"] == "paused")
    state = "completed" if nxt is None else "paused" if paused else "active"
    store.upsert(conn, {**new, "state": state, "created_at": now, "next_due_at": nxt,
                        "last_due_at": None if old is None else old["last_due_at"]}, now=now)
    return "created" if old is None else "updated"
