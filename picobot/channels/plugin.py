"""Channels on the plugin SDK: the adapter types, outbox rows in the producer's transaction,
recovery of lost deliveries and events, the config checks of the types PicoBot ships, and the
platforms' webhooks (Feishu's events, Telegram's updates) as routes."""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any, Callable

from picobot.channels.ports import channel_ports
from picobot.plugins import HttpRequest, HttpResponse, hookimpl
from picobot.runtime.task_names import CHANNEL_EVENT_TASK, DELIVER_TASK

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.channels.registry import ChannelRegistry
    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.channels")


class ChannelsPlugin:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registry: ChannelRegistry | None = None
        self._web: Ports | None = None

    def registry(self, ports: "Ports") -> "ChannelRegistry":
        """The adapters of the configured channels (built lazily), of every type a plugin offers."""
        with self._lock:
            if self._registry is None:
                from picobot.channels.registry import ChannelRegistry

                self._registry = ChannelRegistry(channel_ports(ports), ports.plugins.channels(ports.config))
            return self._registry

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register(DELIVER_TASK, _deliver_lane, queue="outbound")
        register(CHANNEL_EVENT_TASK, _process_event, queue="outbound")

    def start_web(self, ports: "Ports") -> None:
        """The web process's part: its webhooks (picobot_routes) answer with these ports, and Telegram is
        told the URL of each webhook channel (setWebhook, the command menu) in the background."""
        from picobot.channels.telegram import setup, webhook as telegram

        # A webhook hands its event to the intake the pollers and the long connection share, which records it,
        # queues its task and reads the channel registry: the process's own ports, more than the PluginPorts a
        # route is given (third-party routes keep getting only those). So the web process binds the built-in
        # webhooks to its ports here, once, as build_runtime binds the budgets plugin; nothing else reads them.
        self._web = ports
        for key, _path, cfg in telegram.webhook_channels(ports.config):
            setup.register_in_background(channel_ports(ports), cfg, key)

    @hookimpl
    def picobot_routes(self, register: Callable[..., None], config: Any) -> None:
        """POST the webhook path of each enabled Feishu and Telegram channel in webhook mode."""
        from picobot.channels.feishu import webhook as feishu
        from picobot.channels.telegram import webhook as telegram

        served: set[str] = set()
        for platform in (feishu, telegram):
            for key, path, cfg in platform.webhook_channels(config):
                if path in served:  # as before: the first channel on a path gets its requests
                    log.warning("channels.%s: webhook_path %s is another channel's; not served", key, path)
                    continue
                served.add(path)
                register("POST", path, self._webhook(platform.handle, cfg, key), max_body_bytes=platform.MAX_BODY_BYTES)

    def _webhook(self, handle: Callable[..., tuple[int, dict[str, Any]]], cfg: Any, key: str) -> Callable[..., HttpResponse]:
        def answer(request: HttpRequest, _ports: Any) -> HttpResponse:
            if self._web is None:
                raise RuntimeError("the web process did not call ChannelsPlugin.start_web")
            status, body = handle(channel_ports(self._web), cfg, request.headers, request.body, channel=key)
            return HttpResponse.json(body, status)

        return answer

    @hookimpl
    def picobot_channels(self) -> dict[str, Any]:
        from picobot.channels.registry import ADAPTER_TYPES

        return dict(ADAPTER_TYPES)

    @hookimpl
    def picobot_processes(self, register: Callable[..., None]) -> None:
        """The connections the platforms need PicoBot to open: `picobot run channels:<name>:<channel key>`."""
        from picobot.channels.feishu import longconn
        from picobot.channels.telegram import poller as telegram
        from picobot.channels.wechat import poller as wechat

        register("feishu", longconn.run_process, instances=longconn.long_connection_channels)
        register("telegram", telegram.run_process, instances=telegram.polling_channels)
        register("wechat", wechat.run_process, instances=wechat.wechat_channels)

    @hookimpl
    def picobot_config_check(self, config: Any) -> list[tuple[str, str]]:
        from picobot.errors import ConfigError

        problems = []
        for key, channel in config.channels.items():
            if channel.type == "feishu":
                from picobot.channels.feishu.config import check_channel

                try:
                    check_channel(key, channel.model_dump())
                except ConfigError as exc:
                    problems.append((exc.key_path, exc.reason))
            elif (channel.type or key) == "telegram":
                from picobot.channels.telegram.config import check_channel as check_telegram

                try:
                    check_telegram(key, channel.model_dump())
                except ConfigError as exc:
                    problems.append((exc.key_path, exc.reason))
            elif (channel.type or key) == "wechat":
                from picobot.channels.wechat.config import check_channel as check_wechat

                try:
                    check_wechat(key, channel.model_dump())
                except ConfigError as exc:
                    problems.append((exc.key_path, exc.reason))
        return problems

    @hookimpl
    def picobot_health(self, ports: "Ports") -> dict[str, Any] | None:
        """The intake of each enabled Telegram and WeChat channel: polling or not (or login_required), last error."""
        entries: dict[str, Any] = {}
        for key, channel in ports.config.channels.items():
            if (channel.type or key) == "wechat" and channel.enabled:
                from picobot.channels.wechat.status import health_entry as wechat_entry

                try:
                    entries[f"channel:{key}"] = wechat_entry(ports, key)
                except Exception as exc:  # a failing dependency is a result here, not an error
                    entries[f"channel:{key}"] = {"ok": False, "detail": f"{type(exc).__name__}"}
                continue
            if (channel.type or key) != "telegram" or not channel.enabled:
                continue
            from picobot.channels.telegram.status import health_entry

            extra = channel.model_extra or {}
            try:
                entries[f"channel:{key}"] = health_entry(ports.redis, key, str(extra.get("mode") or "polling"),
                                                         int(extra.get("poll_timeout_secs") or 25))
            except Exception as exc:  # a failing dependency is a result here, not an error
                entries[f"channel:{key}"] = {"ok": False, "detail": f"{type(exc).__name__}"}
        return entries or None

    @hookimpl
    def picobot_turn_committed(self, conn: "Connection", turn: "TurnView", ports: "Ports") -> Callable[[], None] | None:
        """An external chat's answer (or failure notice) into the outbox, in the turn's transaction."""
        from picobot.channels import outbound

        text = turn.partial_text if turn.status == "cancelled" else turn.final_text
        if turn.spoken:  # the user sees what was heard of their voice message first
            outbound.record_heard(conn, channel_ports(ports), turn.channel, turn.chat_id, turn.session_id,
                                  turn.turn_id, _heard(turn.messages))
        if not outbound.record_turn(conn, channel_ports(ports), turn.channel, turn.chat_id, turn.session_id,
                                    turn.turn_id, turn.status, text, turn.error, media=outbound.answer_media(turn)):
            return None
        if turn.spoken and turn.status == "completed":  # the user spoke: the answer is spoken too (if it can be)
            outbound.record_voice(conn, channel_ports(ports), turn.channel, turn.chat_id, turn.session_id,
                                  turn.turn_id, text)
        return lambda: outbound.wake(channel_ports(ports), turn.channel, turn.chat_id)

    @hookimpl
    def picobot_outbox_message(self, conn: "Connection", channel: str, chat_id: str, text: str, kind: str,
                               key: str | None, session_id: str | None, ports: "Ports",
                               buttons: Any) -> Callable[[], None] | None:
        from picobot.channels import outbound

        if not self.registry(ports).external(channel):
            return None
        outbound.record_message(conn, channel, chat_id, text, kind=kind, key=key, session_id=session_id,
                                buttons=buttons)
        return lambda: outbound.wake(channel_ports(ports), channel, chat_id)

    @hookimpl
    def picobot_sweep(self, ports: "Ports") -> None:
        """Outbox lanes with due rows and no lock holder, and channel events whose task was lost."""
        from picobot.channels import delivery, events

        try:
            delivery.recover(channel_ports(ports))
        finally:  # one failing never stops the other
            events.recover(channel_ports(ports))


def _heard(messages: Any) -> str:
    """The transcripts of the turn's voice messages (its user messages marked 🎤), one per line."""
    from picobot.domain.audio import SPOKEN_MARK
    from picobot.domain.messages import text_of

    said = []
    for m in messages:
        if getattr(m, "role", None) != "user":
            continue
        text = text_of(m.content)
        for part in text.split("\n\n"):
            if part.startswith(SPOKEN_MARK):
                said.append(part[len(SPOKEN_MARK):].strip())
    return "\n".join(s for s in said if s)


def _deliver_lane(ports: "Ports", channel: str, chat_id: str) -> dict:
    """Deliver the pending outbox rows of one chat, in order (see picobot.channels.delivery)."""
    from picobot.channels.delivery import deliver_lane

    return deliver_lane(channel_ports(ports), channel, chat_id)


def _process_event(ports: "Ports", event_id: int) -> str:
    """Turn one recorded platform event into input (see picobot.channels.events)."""
    from picobot.channels.events import process

    return process(channel_ports(ports), int(event_id))
