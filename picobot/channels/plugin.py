"""Channels on the plugin SDK: the adapter types, outbox rows in the producer's transaction,
recovery of lost deliveries and events, and the config checks of the types PicoBot ships."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any, Callable

from picobot.channels.ports import channel_ports
from picobot.plugins import hookimpl

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.channels.registry import ChannelRegistry
    from picobot.plugins.types import TurnView
    from picobot.runtime.ports import Ports


class ChannelsPlugin:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._registry: ChannelRegistry | None = None

    def registry(self, ports: "Ports") -> "ChannelRegistry":
        """The adapters of the configured channels (built lazily), of every type a plugin offers."""
        with self._lock:
            if self._registry is None:
                from picobot.channels.registry import ChannelRegistry

                self._registry = ChannelRegistry(channel_ports(ports), ports.plugins.channels(ports.config))
            return self._registry

    @hookimpl
    def picobot_channels(self) -> dict[str, Any]:
        from picobot.channels.registry import ADAPTER_TYPES

        return dict(ADAPTER_TYPES)

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
