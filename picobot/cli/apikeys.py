"""`picobot apikeys`: keys for the OpenAI-compatible API — create (printed once), list, revoke (run on the server)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when `apikeys` runs: every command builds this parser, and SQL is slow to import
    from picobot.auth.apikeys import ApiKeys
    from picobot.config import Config


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "never"


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.auth.apikeys import ApiKeys
    from picobot.storage.db import Database

    db = Database(config.database_url)
    try:
        db.migrate()
        keys = ApiKeys(db)
        if args.action == "create":
            return _create(config, keys, args)
        if args.action == "revoke":
            if not keys.revoke(args.name):
                print(f"error: no live API key named {args.name!r} (see `picobot apikeys list`)", file=sys.stderr)
                return 1
            print(f"revoked {args.name}; it can no longer use /v1")
            return 0
        return _list(keys, args.json)
    finally:
        db.dispose()


def _create(config: Config, keys: ApiKeys, args: argparse.Namespace) -> int:
    from picobot.auth.apikeys import ApiKeyError
    from picobot.openai_api.models import agent_of, model_of

    agent = agent_of(config, args.agent) if args.agent else "default"
    if agent is None:
        print(f"error: unknown agent {args.agent!r} (known: {', '.join(sorted(config.agents))})", file=sys.stderr)
        return 2
    try:
        issued = keys.create(args.name, agent)
    except ApiKeyError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps({"key": issued.key, **issued.info.to_dict(), "model": model_of(agent)}))
        return 0
    print(issued.key)
    print(f"# API key {issued.info.name} for model {model_of(agent)!r} (agent {agent}); shown once. Use it as "
          "OPENAI_API_KEY with base URL <gateway>/v1.", file=sys.stderr)
    if not config.gateway.openai_api.enabled:
        print("# note: the API is off; set gateway.openai_api.enabled to true and restart the web process.",
              file=sys.stderr)
    return 0


def _list(keys: ApiKeys, as_json: bool) -> int:
    found = keys.keys()
    if as_json:
        print(json.dumps([k.to_dict() for k in found], indent=2))
        return 0
    if not found:
        print("No API keys. Create one with `picobot apikeys create NAME`.")
        return 0
    print(f"{'NAME':<24} {'AGENT':<16} {'KEY':<12} {'CREATED':<17} LAST USED")
    for k in found:
        print(f"{k.name:<24} {k.agent:<16} {k.prefix + '…':<12} {_when(k.created_at):<17} {_when(k.last_used_at)}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("apikeys", help="API keys for the OpenAI-compatible API (/v1): create, list, revoke")
    actions = p.add_subparsers(dest="action", required=True)
    create = actions.add_parser("create", help="create a key (printed once) for one agent")
    create.add_argument("name", help="a name for the key (letters, digits, _ . -)")
    create.add_argument("--agent", help="the agent (model) the key may use; default: the default agent")
    create.add_argument("--json", action="store_true", help="print the key and its record as JSON")
    listing = actions.add_parser("list", help="list live keys (never the keys themselves)")
    listing.add_argument("--json", action="store_true")
    revoke = actions.add_parser("revoke", help="revoke a key by name")
    revoke.add_argument("name")
    return p
