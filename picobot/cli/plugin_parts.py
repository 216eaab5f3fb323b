"""What plugins bring to the command line: `picobot run <plugin>:<process>[:<instance>]` (their long-running
processes) and `picobot <name> ...` for the commands they register (`picobot_cli`).

`picobot run` checks the target here, then becomes `python -m worker.commands run …` (a process records
platform events, which queues their processing: that needs the task system, which the core does not import).
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.config import Config
    from picobot.plugins import PluginHost
    from picobot.plugins.contributions import ProcessSpec


def add_run_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("run", help="run a plugin's long-running process: <plugin>:<process>[:<instance>]")
    p.add_argument("target", help="e.g. qq:connection:qq (the instance: a channel key; optional when there is one)")
    return p


def _host(config: "Config") -> "PluginHost":
    from picobot.app import build_plugins

    return build_plugins(config)


def process_specs(host: "PluginHost") -> list["ProcessSpec"]:
    from picobot.plugins.contributions import check_process

    return host.contributions("picobot_processes", check_process)


def resolve(config: "Config", host: "PluginHost", target: str) -> tuple["ProcessSpec", str]:
    """The process and instance `target` names; ValueError saying what exists when it names none."""
    from picobot.runtime.processes import parse_target

    plugin, name, instance = parse_target(target)
    specs = process_specs(host)
    spec = next((s for s in specs if (s.plugin, s.name) == (plugin, name)), None)
    if spec is None:
        known = ", ".join(f"{s.plugin}:{s.name}" for s in specs) or "none"
        raise ValueError(f"no plugin process {plugin}:{name} (known: {known})")
    names = spec.instance_names(config)
    if instance is None:
        if len(names) != 1:
            raise ValueError(f"{plugin}:{name} runs for {', '.join(names) or 'nothing in this configuration'}; "
                             f"name one as {plugin}:{name}:<instance>")
        instance = names[0]
    elif instance not in names:
        raise ValueError(f"{plugin}:{name} has no instance {instance!r} in this configuration "
                         f"(it has: {', '.join(names) or 'none'})")
    return spec, instance


def planned(config: "Config") -> list[tuple[str, str]]:
    """(label, target) of every plugin process instance this configuration runs (`picobot up` starts them)."""
    host = _host(config)
    found = []
    for spec in process_specs(host):
        try:
            names = spec.instance_names(config)
        except Exception as exc:
            host.report(spec.plugin, "picobot_processes", f"{spec.name}: instances() failed: {type(exc).__name__}: {exc}")
            print(f"picobot: plugin process {spec.plugin}:{spec.name} not started ({type(exc).__name__}: {exc})",
                  file=sys.stderr)
            continue
        found += [(f"{spec.plugin}:{spec.name} ({name})", f"{spec.plugin}:{spec.name}:{name}") for name in names]
    return found


def run(config: "Config", args: argparse.Namespace) -> int:
    try:
        spec, instance = resolve(config, _host(config), args.target)
    except ValueError as exc:
        print(f"picobot run: {exc}", file=sys.stderr)
        return 2
    from picobot.cli.processes import exec_argv

    return exec_argv([sys.executable, "-m", "worker.commands", "run", f"{spec.plugin}:{spec.name}:{instance}"])


def serve(config: "Config", target: str, queue: Any) -> int:
    """Run one plugin process until SIGTERM or Ctrl-C (worker/commands.py, with the task queue)."""
    from picobot.app import build_runtime
    from picobot.logs.setup import setup_logging
    from picobot.runtime.plugin_ports import ports_for
    from picobot.runtime.processes import serve as serve_process

    host = _host(config)
    try:
        spec, instance = resolve(config, host, target)
    except ValueError as exc:
        print(f"picobot run: {exc}", file=sys.stderr)
        return 2
    setup_logging(config)
    rt = build_runtime(config, queue, migrate=True, plugins=host)
    try:
        return serve_process(ports_for(rt, spec.plugin), spec, instance, status_redis=rt.redis)
    finally:
        rt.close()


# ------------------------------------------------------------------ commands plugins register


def plugin_command(argv: list[str], taken: frozenset[str]) -> int | None:
    """Run `picobot <name> …` when a plugin registered <name>; None when none did (argparse then says so)."""
    if not argv or argv[0].startswith("-") or argv[0] in taken:
        return None
    from picobot.config.loader import load_config
    from picobot.errors import ConfigError
    from picobot.plugins.contributions import check_cli
    from picobot.runtime.plugin_ports import ports_for

    try:
        config = load_config()
    except ConfigError:
        return None  # the built-in parser's run reports it
    host = _host(config)
    commands = host.contributions("picobot_cli", check_cli)
    found = next((c for c in commands if c.name == argv[0] and c.name not in taken), None)
    if found is None:
        return None
    command = found.command
    try:
        rt = _command_runtime(config, host, found.name)
    except ConfigError as exc:
        print(f"picobot: {exc}", file=sys.stderr)
        return 2
    ports = ports_for(rt, found.plugin)
    try:
        return _invoke(found, command, argv, ports)
    finally:
        rt.close()


def _command_runtime(config: "Config", host: "PluginHost", name: str) -> Any:
    """The runtime a plugin command's ports stand on: config, database, Redis; it queues nothing (the core does
    not import the task system), so a command that must send work records it for a worker to find."""
    from picobot.app import build_runtime
    from picobot.cli.no_queue import NoQueue

    return build_runtime(config, NoQueue(f"picobot {name}"), plugins=host)


def _invoke(found: Any, command: Any, argv: list[str], ports: Any) -> int:
    """Run a click command (its context's `obj` is the plugin's PluginPorts) or a function (argv[, ports])."""
    if hasattr(command, "main"):  # click
        try:
            result = command.main(args=argv[1:], prog_name=f"picobot {found.name}", standalone_mode=False, obj=ports)
        except SystemExit as exc:
            return int(exc.code or 0) if not isinstance(exc.code, str) else 1
        except Exception as exc:
            usage = getattr(exc, "show", None)
            if callable(usage) and type(exc).__module__.startswith("click"):
                usage()
                return int(getattr(exc, "exit_code", 2))
            print(f"picobot {found.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
            return 1
        return result if isinstance(result, int) and not isinstance(result, bool) else 0
    import inspect

    try:
        takes_ports = len(inspect.signature(command).parameters) >= 2
    except (TypeError, ValueError):
        takes_ports = False
    try:
        result = command(argv[1:], ports) if takes_ports else command(argv[1:])
    except Exception as exc:
        print(f"picobot {found.name}: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    return result if isinstance(result, int) and not isinstance(result, bool) else 0
