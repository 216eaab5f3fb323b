"""`picobot agents list`: every agent (config `agents` and `$PICOBOT_HOME/agents/*.md`) and the files'
load errors, read as a worker reads them."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("agents", help="list the agents (config and agent files) and the files' errors")
    actions = p.add_subparsers(dest="agents_action", required=True)
    listing = actions.add_parser("list", help="one line per agent: name, source, model, tools; then load errors")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    """Exit 0 when every agent file loads, 1 when one has an error (listed)."""
    from picobot.config.agent_files import report

    found = report(config)
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False))
    else:
        for line in lines(found):
            print(line)
    return 1 if found["errors"] else 0


def lines(found: dict[str, Any]) -> list[str]:
    rows = [(a["name"], a["source"], f"{a['provider']}:{a['model']}") for a in found["agents"]]
    widths = [max((len(r[i]) for r in rows), default=0) for i in range(3)]
    out = []
    for row, agent in zip(rows, found["agents"]):
        head = "  ".join(cell.ljust(width) for cell, width in zip(row, widths))
        extra = [f"{key}: {','.join(agent[key]) or '-'}" for key in ("tools", "skills", "delegates")
                 if agent[key] is not None]
        out.append("  ".join([head, *extra]).rstrip())
    for error in found["errors"]:
        out.append(f"error  {error['name']}: {error['error']}")
    return out
