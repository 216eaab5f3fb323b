"""`picobot plugins list`: the plugins this machine's config loads, as a process would load them.

Builds the plugin host exactly as web, worker and beat do (the built-ins, then entry points and
`$PICOBOT_HOME/plugins/*.py`), so a plugin that fails to import shows here with its error before
any process is started. Hook errors happen while turns run: those are in the workers' logs.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("plugins", help="list the plugins PicoBot loads, with their state and errors")
    actions = p.add_subparsers(dest="plugins_action", required=True)
    listing = actions.add_parser("list", help="one line per plugin: name, source, version, state, hooks, last error")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.app import build_plugins

    host = build_plugins(config)
    try:
        statuses = host.statuses()
    finally:
        host.close()
    if args.json:
        print(json.dumps({"plugins": statuses}, indent=2, ensure_ascii=False))
    else:
        for line in lines(statuses):
            print(line)
    return 0


def lines(statuses: list[dict[str, Any]]) -> list[str]:
    """The text listing: aligned name, source, version and state, then the hooks and the last error."""
    rows = [(s["name"], s["source"], s["version"] or "-", s["state"]) for s in statuses]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(4)]
    out = []
    for row, status in zip(rows, statuses):
        head = "  ".join(cell.ljust(width) for cell, width in zip(row, widths))
        hooks = ",".join(status["hooks"]) or "-"
        error = f"  error: {_one_line(status['error'])}" if status.get("error") else ""
        out.append(f"{head}  hooks: {hooks}{error}")
    return out


def _one_line(text: str) -> str:
    return " ".join(str(text).split())
