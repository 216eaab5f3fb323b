"""`picobot telegram`: run the Telegram long poller (channels.<key>.mode = "polling", the default).

It checks the channel, then runs what `picobot run channels:telegram:<key>` runs (the channels plugin's
process, picobot/channels/telegram/poller.py). Start as many as you like: one process per bot token
polls, the others stand by and take over when it dies. Stops at once on SIGTERM or Ctrl-C. Webhook mode
needs no extra process.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("telegram", help="run the Telegram long poller (getUpdates; mode polling)")
    p.add_argument("--channel", default="telegram", help="the channel's key under `channels` (default telegram)")
    return p


def _fail(message: str) -> int:
    print(f"picobot telegram: {message}", file=sys.stderr)
    return 2


def check(config: Config, key: str) -> str | None:
    """Why channels.<key> cannot run the poller, or None when it can."""
    from picobot.channels.telegram.config import check_channel
    from picobot.errors import ConfigError

    channel = config.channels.get(key)
    if channel is None or (channel.type or key) != "telegram":
        return f"channels.{key} is not a Telegram channel in {config.config_path or 'the configuration'}"
    try:
        cfg = check_channel(key, channel.model_dump())
    except ConfigError as exc:
        return str(exc)
    if not cfg.enabled:
        return f"channels.{key}.enabled is false"
    if cfg.mode != "polling":
        return (f"channels.{key}.mode is {cfg.mode!r}; this command polls (mode \"polling\"); in webhook mode "
                "the web process takes the updates")
    return None


def run(config: Config, args: argparse.Namespace) -> int:
    if (problem := check(config, args.channel)) is not None:
        return _fail(problem)
    from picobot.cli.plugin_parts import run as run_process

    return run_process(config, argparse.Namespace(target=f"channels:telegram:{args.channel}"))
