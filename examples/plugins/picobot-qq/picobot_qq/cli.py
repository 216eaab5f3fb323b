"""`picobot qq status`: each QQ channel's connection as Redis has it. `picobot qq send CHANNEL TARGET TEXT`:
one message through the channel (TARGET `private:<id>` or `group:<id>`), for trying a setup out.

PicoBot hands a plugin's command its ports as the click context's `obj`.
"""

from __future__ import annotations

import time
from typing import Any

import click

from picobot_qq import state
from picobot_qq.config import QQChannel, is_qq


def _ports() -> Any:
    ports = click.get_current_context().find_root().obj
    if ports is None or not hasattr(ports, "redis"):
        raise click.ClickException("this command needs PicoBot to hand it its ports (run it as `picobot qq ...`)")
    return ports


@click.group(name="qq", help="The QQ (OneBot v11) channels.")
def qq() -> None:
    pass


@qq.command(help="Each QQ channel's connection: state, mode, bot id, last heartbeat.")
def status() -> None:
    ports = _ports()
    channels = [key for key, cfg in ports.config.channels.items() if is_qq(cfg)]
    if not channels:
        click.echo("no QQ channel is configured (channels.<key> with \"type\": \"qq\")")
        return
    for key in channels:
        cfg = QQChannel.of(key, ports.channel(key) or {})
        found = state.read_status(ports.redis, key)
        linked = "linked" if state.connected(ports.redis, key) else "not linked"
        beat = found.get("heartbeat_at")
        ago = f", heartbeat {time.time() - float(beat):.0f} s ago" if isinstance(beat, (int, float)) else ""
        shown = "http (no connection to hold)" if cfg.mode == "http" else f"{found.get('state', 'never connected')}, {linked}"
        click.echo(f"{key}: {'enabled' if cfg.enabled else 'disabled'}, {cfg.mode}, {shown}, "
                   f"self_id {found.get('self_id') or '?'}{ago}" + (f" ({found['detail']})" if found.get("detail") else ""))


@qq.command(help="Send TEXT to TARGET (private:<qq id> or group:<group id>) through CHANNEL.")
@click.argument("channel")
@click.argument("target")
@click.argument("text")
def send(channel: str, target: str, text: str) -> None:
    from picobot.plugins import Delivery, DeliveryError

    from picobot_qq.adapter import QQAdapter

    ports = _ports()
    raw = ports.channel(channel)
    if raw is None or not is_qq(raw):
        raise click.ClickException(f"channels.{channel} is not a QQ channel")
    try:
        result = QQAdapter(channel, raw, ports).deliver(Delivery(-time.time_ns(), channel, target, "message", {"text": text}))
    except DeliveryError as exc:
        raise click.ClickException(str(exc)) from None
    click.echo(f"sent: {', '.join(result['message_ids']) if result else 'nothing'}")
