"""picobot-qq: a QQ channel for PicoBot over OneBot v11 (NapCat, Lagrange, LLOneBot).

The plugin module PicoBot loads through the `picobot.plugins` entry point named `qq`. It imports
nothing from PicoBot but `picobot.plugins`, the SDK:

    channel type "qq"          QQAdapter (adapter.py): normalize a recorded event, deliver an outbox row
    POST /qq/<channel>         HTTP event reporting, signed with the channel's `secret` (intake.py)
    GET  /qq/ws/<channel>      the platform's reverse WebSocket, with its access token (link.py)
    process qq:connection      one per channel with `ws_url`: the forward WebSocket (link.py)
    picobot qq status|send     cli.py
    plugins.settings.qq        QQSettings (config.py)
"""

from __future__ import annotations

from typing import Any

from picobot.plugins import hookimpl

from picobot_qq import config as _config

__version__ = "0.1.0"


@hookimpl
def picobot_channels(config: Any) -> dict[str, Any]:
    from picobot_qq.adapter import QQAdapter

    return {"qq": QQAdapter}


@hookimpl
def picobot_routes(register: Any) -> None:
    from picobot_qq.intake import http_events
    from picobot_qq.link import reverse_socket

    register("POST", "/qq/<channel>", http_events)
    register("GET", "/qq/ws/<channel>", reverse_socket, websocket=True)


@hookimpl
def picobot_processes(register: Any) -> None:
    from picobot_qq.link import run_forward

    register("connection", run_forward, instances=_config.forward_channels)


@hookimpl
def picobot_settings(register: Any) -> None:
    register("qq", _config.QQSettings)


@hookimpl
def picobot_cli(register: Any) -> None:
    from picobot_qq.cli import qq

    register("qq", qq)


@hookimpl
def picobot_config_check(config: Any) -> list[tuple[str, str]]:
    return _config.problems(config)
