"""`picobot jobs list|show|add|rm|pause|resume|run`: manage scheduled jobs from the server's shell.

Talks to SQL directly through JobService with this machine's config, as the owner (whoever can
read the config may change every job). A job added without a target goes to this terminal's
chat (the one `picobot chat` uses). `run` hands the job to the workers through the task queue:
it checks the job here, then continues as `python -m worker.commands jobs run` (the core does not
import Celery).
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.cli.no_queue import NoQueue

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config
    from picobot.runtime.services import Runtime

EXIT_BAD_INPUT = 2
MAX_FILE_BYTES = 1024 * 1024


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("jobs", help="list, show, add, remove, pause, resume or run scheduled jobs")
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON instead of text")
    actions = p.add_subparsers(dest="jobs_action", required=True)
    actions.add_parser("list", parents=[common], help="every job with its schedule, next run and state")
    actions.add_parser("show", parents=[common], help="one job and its recent runs").add_argument("job_id")
    add = actions.add_parser("add", parents=[common], help="create or replace a job from job JSON")
    add.add_argument("file", help="a .json file with the job, or - for standard input")
    for name, text in (("rm", "delete a job"), ("pause", "pause a job"), ("resume", "resume a paused job"),
                       ("run", "run a job now (the workers take it)")):
        actions.add_parser(name, parents=[common], help=text).add_argument("job_id")
    return p


class BadInput(Exception):
    """A file or JSON the command cannot use: one line to stderr, exit 2."""


def run(config: Config, args: argparse.Namespace, queue: Any = None) -> int:
    """One `picobot jobs` action; `queue` is the task queue `run` needs (worker/commands.py gives it)."""
    from picobot.errors import ToolError
    from picobot.app import build_runtime

    try:
        data = _read_job(args.file) if args.jobs_action == "add" else None
    except BadInput as exc:
        return _fail(str(exc))
    if args.jobs_action == "run" and queue is None:
        from picobot.cli.processes import exec_argv

        # worker/commands.py calls run() again with the task queue: an unknown job fails there, exit 2
        return exec_argv([sys.executable, "-m", "worker.commands", "jobs", "run", args.job_id]
                         + (["--json"] if args.json else []))
    rt = build_runtime(config, queue or NoQueue("`picobot jobs`"), migrate=True)
    try:
        result = _dispatch(rt, args, data)
    except ToolError as exc:  # JobError (names the field), JobNotFound, JobForbidden
        return _fail(str(exc))
    finally:
        rt.close()
    _print(args, result)
    return 0


def _dispatch(rt: Runtime, args: argparse.Namespace, data: dict[str, Any] | None) -> Any:
    from picobot.cli.chat import stable_chat_id
    from picobot.scheduler.manage import Actor, JobService

    actor = Actor(channel="cli_chat", chat_id=stable_chat_id(rt.config.home), owner=True)
    service, action = JobService(rt), args.jobs_action
    if action == "list":
        return service.list(actor)
    if action == "show":
        return service.get(actor, args.job_id)
    if action == "add":
        return service.put(actor, data or {})
    method = {"rm": "delete", "run": "run_now"}.get(action, action)
    return getattr(service, method)(actor, args.job_id)


def _read_job(source: str) -> dict[str, Any]:
    try:
        if source == "-":
            raw = sys.stdin.buffer.read(MAX_FILE_BYTES + 1)
        else:
            with Path(source).open("rb") as f:
                raw = f.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise BadInput(f"cannot read {source}: {exc.strerror or exc}") from None
    if len(raw) > MAX_FILE_BYTES:
        raise BadInput(f"{source} is over {MAX_FILE_BYTES // 1024} KB; a job is a small JSON object")
    try:
        data = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise BadInput(f"{source} is not valid UTF-8 JSON: {str(exc)[:200]}") from None
    if not isinstance(data, dict):
        raise BadInput(f"{source} must hold one JSON object (the job: id, kind, schedule, target, payload)")
    return data


def _fail(message: str) -> int:
    print(f"error: {' '.join(message.split())}", file=sys.stderr)
    return EXIT_BAD_INPUT


def _print(args: argparse.Namespace, result: Any) -> None:
    if args.json:
        print(json.dumps(result, indent=2, ensure_ascii=False))
    elif args.jobs_action == "list":
        _table(result)
    elif args.jobs_action == "show":
        _show(result)
    else:
        verb = {"add": "saved", "rm": "deleted", "pause": "paused", "resume": "resumed", "run": "queued to run now"}
        print(f"job {result.get('id', getattr(args, 'job_id', ''))} {verb[args.jobs_action]}")


def _when(ts: float | None) -> str:
    return datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %z") if ts else "-"


def _table(jobs: list[dict[str, Any]]) -> None:
    if not jobs:
        print("no jobs")
        return
    rows = [("ID", "KIND", "STATE", "SCHEDULE", "NEXT RUN", "LAST")]
    rows += [(j["id"], j["kind"], j["state"], j.get("schedule_text") or "", _when(j.get("next_due_at")),
              j.get("last_outcome") or "-") for j in jobs]
    widths = [max(len(str(r[i])) for r in rows) for i in range(len(rows[0]))]
    for r in rows:
        print("  ".join(str(cell).ljust(w) for cell, w in zip(r, widths)).rstrip())


def _show(job: dict[str, Any]) -> None:
    print(f"{job['id']}  ({job['kind']}, {job['state']}, source {job.get('source')})")
    print(f"  schedule  {job.get('schedule_text')}  {json.dumps(job.get('schedule'), ensure_ascii=False)}")
    print(f"  next run  {_when(job.get('next_due_at'))}")
    if job.get("target"):
        print(f"  target    {job['target'].get('channel')}:{job['target'].get('chat_id')}")
    print(f"  payload   {json.dumps(job.get('payload'), ensure_ascii=False)}")
    runs = job.get("runs") or []
    print(f"  runs      {len(runs) or 'none yet'}")
    for r in runs:
        where = f" session {r['session_id']}" if r.get("session_id") else ""
        where += f" turn {r['turn_id']}" if r.get("turn_id") else ""
        error = f" — {r['error']}" if r.get("error") else ""
        print(f"    {_when(r.get('due_at'))}  {r.get('outcome')}{where}{error}")
