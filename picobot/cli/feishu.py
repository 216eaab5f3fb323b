"""`picobot feishu`: run the Feishu long-connection client (channels.feishu.mode = "long_connection").

It checks the channel, then runs what `picobot run channels:feishu:<key>` runs (the channels plugin's
process, picobot/channels/feishu/longconn.py). Start as many as you like (one per host, say): one process
per app connects, the others stand by and take over when it dies. Stops within 5 s on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("feishu", help="run the Feishu long-connection event client (mode long_connection)")
    p.add_argument("--channel", default="feishu", help="the channel's key under `channels` (default feishu)")
    return p


def _fail(message: str) -> int:
    print(f"picobot feishu: {message}", file=sys.stderr)
    return 2


def check(config: Config, key: str) -> str | None:
    """Why channels.<key> cannot run the long-connection client, or None when it can."""
    from picobot.channels.feishu.config import FeishuConfig

    channel = config.channels.get(key)
    if channel is None or (channel.type or key) != "feishu":
        return f"channels.{key} is not a Feishu channel in {config.config_path or 'the configuration'}"
    cfg = FeishuConfig.from_channel(channel)
    if not cfg.enabled:
        return f"channels.{key}.enabled is false"
    if cfg.mode != "long_connection":
        return (f"channels.{key}.mode is {cfg.mode!r}; set it to \"long_connection\" to use this command "
                "(webhook mode needs no extra process: the web process takes the events)")
    return None


def run(config: Config, args: argparse.Namespace) -> int:
    if (problem := check(config, args.channel)) is not None:
        return _fail(problem)
    from picobot.cli.plugin_parts import run as run_process

    return run_process(config, argparse.Namespace(target=f"channels:feishu:{args.channel}"))
