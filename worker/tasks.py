"""Thin tasks: ids in, a call into picobot/, nothing else.

The kernel's two tasks are here (a turn, the sweep); every capability registers its own through
`picobot_tasks` (deliveries, events, compaction, titles, sub-agents, jobs, webhook callbacks), and so does
any plugin: `register_plugin_tasks` puts them on the worker's app as it starts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from celery import Celery

from picobot.runtime.sweeper import sweep
from picobot.runtime.task_names import SWEEP_TASK, TURN_TASK
from picobot.runtime.turn_runner import drain_session

if TYPE_CHECKING:
    from picobot.app import App as Runtime


def register(app: Celery, runtime: Callable[[], "Runtime"]) -> None:
    """Register the kernel's tasks on `app`; `runtime` gives the process's Runtime (built on first use)."""

    @app.task(name=TURN_TASK, ignore_result=True, shared=False)
    def turn(session_id: str) -> int:
        """Run the session's pending input, one turn at a time."""
        return drain_session(runtime(), session_id)

    @app.task(name=SWEEP_TASK, ignore_result=True, shared=False)
    def sweep_sessions() -> dict:
        """Re-wake sessions with input but no live lease; mark dead turns interrupted."""
        return sweep(runtime())


def register_plugin_tasks(app: Celery, runtime: Callable[[], "Runtime"]) -> list[str]:
    """Register the tasks plugins contribute (`picobot_tasks`) on `app`; the names registered. A name that is
    taken (the kernel's, or another plugin's first) is refused and reported against the plugin, and so is a
    `picobot.*` name from a plugin that is not built in. A built-in capability's task gets the process's ports
    (the Ports its code is written against); any other plugin's gets its PluginPorts."""
    from picobot.plugins.contributions import check_task
    from picobot.runtime.plugin_ports import ports_for

    host = app.plugins
    builtin = {s["name"] for s in host.statuses() if s["source"] == "builtin"}
    names = []
    for spec in host.contributions("picobot_tasks", check_task):
        if spec.name in app.tasks:
            host.report(spec.plugin, "picobot_tasks", f"task {spec.name}: the name is taken; not registered")
            continue
        if spec.name.startswith("picobot.") and spec.plugin not in builtin:
            host.report(spec.plugin, "picobot_tasks", f"task {spec.name}: picobot.* is PicoBot's own; not registered")
            continue
        ports: list[Any] = []

        def run(*args: Any, _spec: Any = spec, _ports: list[Any] = ports, _builtin: bool = spec.plugin in builtin,
                **kwargs: Any) -> Any:
            if not _ports:
                _ports.append(runtime() if _builtin else ports_for(runtime(), _spec.plugin))
            return _spec.function(_ports[0], *args, **kwargs)  # keyword arguments too (a job's manual run)

        app.task(name=spec.name, ignore_result=True, shared=False)(run)
        names.append(spec.name)
    return names


def plugin_beat_schedule(host: Any) -> dict[str, dict[str, Any]]:
    """Beat entries the plugins contribute (`picobot_beat`), in Celery's beat_schedule shape."""
    from celery.schedules import crontab

    from picobot.plugins.contributions import check_beat

    schedule: dict[str, dict[str, Any]] = {}
    for entry in host.contributions("picobot_beat", check_beat):
        if entry.name in schedule:
            host.report(entry.plugin, "picobot_beat", f"beat entry {entry.name}: the name is taken")
            continue
        if entry.cron is not None:
            minute, hour, day, month, weekday = entry.cron.split()
            try:
                when: Any = crontab(minute=minute, hour=hour, day_of_month=day, month_of_year=month, day_of_week=weekday)
            except (ValueError, TypeError) as exc:
                host.report(entry.plugin, "picobot_beat", f"beat entry {entry.name}: cron {entry.cron!r}: {exc}")
                continue
        else:
            when = entry.every
        options: dict[str, Any] = {"queue": entry.queue}
        if entry.expires is not None:
            options["expires"] = entry.expires
        schedule[entry.name] = {"task": entry.task, "schedule": when, "args": list(entry.args), "options": options}
    return schedule
