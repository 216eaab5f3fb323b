"""`picobot memory maintain`: run memory maintenance now, in this process (run on the server)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

from picobot.cli.no_queue import NoQueue

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config
    from picobot.memory.maintenance import RunReport

EXIT_FAILED = 1  # a scope failed, or another run holds the lock, or memory is off


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("memory", help="long-term memory upkeep")
    actions = p.add_subparsers(dest="memory_action", required=True)
    m = actions.add_parser("maintain", help="tidy the memories of the users whose memories changed, now, "
                                            "and rewrite AGENT.md's memory block (same as the 4-hourly task)")
    m.add_argument("--json", action="store_true", help="print the run's report as JSON")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.memory.maintenance import run_maintenance
    from picobot.app import build_runtime

    rt = build_runtime(config, NoQueue("memory maintenance"), migrate=True)
    try:
        report = run_maintenance(rt)
    finally:
        rt.close()
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, ensure_ascii=False))
    else:
        _print(report)
    ok = report.status == "done" and all(s.status != "failed" for s in report.scopes)
    return 0 if ok else EXIT_FAILED


def _print(report: RunReport) -> None:
    if report.status == "busy":
        print("error: another memory maintenance run is in progress; try again when it has finished",
              file=sys.stderr)
        return
    if report.status != "done":
        print(f"error: memory maintenance did not run: {report.error}", file=sys.stderr)
        return
    if not report.scopes:
        print("no user's memories changed since their last maintenance; nothing to do")
    for s in report.scopes:
        if s.status == "failed":
            print(f"  FAILED {s.scope_key}: {s.error}")
        else:
            print(f"  ok     {s.scope_key}: {s.merged} merged away, {s.deleted} deleted, {s.conflicts} conflict(s)")
    print(f"AGENT.md memory block {'rewritten' if report.agent_md_rewritten else 'unchanged'}")
