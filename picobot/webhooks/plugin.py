"""Inbound webhooks on the plugin SDK: config checks, a run settled in its turn's commit, recovery.

A run's outcome is written inside the transaction that commits its turn (`picobot_turn_committed`,
also called when an input is given up on), so a completed turn can never leave its run `accepted`;
the callback is enqueued after that commit. The sweeper's tick re-enqueues callbacks whose task
was lost and settles runs whose input ended without a turn (cancelled by /stop, or deleted).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any, Callable

from picobot.plugins import hookimpl
from picobot.runtime.task_names import HOOK_CALLBACK_TASK

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.webhooks")

SOCKET_CHANNELS = ("web", "cli_chat")
SETTLE_GRACE_SECS = 30.0  # an input that just ended is the turn's to settle; only older ones are swept
CALLBACK_GRACE_SECS = 5.0


class WebhooksPlugin:
    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(HOOK_CALLBACK_TASK, _send_callback, queue="outbound")

    @hookimpl
    def picobot_config_check(self, config: Any) -> list[tuple[str, str]]:
        from picobot.webhooks.template import TemplateError, compile_template

        problems = []
        for name, hook in config.hooks.items():
            try:
                compile_template(hook.prompt)
            except TemplateError as exc:
                problems.append((f"hooks.{name}.prompt", str(exc)))
            channel = hook.deliver.channel if hook.deliver is not None else None
            if channel is not None and channel not in SOCKET_CHANNELS and channel not in config.channels:
                known = ", ".join([*SOCKET_CHANNELS, *sorted(config.channels)])
                problems.append((f"hooks.{name}.deliver.channel", f"unknown channel {channel[:64]!r} (known: {known})"))
        return problems

    @hookimpl
    def picobot_turn_committed(self, conn: "Connection", turn: "TurnView", ports: "Ports") -> Callable[[], None] | None:
        from picobot.webhooks import runs

        run_ids = [r for r in map(runs.run_of_input, turn.input_ids) if r]
        if not run_ids:
            return None
        status = runs.COMPLETED if turn.status == "completed" else runs.FAILED
        error = None if status == runs.COMPLETED else (turn.error or f"the turn ended {turn.status}")
        text = turn.final_text if status == runs.COMPLETED else (turn.partial_text or None)
        due = []
        for run_id in run_ids:
            callback = _has_callback(conn, ports, run_id)
            if runs.settle(conn, run_id, status, text, error, turn.turn_id or None, callback) and callback:
                due.append(run_id)
        return (lambda: _enqueue(ports, due)) if due else None

    @hookimpl
    def picobot_sweep(self, ports: "Ports") -> None:
        from picobot.webhooks import runs

        now = time.time()
        with ports.db.connect() as conn:
            due = runs.due_callbacks(conn, now - CALLBACK_GRACE_SECS)
            stale = runs.unsettled(conn, now - SETTLE_GRACE_SECS)
        for row in stale:
            _settle_late(ports, row)
        _enqueue(ports, due)


def _has_callback(conn: "Connection", ports: "Ports", run_id: str) -> bool:
    from picobot.webhooks import runs

    run = runs.get(conn, run_id)
    hook = None if run is None else ports.config.hooks.get(run["hook"])
    return bool(hook is not None and hook.callback_url)


def _settle_late(ports: "Ports", row: Any) -> None:
    from picobot.webhooks import runs

    done = row.turn_status == "completed"
    error = None if done else (row.error or f"its input ended {row.input_status or 'missing'}")
    with ports.db.begin() as conn:
        callback = _has_callback(conn, ports, row.id)
        settled = runs.settle(conn, row.id, runs.COMPLETED if done else runs.FAILED, row.final_text if done else None,
                              error, row.turn_id, callback)
    if settled:
        log.info("hook run %s settled by the sweeper (%s)", row.id, "completed" if done else error)
        if callback:
            _enqueue(ports, [row.id])


def _enqueue(ports: "Ports", run_ids: list[str]) -> None:
    from picobot.webhooks.callback import enqueue

    for run_id in run_ids:
        enqueue(ports, run_id)


def _send_callback(ports: "Ports", run_id: str) -> str:
    """One attempt at an inbound webhook run's signed result POST (see picobot.webhooks.callback)."""
    from picobot.webhooks.callback import send

    return send(ports, run_id)
