"""`picobot wechat`: run the WeChat (iLink) long poller; `picobot channels login <key>` logs the account in.

`picobot wechat` checks the channel, then runs what `picobot run channels:wechat:<key>` runs (the
channels plugin's process, picobot/channels/wechat/poller.py). Start as many pollers as you like: one
per account polls, the others stand by and take over when it dies. A poller with no login waits for one
(its state is login_required in /health). Stops at once on SIGTERM or Ctrl-C.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from picobot.config import Config


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("wechat", help="run the WeChat (iLink) long poller (getupdates)")
    p.add_argument("--channel", default="wechat", help="the channel's key under `channels` (default wechat)")
    return p


def _fail(message: str, command: str = "wechat") -> int:
    print(f"picobot {command}: {message}", file=sys.stderr)
    return 2


def check(config: Config, key: str, need_enabled: bool = True) -> str | None:
    """Why channels.<key> can not be polled (or logged in), or None when it can."""
    from picobot.channels.wechat.config import check_channel
    from picobot.errors import ConfigError

    channel = config.channels.get(key)
    if channel is None or (channel.type or key) != "wechat":
        return f"channels.{key} is not a WeChat channel in {config.config_path or 'the configuration'}"
    try:
        cfg = check_channel(key, channel.model_dump())
    except ConfigError as exc:
        return str(exc)
    if need_enabled and not cfg.enabled:
        return f"channels.{key}.enabled is false"
    return None


def run(config: Config, args: argparse.Namespace) -> int:
    if (problem := check(config, args.channel)) is not None:
        return _fail(problem)
    from picobot.cli.plugin_parts import run as run_process

    return run_process(config, argparse.Namespace(target=f"channels:wechat:{args.channel}"))


def login(config: Config, key: str, force: bool) -> int:
    """The QR login of channels.<key>: 0 when a login is saved."""
    if (problem := check(config, key, need_enabled=False)) is not None:
        return _fail(problem, "channels login")
    from picobot.channels.wechat import creds
    from picobot.channels.wechat.api import IlinkError
    from picobot.channels.wechat.config import WeChatConfig
    from picobot.channels.wechat.login import LoginFailed, QrLogin

    cfg = WeChatConfig.from_channel(config.channels[key])
    path = cfg.credentials_path(config.home)
    if force or cfg.force_login:
        _forget(config, key, path)
    elif (saved := creds.load(path)) is not None and saved.usable:
        print(f"channels.{key} is logged in already (bot {saved.bot_id or '?'}, {path}); "
              "`--force` logs in again")
        return 0
    try:
        QrLogin(cfg.base_url, path).run()
    except (LoginFailed, IlinkError) as exc:
        return _fail(str(exc), "channels login")
    except KeyboardInterrupt:
        return _fail("interrupted", "channels login")
    return 0


def _forget(config: Config, key: str, path: Any) -> None:
    from picobot.channels.wechat import creds, state
    from picobot.storage.db import Database

    creds.discard(path)
    db = Database(config.database_url)
    try:
        db.migrate()
        state.forget_login(db, key)
    finally:
        db.dispose()
    print(f"channels.{key}: the saved login and cursor are discarded")


def web_login(config: Config, key: str, force: bool, out: Any) -> None:
    """The same QR login for the web UI's Channels page: `out` gets the QR text, its URL and each step;
    raises LoginFailed or IlinkError when it does not complete."""
    from picobot.channels.wechat import creds
    from picobot.channels.wechat.config import WeChatConfig
    from picobot.channels.wechat.login import LoginFailed, QrLogin

    if (problem := check(config, key, need_enabled=False)) is not None:
        raise LoginFailed(problem)
    cfg = WeChatConfig.from_channel(config.channels[key])
    path = cfg.credentials_path(config.home)
    if force:
        _forget(config, key, path)
    elif (saved := creds.load(path)) is not None and saved.usable:
        out(f"channels.{key} is logged in already (bot {saved.bot_id or '?'}); log in again with force")
        return
    QrLogin(cfg.base_url, path, out=out).run()
