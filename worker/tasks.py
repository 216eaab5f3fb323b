"""Thin tasks: ids in, a call into picobot/, nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING

from picobot.runtime.sweeper import sweep
from picobot.runtime.turn_runner import drain_session

if TYPE_CHECKING:
    from worker.celery_app import PicoCelery


def register(app: "PicoCelery") -> None:
    @app.task(name="picobot.turn", ignore_result=True)
    def turn(session_id: str) -> int:
        """Run the session's pending input, one turn at a time."""
        return drain_session(app.runtime, session_id)

    @app.task(name="picobot.sweep", ignore_result=True)
    def sweep_sessions() -> dict:
        """Re-wake sessions with input but no live lease; mark dead turns interrupted."""
        return sweep(app.runtime)
