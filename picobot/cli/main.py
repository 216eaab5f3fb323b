"""`picobot <command>`: up, web, worker, beat, flower, chat, pair, memory, jobs, feishu, telegram, wechat, channels, plugins, settings, usage, agents, health, config, migrate.

Each command imports what it needs when it runs: `picobot chat -m` starts once per message, and
the schema, the storage and the pairing stack would cost most of its time.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from picobot.cli.feishu import add_parser as add_feishu_parser
from picobot.cli.telegram import add_parser as add_telegram_parser
from picobot.cli.wechat import add_parser as add_wechat_parser
from picobot.cli.channels import add_parser as add_channels_parser
from picobot.cli.jobs import add_parser as add_jobs_parser
from picobot.cli.memory import add_parser as add_memory_parser
from picobot.cli.pair import add_parser as add_pair_parser
from picobot.cli.apikeys import add_parser as add_apikeys_parser
from picobot.cli.plugins import add_parser as add_plugins_parser
from picobot.cli.settings import add_parser as add_settings_parser
from picobot.cli.usage import add_parser as add_usage_parser
from picobot.cli.agents import add_parser as add_agents_parser
from picobot.errors import ConfigError

if TYPE_CHECKING:
    from picobot.config import Config
    from picobot.config.client import ClientSettings

DEFAULT_READY_TIMEOUT = 10.0  # seconds `picobot chat` waits for the gateway's `ready` frame


def _apply_dotenv() -> None:
    from picobot.config.home import picobot_home
    from picobot.config.loader import apply_dotenv

    apply_dotenv(picobot_home(), Path.cwd())


def _config() -> Config:
    from picobot.config.loader import load_config

    _apply_dotenv()
    return load_config()


def _process_config() -> Config:
    """The config of a long-running process (web, worker, beat, flower, up), with the logging settings of the
    environment checked too: a bad PICOBOT_LOG_LEVEL or PICOBOT_LOG_FORMAT is one line and exit 2 here, not a
    traceback from inside gunicorn or Celery."""
    from picobot.logs.settings import check_logging_environment

    config = _config()
    check_logging_environment(config)
    return config


def _workspace_problem(config: Config) -> int:
    """2 after one line when a worker here could not use the shared workspace (tools.workspace_storage), else 0."""
    problem = config.workspace_storage_problem()
    if problem:
        print(f"picobot: {problem}", file=sys.stderr)
        return 2
    return 0


def _client_settings() -> ClientSettings:
    from picobot.config.client import load_client_settings

    _apply_dotenv()
    return load_client_settings()


def _gateway_url(settings: ClientSettings, explicit: str | None) -> str:
    if explicit:
        return explicit
    host = "127.0.0.1" if settings.host in ("0.0.0.0", "::", "") else settings.host
    if ":" in host and not host.startswith("["):  # an IPv6 address goes in brackets
        host = f"[{host}]"
    return f"ws://{host}:{settings.port}/ws"


def _seconds(text: str) -> float:
    """argparse type: a positive, finite number of seconds."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive number of seconds")
    return value


def _threads(text: str) -> int:
    """argparse type of `picobot worker -c` (imported when used: every command builds this parser)."""
    from picobot.cli.processes import concurrency_argument

    return concurrency_argument(text)


def cmd_up(args: argparse.Namespace) -> int:
    from picobot.cli.processes import up

    demo_port = _demo_environment() if args.demo else None
    config = _process_config()
    if _workspace_problem(config):
        return 2
    if demo_port is not None and not _uses_demo(config):
        print("picobot: --demo runs the built-in demo model only when config.json lists no providers "
              f"(it lists: {', '.join(sorted(config.providers))}); use another PICOBOT_HOME to try the demo.",
              file=sys.stderr)
        return 2
    from picobot.cli.processes import worker_count, worker_environment_problem, worker_nice

    try:
        workers, nice = worker_count(args.workers), worker_nice()
    except ValueError as exc:
        print(f"picobot: {exc}", file=sys.stderr)
        return 2
    problem = worker_environment_problem()  # the workers it starts would stop on it: say so before anything starts
    if problem:
        print(f"picobot: {problem}", file=sys.stderr)
        return 2
    return up(config, with_flower=args.flower, embedded_redis=args.embedded_redis, demo_port=demo_port,
              workers=workers, nice=nice)


def _demo_environment() -> int:
    """Point this process and its children at the demo model on a free loopback port; returns the port."""
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    os.environ.update(OPENAI_BASE_URL=f"http://127.0.0.1:{port}/v1", OPENAI_API_KEY="demo",
                      OPENAI_MODEL="picobot-demo")
    return port


def _uses_demo(config: Config) -> bool:
    provider = config.providers.get("default")
    return provider is not None and provider.base_url == os.environ.get("OPENAI_BASE_URL")


def cmd_web(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, web_argv
    from picobot.storage.schema_head import sqlite_at_head

    config = _process_config()
    # gunicorn runs in this process next, and its master keeps what this imported (storage/schema_head.py)
    if not sqlite_at_head(config.database_url):
        from picobot.storage.db import Database

        db = Database(config.database_url)
        db.migrate()
        db.dispose()  # gunicorn forks its worker next: no connection of this engine goes along
    return exec_argv(web_argv(config, bind=args.bind))


def cmd_worker(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, worker_argv, worker_environment_problem

    if _workspace_problem(_process_config()):
        return 2
    problem = worker_environment_problem()
    if problem:
        print(f"picobot: {problem}", file=sys.stderr)
        return 2
    return exec_argv(worker_argv(concurrency=args.concurrency, queues=args.queues, name=args.name))


def cmd_beat(args: argparse.Namespace) -> int:
    from picobot.cli.processes import beat_argv, exec_argv

    _process_config()
    return exec_argv(beat_argv())


def cmd_flower(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, flower_argv

    _process_config()
    return exec_argv(flower_argv(args.port))


def cmd_migrate(args: argparse.Namespace) -> int:
    from picobot.storage.db import Database

    config = _config()
    Database(config.database_url).migrate()
    print("database schema is up to date")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from picobot.cli.chat import EXIT_UNAVAILABLE, GatewayUnavailable, connect_paired, run_once, stable_chat_id

    for stream in (sys.stdout, sys.stderr):  # text from the gateway may hold what UTF-8 cannot carry
        if isinstance(stream, io.TextIOWrapper):  # a redirected stream (StringIO, a pipe wrapper) has no reconfigure
            stream.reconfigure(errors="backslashreplace")
    settings = _client_settings()
    chat_id = args.chat or stable_chat_id(settings.home)
    url = _gateway_url(settings, args.gateway_url)
    token = args.token or os.environ.get("PICOBOT_TOKEN") or None
    try:
        client = connect_paired(settings, url, chat_id, token, args.ready_timeout)
    except (PermissionError, GatewayUnavailable) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    try:
        if args.message is not None:
            return run_once(client, args.message, args.timeout)
        from picobot.cli.chat_interactive import interactive

        return interactive(client)
    finally:
        client.close()


def cmd_pair(args: argparse.Namespace) -> int:
    from picobot.cli.pair import run

    return run(_config(), args)


def cmd_apikeys(args: argparse.Namespace) -> int:
    from picobot.cli.apikeys import run

    return run(_config(), args)


def cmd_memory(args: argparse.Namespace) -> int:
    from picobot.cli.memory import run

    return run(_config(), args)


def cmd_jobs(args: argparse.Namespace) -> int:
    from picobot.cli.jobs import run

    return run(_config(), args)


def cmd_plugins(args: argparse.Namespace) -> int:
    from picobot.cli.plugins import run

    return run(_config(), args)


def cmd_settings(args: argparse.Namespace) -> int:
    from picobot.cli.settings import run

    return run(_config(), args)


def cmd_usage(args: argparse.Namespace) -> int:
    from picobot.cli.usage import run

    return run(_config(), args)


def cmd_agents(args: argparse.Namespace) -> int:
    from picobot.cli.agents import run

    return run(_config(), args)


def cmd_health(args: argparse.Namespace) -> int:
    from picobot.runtime.health import check_health
    from picobot.app import build_runtime

    from picobot.cli.no_queue import NoQueue

    rt = build_runtime(_config(), NoQueue("a health check"))
    try:
        report = check_health(rt)
    finally:
        rt.close()  # also when embedded in a longer-lived process: no engine or Redis connection left open
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"PicoBot is {report['status']}")
        for name, check in report["checks"].items():
            print(f"  {'ok ' if check['ok'] else 'BAD'} {name:<9} {check.get('detail', '')}")
    return 0 if report["status"] == "ok" else 1


def cmd_feishu(args: argparse.Namespace) -> int:
    from picobot.cli.feishu import run

    return run(_config(), args)


def cmd_telegram(args: argparse.Namespace) -> int:
    from picobot.cli.telegram import run

    return run(_config(), args)


def cmd_wechat(args: argparse.Namespace) -> int:
    from picobot.cli.wechat import run

    return run(_config(), args)


def cmd_channels(args: argparse.Namespace) -> int:
    from picobot.cli.channels import run

    return run(_config(), args)


def cmd_config(args: argparse.Namespace) -> int:
    from picobot.config.secrets import masked
    from picobot.config.unused import warning_lines

    config = _config()
    text = json.dumps(masked(config), indent=2, ensure_ascii=False)
    # JSON allows a lone surrogate ("\ud800") that UTF-8 cannot carry: print it escaped, still valid JSON
    print(text.encode("utf-8", "backslashreplace").decode("utf-8"))
    where = config.config_path or "no config file (defaults and environment)"
    print(f"# loaded from: {where}", file=sys.stderr)
    from picobot.app import channel_types

    for line in warning_lines(config, channel_types(config)):
        print(f"picobot: {line}", file=sys.stderr)
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from picobot.cli.plugin_parts import run

    return run(_process_config(), args)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="picobot", description="PicoBot: a multi-channel AI agent gateway.")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run web, worker and beat on this machine (embedded Redis if needed)")
    up.add_argument("--flower", action="store_true", help="also run Flower on 127.0.0.1:5555")
    up.add_argument("--embedded-redis", action="store_true",
                    help="start a private Redis under the PicoBot home even if one is configured or running")
    up.add_argument("--demo", action="store_true",
                    help="run with the built-in demo model (no key needed): streaming, a tool call, the web UI")
    up.add_argument("--workers", type=int, metavar="N",
                    help="worker processes to run (default: $PICOBOT_WORKERS, else one per CPU core, at most 8)")
    up.set_defaults(fn=cmd_up)
    for name in ("web", "gateway"):
        w = sub.add_parser(name, help="run the web/WebSocket front end (gunicorn)")
        w.add_argument("--bind", help="host:port (default gateway.host:gateway.port)")
        w.set_defaults(fn=cmd_web)
    from picobot.runtime.task_names import WORKER_QUEUES

    wk = sub.add_parser("worker", help="run a Celery worker for turns and maintenance")
    wk.add_argument("-c", "--concurrency", type=_threads, default=None,
                    help="threads, i.e. turns at once (default: $PICOBOT_WORKER_CONCURRENCY, else 200)")
    wk.add_argument("-Q", "--queues", default=WORKER_QUEUES)
    wk.add_argument("-n", "--name", default=None)
    wk.set_defaults(fn=cmd_worker)
    sub.add_parser("beat", help="run the scheduler (Celery beat with redbeat)").set_defaults(fn=cmd_beat)
    fl = sub.add_parser("flower", help="run Flower (task monitoring)")
    fl.add_argument("--port", type=int, default=5555)
    fl.set_defaults(fn=cmd_flower)
    sub.add_parser("migrate", help="create or upgrade the database schema").set_defaults(fn=cmd_migrate)
    for name in ("chat", "agent"):
        c = sub.add_parser(name, help="chat from the terminal over /ws")
        c.add_argument("-m", "--message", help="send one message, print the final reply and exit")
        c.add_argument("--chat", help="chat id (default: this machine's stable terminal chat id)")
        c.add_argument("--gateway-url", "--url", dest="gateway_url", help="ws://host:port/ws")
        c.add_argument("--timeout", type=_seconds, default=300.0, help="seconds to wait for a reply with -m")
        c.add_argument("--ready-timeout", type=_seconds, default=DEFAULT_READY_TIMEOUT,
                       help=f"seconds to wait for the gateway to connect and send `ready` before giving up "
                            f"(default {DEFAULT_READY_TIMEOUT:g})")
        c.add_argument("--token", help="device token for a gateway on another machine (or PICOBOT_TOKEN); "
                       "on the server itself the terminal pairs on its own")
        c.set_defaults(fn=cmd_chat)
    add_pair_parser(sub).set_defaults(fn=cmd_pair)
    add_apikeys_parser(sub).set_defaults(fn=cmd_apikeys)
    add_memory_parser(sub).set_defaults(fn=cmd_memory)
    add_jobs_parser(sub).set_defaults(fn=cmd_jobs)
    add_feishu_parser(sub).set_defaults(fn=cmd_feishu)
    add_telegram_parser(sub).set_defaults(fn=cmd_telegram)
    add_wechat_parser(sub).set_defaults(fn=cmd_wechat)
    add_channels_parser(sub).set_defaults(fn=cmd_channels)
    add_plugins_parser(sub).set_defaults(fn=cmd_plugins)
    add_settings_parser(sub).set_defaults(fn=cmd_settings)
    from picobot.cli.plugin_parts import add_run_parser

    add_run_parser(sub).set_defaults(fn=cmd_run)
    add_usage_parser(sub).set_defaults(fn=cmd_usage)
    add_agents_parser(sub).set_defaults(fn=cmd_agents)
    h = sub.add_parser("health", help="check database, Redis, workers, beat and provider")
    h.add_argument("--json", action="store_true")
    h.set_defaults(fn=cmd_health)
    sub.add_parser("config", help="print the effective configuration, secrets masked").set_defaults(fn=cmd_config)
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    words = sys.argv[1:] if argv is None else argv
    if words and not words[0].startswith("-"):
        taken = frozenset(next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices)
        if words[0] not in taken:  # a command a plugin registers (picobot_cli)?
            from picobot.cli.plugin_parts import plugin_command

            _apply_dotenv()
            code = plugin_command(list(words), taken)
            if code is not None:
                return code
    args = parser.parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"picobot: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
