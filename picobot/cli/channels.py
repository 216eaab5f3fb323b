"""`picobot channels login <key> [--force]`: log a channel's account in (WeChat: a QR code in the terminal)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("channels", help="channel accounts: `channels login <key>` (WeChat QR login)")
    actions = p.add_subparsers(dest="action", required=True)
    login = actions.add_parser("login", help="log the channel's account in (WeChat: scan the QR code)")
    login.add_argument("channel", help="the channel's key under `channels`")
    login.add_argument("--force", action="store_true", help="discard the saved login (and cursor) and log in again")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    channel = config.channels.get(args.channel)
    type_name = (channel.type or args.channel) if channel is not None else None
    if type_name == "wechat":
        from picobot.cli.wechat import login

        return login(config, args.channel, args.force)
    if channel is None:
        print(f"picobot channels login: no channel {args.channel!r} in the configuration", file=sys.stderr)
    else:
        print(f"picobot channels login: channels.{args.channel} ({type_name}) needs no login", file=sys.stderr)
    return 2
