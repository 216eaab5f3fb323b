"""What the channels capability gets: the common ports and its own adapter registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from picobot.runtime.ports import Ports

if TYPE_CHECKING:
    from picobot.channels.registry import ChannelRegistry


class ChannelPorts(Ports, Protocol):
    @property
    def channels(self) -> ChannelRegistry: ...
