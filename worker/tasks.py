"""Thin tasks: ids in, a call into picobot/, nothing else."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from celery import Celery

from picobot.memory.compactor import run_background
from picobot.memory.maintenance import run_maintenance
from picobot.runtime.sweeper import sweep
from picobot.runtime.task_names import (
    CHANNEL_EVENT_TASK, COMPACT_TASK, DELIVER_TASK, HOOK_CALLBACK_TASK, JOB_FIRE_BATCH_TASK, JOB_FIRE_TASK, JOB_SYNC_TASK, MEMORY_MAINTENANCE_TASK, SUBAGENT_TASK, SWEEP_TASK, TURN_TASK,
)
from picobot.runtime.turn_runner import drain_session
from picobot.subagents.background import run_background_run
from picobot.titles import TITLE_TASK

if TYPE_CHECKING:
    from picobot.app import App as Runtime


def register(app: Celery, runtime: Callable[[], "Runtime"]) -> None:
    """Register the tasks on `app`; `runtime` gives the process's Runtime (built on first use)."""

    @app.task(name=TURN_TASK, ignore_result=True, shared=False)
    def turn(session_id: str) -> int:
        """Run the session's pending input, one turn at a time."""
        return drain_session(runtime(), session_id)

    @app.task(name=SWEEP_TASK, ignore_result=True, shared=False)
    def sweep_sessions() -> dict:
        """Re-wake sessions with input but no live lease; mark dead turns interrupted."""
        return sweep(runtime())

    @app.task(name=COMPACT_TASK, ignore_result=True, shared=False)
    def compact(session_id: str, force: bool = False) -> str:
        """Fold the session's older history into a summary (see picobot.memory.compactor)."""
        return run_background(runtime(), session_id, force=bool(force)).status

    @app.task(name=MEMORY_MAINTENANCE_TASK, ignore_result=True, shared=False)
    def memory_maintenance() -> dict:
        """Tidy the memories of the user scopes that changed, then AGENT.md's managed block."""
        return run_maintenance(runtime()).to_dict()

    @app.task(name=TITLE_TASK, ignore_result=True, shared=False)
    def title(session_id: str) -> str:
        """Name a dialog after its first answer, once (see picobot.titles.writer)."""
        from picobot.titles.writer import write_title

        return write_title(runtime(), session_id)

    @app.task(name=SUBAGENT_TASK, ignore_result=True, shared=False)
    def subagent(run_id: str) -> str:
        """Run one background sub-agent run and deliver its result to the parent session."""
        return run_background_run(runtime(), run_id)

    @app.task(name=JOB_FIRE_TASK, ignore_result=True, shared=False)
    def fire_job(job_id: str, due_at: float | None = None, manual: bool = False) -> str:
        """Fire one due time of a scheduled job, exactly once (claimed in SQL)."""
        from picobot.scheduler.fire import fire

        return fire(runtime(), job_id, due_at, manual=bool(manual))

    @app.task(name=JOB_FIRE_BATCH_TASK, ignore_result=True, shared=False)
    def fire_jobs(pairs: list) -> dict:
        """Fire many due times at once ([[job_id, due_at], ...] from beat), each exactly once."""
        from picobot.scheduler.batch import fire_batch

        return fire_batch(runtime(), pairs)

    @app.task(name=JOB_SYNC_TASK, ignore_result=True, shared=False)
    def sync_jobs() -> dict:
        """Make redbeat's job entries match SQL; handle overdue jobs and runs of dead workers."""
        from picobot.scheduler.sync import rebuild

        return rebuild(runtime())

    @app.task(name=DELIVER_TASK, ignore_result=True, shared=False)
    def deliver(channel: str, chat_id: str) -> dict:
        """Deliver the pending outbox rows of one chat, in order (see picobot.channels.delivery)."""
        from picobot.channels.delivery import deliver_lane

        return deliver_lane(runtime(), channel, chat_id)

    @app.task(name=CHANNEL_EVENT_TASK, ignore_result=True, shared=False)
    def channel_event(event_id: int) -> str:
        """Turn one recorded platform event into input (see picobot.channels.events)."""
        from picobot.channels.events import process

        return process(runtime(), int(event_id))

    @app.task(name=HOOK_CALLBACK_TASK, ignore_result=True, shared=False)
    def hook_callback(run_id: str) -> str:
        """One attempt at an inbound webhook run's signed result POST (see picobot.webhooks.callback)."""
        from picobot.webhooks.callback import send

        return send(runtime(), run_id)


def register_plugin_tasks(app: Celery, runtime: Callable[[], "Runtime"]) -> list[str]:
    """Register the tasks plugins contribute (`picobot_tasks`) on `app`; the names registered. A name that is
    taken (PicoBot's own, or another plugin's first) is refused and reported against the plugin."""
    from picobot.plugins.contributions import check_task
    from picobot.runtime.plugin_ports import PluginPorts, ports_for

    host = app.plugins
    names = []
    for spec in host.contributions("picobot_tasks", check_task):
        if spec.name in app.tasks:
            host.report(spec.plugin, "picobot_tasks", f"task {spec.name}: the name is taken; not registered")
            continue
        ports: list[PluginPorts] = []

        def run(*args: Any, _spec: Any = spec, _ports: list[PluginPorts] = ports) -> Any:
            if not _ports:
                _ports.append(ports_for(runtime(), _spec.plugin))
            return _spec.function(_ports[0], *args)

        app.task(name=spec.name, ignore_result=True, shared=False)(run)
        names.append(spec.name)
    return names
