"""Thin tasks: ids in, a call into picobot/, nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from celery import Celery

from picobot.runtime.sweeper import sweep
from picobot.runtime.task_names import SWEEP_TASK, TURN_TASK
from picobot.runtime.turn_runner import drain_session

if TYPE_CHECKING:
    from picobot.runtime.services import Runtime


def register(app: Celery, runtime: Callable[[], "Runtime"]) -> None:
    """Register the tasks on `app`; `runtime` gives the process's Runtime (built on first use)."""

    @app.task(name=TURN_TASK, ignore_result=True)
    def turn(session_id: str) -> int:
        """Run the session's pending input, one turn at a time."""
        return drain_session(runtime(), session_id)

    @app.task(name=SWEEP_TASK, ignore_result=True)
    def sweep_sessions() -> dict:
        """Re-wake sessions with input but no live lease; mark dead turns interrupted."""
        return sweep(runtime())
