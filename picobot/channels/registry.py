"""ChannelRegistry: the adapter of each configured channel, imported and built lazily on first use."""

from __future__ import annotations

import importlib
import logging
import re
import threading
from typing import TYPE_CHECKING, Any

from picobot.channels.base import SOCKET_CHANNELS, ChannelAdapter
from picobot.runtime.plugin_ports import ports_for

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger(__name__)

# The channel types PicoBot ships; plugins add theirs through `picobot_channels` (see plugin.py).
ADAPTER_TYPES = {"feishu": "picobot.channels.feishu.adapter:FeishuAdapter",
                 "telegram": "picobot.channels.telegram.adapter:TelegramAdapter",
                 "wechat": "picobot.channels.wechat.adapter:WeChatAdapter"}


class ChannelError(Exception):
    """A channel can not be used: not configured, disabled or its adapter type is unknown."""


_CLASS_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")


def known_channel(key: str, type_name: str, types: dict[str, Any] | None = None) -> bool:
    """A channel PicoBot acts on: a socket channel, a known adapter type or a "module:Class" path."""
    types = ADAPTER_TYPES if types is None else types
    return key in SOCKET_CHANNELS or type_name in types or bool(_CLASS_PATH.fullmatch(type_name or ""))


def adapter_path(type_name: str, types: dict[str, Any] | None = None) -> Any:
    """"module:Class" (or the class) for a channel type: a known name, or the path itself."""
    types = ADAPTER_TYPES if types is None else types
    if type_name in types:
        return types[type_name]
    if _CLASS_PATH.fullmatch(type_name):
        return type_name
    raise ChannelError(f"unknown channel type {type_name!r} (known: {', '.join(sorted(types))})")


def load_class(path: Any) -> Any:
    if not isinstance(path, str):
        return path  # a plugin handed the class itself
    module_name, _, attr = path.partition(":")
    try:
        return getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ChannelError(f"channel adapter {path!r} can not be loaded: {exc}") from exc


class ChannelRegistry:
    def __init__(self, rt: ChannelPorts, types: dict[str, Any] | None = None) -> None:
        self._rt = rt
        self._types = dict(ADAPTER_TYPES if types is None else types)
        self._adapters: dict[str, ChannelAdapter] = {}
        self._lock = threading.Lock()

    def _config(self, channel: str) -> Any:
        return self._rt.config.channels.get(channel)

    def external(self, channel: str) -> bool:
        """True for a configured, enabled channel that is not a socket channel (web, cli_chat)."""
        if channel in SOCKET_CHANNELS:
            return False
        cfg = self._config(channel)
        return cfg is not None and bool(cfg.enabled)

    def names(self) -> list[str]:
        """The configured, enabled external channels."""
        return [name for name in self._rt.config.channels if self.external(name)]

    def adapter(self, channel: str) -> ChannelAdapter:
        """The adapter of an external channel; ChannelError when it is unknown, disabled or can't be built."""
        if not self.external(channel):
            raise ChannelError(f"channel {channel!r} is not a configured, enabled external channel")
        with self._lock:
            adapter = self._adapters.get(channel)
            if adapter is None:
                cfg = self._config(channel)
                type_name = cfg.type or channel
                cls = load_class(adapter_path(type_name, self._types))
                # a channel PicoBot ships gets the process's ports; a plugin's gets the PluginPorts of its tier
                owner = self._rt.plugins.channel_owners(self._rt.config).get(type_name, type_name)
                ports = self._rt if type_name in ADAPTER_TYPES else ports_for(self._rt, owner)
                adapter = cls(channel, cfg, ports)
                self._adapters[channel] = adapter
            return adapter

    def get(self, channel: str) -> ChannelAdapter | None:
        """The adapter, or None when the channel is not usable (the reason is logged)."""
        try:
            return self.adapter(channel)
        except ChannelError as exc:
            log.warning("channel %s: %s", channel, exc)
            return None
