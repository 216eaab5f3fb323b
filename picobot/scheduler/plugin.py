"""The scheduler on the plugin SDK: `scheduler_manage`, and a job run's outcome when its turn ends."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl
from picobot.runtime.task_names import JOB_FIRE_BATCH_TASK, JOB_FIRE_TASK, JOB_SYNC_TASK

if TYPE_CHECKING:
    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")


class SchedulerPlugin:
    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(JOB_FIRE_TASK, _fire, queue="scheduled")
        register(JOB_FIRE_BATCH_TASK, _fire_batch, queue="scheduled")
        register(JOB_SYNC_TASK, _sync, queue="scheduled")

    @hookimpl
    def picobot_beat(self, register: Any) -> None:
        # scheduled jobs: their redbeat entries rebuilt/repaired from SQL (also at beat start and after a flush)
        register(JOB_SYNC_TASK, JOB_SYNC_TASK, every=SYNC_EVERY_SECS, queue="scheduled", expires=SYNC_EVERY_SECS)

    @hookimpl
    def picobot_tools(self, ports: "Ports") -> list[Any]:
        if not ports.config.scheduler.enabled:
            return []
        from picobot.scheduler.tool import SchedulerTool

        return [SchedulerTool(ports)]

    @hookimpl
    def picobot_turn_finished(self, turn: "TurnView", ports: "Ports") -> None:
        """A scheduled job's input (always the first of its turn: mode queue) ended: record its run."""
        pmids = [i for i in turn.input_ids if i.startswith("job:")]
        if not pmids:
            return
        from picobot.scheduler.fire import on_turn_finished

        try:
            on_turn_finished(ports, pmids, turn.turn_id, turn.status, turn.error)
        except Exception:  # the scheduler's sync settles the run from the input's turn later
            log.exception("turn %s: recording its scheduled job run failed", turn.turn_id)


SYNC_EVERY_SECS = 30


def _fire(ports: "Ports", job_id: str, due_at: float | None = None, manual: bool = False) -> str:
    """Fire one due time of a scheduled job, exactly once (claimed in SQL)."""
    from picobot.scheduler.fire import fire

    return fire(ports, job_id, due_at, manual=bool(manual))


def _fire_batch(ports: "Ports", pairs: list) -> dict:
    """Fire many due times at once ([[job_id, due_at], ...] from beat), each exactly once."""
    from picobot.scheduler.batch import fire_batch

    return fire_batch(ports, pairs)


def _sync(ports: "Ports") -> dict:
    """Make redbeat's job entries match SQL; handle overdue jobs and runs of dead workers."""
    from picobot.scheduler.sync import rebuild

    return rebuild(ports)
