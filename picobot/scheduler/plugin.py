"""The scheduler on the plugin SDK: `scheduler_manage`, and a job run's outcome when its turn ends."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from picobot.plugins import hookimpl

if TYPE_CHECKING:
    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")


class SchedulerPlugin:
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
