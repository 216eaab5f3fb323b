"""Which PicoBot process this is (web, worker, beat, ...), named as an operator would look for it."""

from __future__ import annotations

import socket
from dataclasses import dataclass
from typing import Mapping, Sequence

CELERY_ROLES = ("worker", "beat", "flower")
PICOBOT_COMMANDS = ("feishu", "telegram", "wechat", "chat", "up", "jobs", "memory", "health", "migrate")


@dataclass(frozen=True)
class ProcessLabel:
    role: str  # web, worker, beat, flower, feishu, telegram, wechat, ... or the program's name
    name: str  # the worker's node name (w1@host), else role@host
    host: str


def _celery_node_name(args: Sequence[str], host: str) -> str | None:
    for i, arg in enumerate(args):
        value = None
        if arg in ("-n", "--hostname") and i + 1 < len(args):
            value = args[i + 1]
        elif arg.startswith("--hostname="):
            value = arg.split("=", 1)[1]
        if value:
            short, _, domain = host.partition(".")
            # the same %h / %n / %d expansion Celery does for a node name
            return value.replace("%h", host).replace("%n", short).replace("%d", domain)
    return None


def _role(argv: Sequence[str]) -> str:
    program = (argv[0] if argv else "").replace("\\", "/")
    args = list(argv[1:])
    if "gunicorn" in program or "gunicorn" in args[:1]:
        return "web"
    if "celery" in program:
        return next((a for a in args if a in CELERY_ROLES), "celery")
    if program.endswith(("picobot", "picobot/__main__.py")) and args:
        if args[0] in ("web", "gateway"):
            return "web"
        return args[0] if args[0] in PICOBOT_COMMANDS + CELERY_ROLES else "picobot"
    parts = [p for p in program.split("/") if p]
    stem = parts[-1].removesuffix(".py") if parts else ""
    if stem == "__main__" and len(parts) > 1:  # python -m package
        stem = parts[-2]
    return stem[:32] or "python"


def process_label(argv: Sequence[str], environ: Mapping[str, str], host: str | None = None) -> ProcessLabel:
    """The role from the command line (PICOBOT_PROCESS overrides it), the node name, the host."""
    host = host or socket.gethostname()
    role = (environ.get("PICOBOT_PROCESS") or "").strip()[:32] or _role(argv)
    name = _celery_node_name(argv[1:], host) if role == "worker" else None
    return ProcessLabel(role, (name or f"{role}@{host}")[:128], host)
