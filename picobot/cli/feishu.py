"""`picobot feishu`: run the Feishu long-connection client (channels.feishu.mode = "long_connection").

Start as many as you like (one per host, say): one process per app connects, the others stand
by and take over when it dies. Stops within 5 s on SIGTERM or Ctrl-C.
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


def long_connection_channels(config: Config) -> list[str]:
    """Keys of the enabled Feishu channels in long_connection mode (what `picobot up` starts a client for)."""
    keys = []
    for key, channel in config.channels.items():
        extra = channel.model_extra or {}
        if (channel.type or key) == "feishu" and channel.enabled and extra.get("mode") == "long_connection":
            keys.append(key)
    return keys


def _fail(message: str) -> int:
    print(f"picobot feishu: {message}", file=sys.stderr)
    return 2


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.channels.feishu.config import FeishuConfig

    key = args.channel
    channel = config.channels.get(key)
    if channel is None or (channel.type or key) != "feishu":
        return _fail(f"channels.{key} is not a Feishu channel in {config.config_path or 'the configuration'}")
    cfg = FeishuConfig.from_channel(channel)
    if not cfg.enabled:
        return _fail(f"channels.{key}.enabled is false")
    if cfg.mode != "long_connection":
        return _fail(f"channels.{key}.mode is {cfg.mode!r}; set it to \"long_connection\" to use this command "
                     "(webhook mode needs no extra process: the web process takes the events)")
    from picobot.channels.feishu.longconn import LongConnection
    from picobot.logging_setup import setup_logging
    from picobot.runtime.services import build_runtime
    from worker.celery_app import make_celery
    from worker.queue import CeleryTaskQueue

    setup_logging(config)
    rt = build_runtime(config, CeleryTaskQueue(make_celery(config)), migrate=True)
    try:
        return LongConnection(rt, cfg, channel=key).run()
    finally:
        rt.close()
