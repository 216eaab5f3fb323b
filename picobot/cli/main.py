"""`picobot <command>`: up, web, worker, beat, flower, chat, pair, health, config, migrate."""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from picobot.config import Config, apply_dotenv, load_config, picobot_home
from picobot.errors import ConfigError


def _config() -> Config:
    apply_dotenv(picobot_home(), Path.cwd())
    return load_config()


def _gateway_url(config: Config, explicit: str | None) -> str:
    if explicit:
        return explicit
    host = "127.0.0.1" if config.gateway.host in ("0.0.0.0", "::", "") else config.gateway.host
    return f"ws://{host}:{config.gateway.port}/ws"


def cmd_up(args: argparse.Namespace) -> int:
    from picobot.cli.processes import up

    return up(_config(), with_flower=args.flower, embedded_redis=args.embedded_redis)


def cmd_web(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, web_argv
    from picobot.storage.db import Database

    config = _config()
    Database(config.database_url).migrate()
    return exec_argv(web_argv(config, bind=args.bind))


def cmd_worker(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, worker_argv

    _config()
    return exec_argv(worker_argv(concurrency=args.concurrency, queues=args.queues, name=args.name))


def cmd_beat(args: argparse.Namespace) -> int:
    from picobot.cli.processes import beat_argv, exec_argv

    _config()
    return exec_argv(beat_argv())


def cmd_flower(args: argparse.Namespace) -> int:
    from picobot.cli.processes import exec_argv, flower_argv

    _config()
    return exec_argv(flower_argv(args.port))


def cmd_migrate(args: argparse.Namespace) -> int:
    from picobot.storage.db import Database

    config = _config()
    Database(config.database_url).migrate()
    print("database schema is up to date")
    return 0


def cmd_chat(args: argparse.Namespace) -> int:
    from picobot.cli.chat import connect_paired, interactive, run_once, stable_chat_id

    config = _config()
    chat_id = args.chat or stable_chat_id(config.home)
    url = _gateway_url(config, args.gateway_url)
    try:
        client = connect_paired(config, url, chat_id, args.token or os.environ.get("PICOBOT_TOKEN") or None)
    except PermissionError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        print(f"error: cannot reach the gateway at {url}: {exc}\n"
              "Is PicoBot running? Start it with `picobot up`.", file=sys.stderr)
        return 2
    try:
        if args.message is not None:
            return run_once(client, args.message, args.timeout)
        return interactive(client)
    finally:
        client.close()


def cmd_pair(args: argparse.Namespace) -> int:
    from picobot.cli.pair import run

    return run(_config(), args)


def cmd_health(args: argparse.Namespace) -> int:
    from picobot.runtime.health import check_health
    from picobot.runtime.services import build_runtime

    class _NoQueue:
        def enqueue_turn(self, session_id: str) -> None:
            raise RuntimeError("health checks do not enqueue")

    rt = build_runtime(_config(), _NoQueue())
    report = check_health(rt)
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        print(f"PicoBot is {report['status']}")
        for name, check in report["checks"].items():
            print(f"  {'ok ' if check['ok'] else 'BAD'} {name:<9} {check.get('detail', '')}")
    return 0 if report["status"] == "ok" else 1


def cmd_config(args: argparse.Namespace) -> int:
    from picobot.config.secrets import masked

    config = _config()
    print(json.dumps(masked(config), indent=2, ensure_ascii=False))
    where = config.config_path or "no config file (defaults and environment)"
    print(f"# loaded from: {where}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="picobot", description="PicoBot: a multi-channel AI agent gateway.")
    sub = p.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="run web, worker and beat on this machine (embedded Redis if needed)")
    up.add_argument("--flower", action="store_true", help="also run Flower on 127.0.0.1:5555")
    up.add_argument("--embedded-redis", action="store_true",
                    help="start a private Redis under the PicoBot home even if one is configured or running")
    up.set_defaults(fn=cmd_up)
    for name in ("web", "gateway"):
        w = sub.add_parser(name, help="run the web/WebSocket front end (gunicorn)")
        w.add_argument("--bind", help="host:port (default gateway.host:gateway.port)")
        w.set_defaults(fn=cmd_web)
    wk = sub.add_parser("worker", help="run a Celery worker for turns and maintenance")
    wk.add_argument("-c", "--concurrency", type=int, default=int(os.environ.get("PICOBOT_WORKER_CONCURRENCY", 200)))
    wk.add_argument("-Q", "--queues", default="turns,maintenance")
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
        c.add_argument("--timeout", type=float, default=300.0, help="seconds to wait for a reply with -m")
        c.add_argument("--token", help="device token for a gateway on another machine (or PICOBOT_TOKEN); "
                       "on the server itself the terminal pairs on its own")
        c.set_defaults(fn=cmd_chat)
    from picobot.cli.pair import add_parser as add_pair_parser

    add_pair_parser(sub).set_defaults(fn=cmd_pair)
    h = sub.add_parser("health", help="check database, Redis, workers, beat and provider")
    h.add_argument("--json", action="store_true")
    h.set_defaults(fn=cmd_health)
    sub.add_parser("config", help="print the effective configuration, secrets masked").set_defaults(fn=cmd_config)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.fn(args)
    except ConfigError as exc:
        print(f"picobot: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
