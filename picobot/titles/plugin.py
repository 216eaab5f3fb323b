"""Titles on the plugin SDK: after a turn that gave a dialog its first answer, enqueue the title task."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from picobot.domain.messages import text_of
from picobot.plugins import hookimpl
from picobot.titles import TITLE_TASK

if TYPE_CHECKING:
    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.titles")

# Dialogs that are API traffic or silent runs (/v1 requests, webhook runs, silent scheduled jobs): nobody
# browses them, so a title would only cost a model call each.
UNBROWSED_CHANNELS = frozenset({"openai_api", "webhook", "scheduler"})


def first_answer(turn: "TurnView") -> bool:
    """True when this committed turn answered and its dialog had no answer before it."""
    if not turn.committed or turn.status != "completed" or not turn.final_text.strip():
        return False
    return not any(m.role == "assistant" and text_of(m.content).strip() for m in turn.history)


class TitlesPlugin:
    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(TITLE_TASK, _write_title, queue="maintenance")

    @hookimpl
    def picobot_turn_finished(self, turn: "TurnView", ports: "Ports") -> None:
        """The title task for a dialog's first answer; the task itself decides whether one is due (SQL)."""
        if not ports.config.titles.enabled or turn.channel in UNBROWSED_CHANNELS or not first_answer(turn):
            return
        try:
            ports.queue.enqueue_background(TITLE_TASK, [turn.session_id])
        except Exception:  # the turn is answered; the dialog keeps its preview
            log.exception("could not enqueue the title of %s", turn.session_id)


def _write_title(ports: "Ports", session_id: str) -> str:
    """Name a dialog after its first answer, once (see picobot.titles.writer)."""
    from picobot.titles.writer import write_title

    return write_title(ports, session_id)
