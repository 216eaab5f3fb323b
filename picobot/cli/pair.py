"""`picobot pair`: pairing codes, the list of paired devices, revocation (run on the server)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # imported when `pair` runs: every command builds this parser, and SQL is slow to import
    from picobot.config import Config
    from picobot.auth.pairing import Pairing


def _when(ts: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(ts)) if ts else "never"


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.auth.pairing import Pairing, pairing_url
    from picobot.storage.db import Database

    db = Database(config.database_url)
    try:
        db.migrate()
        pairing = Pairing(db)
        if args.revoke:
            if not pairing.revoke(args.revoke):
                print(f"error: no paired device {args.revoke!r} (see `picobot pair --list`)", file=sys.stderr)
                return 1
            print(f"revoked {args.revoke}; it can no longer use PicoBot")
            return 0
        if args.list:
            return _list(pairing, args.json)
        if args.new_token:
            issued = pairing.issue_token(args.new_token, kind="api")
            if args.json:
                print(json.dumps({"token": issued.token, "device": issued.device.to_dict()}))
            else:
                print(issued.token)
                print(f"# device {issued.device.id} ({issued.device.name}); shown once. Use it as "
                      "`picobot chat --token …` or PICOBOT_TOKEN, or `Authorization: Bearer …`.", file=sys.stderr)
            return 0
        code = pairing.new_code()
        url = pairing_url(config, code.code)
        if args.json:
            print(json.dumps({"code": code.code, "url": url, "expires_at": code.expires_at}))
            return 0
        minutes = round((code.expires_at - time.time()) / 60)
        print(f"Pairing code: {code.display}  (single use, valid {minutes} minutes)")
        print(f"Open on the device to pair: {url}")
        if not config.gateway.public_url and config.gateway.host in ("0.0.0.0", "::"):
            print("  (from another machine, use this server's address instead of 127.0.0.1, "
                  "or set gateway.public_url)")
        return 0
    finally:
        db.dispose()


def _list(pairing: Pairing, as_json: bool) -> int:
    devices = pairing.devices()
    if as_json:
        print(json.dumps([d.to_dict() for d in devices], indent=2))
        return 0
    if not devices:
        print("No paired devices. Run `picobot pair` to pair one.")
        return 0
    print(f"{'ID':<16} {'KIND':<8} {'PAIRED':<17} {'LAST USED':<17} NAME")
    for d in devices:
        print(f"{d.id:<16} {d.kind:<8} {_when(d.created_at):<17} {_when(d.last_used_at):<17} {d.name}")
    return 0


def add_parser(sub: argparse._SubParsersAction) -> argparse.ArgumentParser:
    p = sub.add_parser("pair", help="pair a browser or device (prints a one-time code and URL); list or revoke devices")
    group = p.add_mutually_exclusive_group()
    group.add_argument("--list", action="store_true", help="list paired devices")
    group.add_argument("--revoke", metavar="ID", help="revoke a paired device (see --list)")
    group.add_argument("--new-token", metavar="NAME",
                       help="issue a token directly (for a terminal on another machine or a script); printed once")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    return p
