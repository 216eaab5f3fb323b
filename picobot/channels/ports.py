"""What the channels capability gets: the common ports and its own adapter registry."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol, cast

from picobot.runtime.ports import Ports

if TYPE_CHECKING:
    from picobot.channels.registry import ChannelRegistry


class ChannelPorts(Ports, Protocol):
    @property
    def channels(self) -> ChannelRegistry: ...


def channel_ports(ports: Ports) -> ChannelPorts:
    """The ports a hook received (typed as the core's Ports), as this capability uses them: the process's
    App carries the channel registry. Checked on the class, so the lazy registry is not built here."""
    if not hasattr(type(ports), "channels"):
        raise TypeError(f"{type(ports).__name__} has no channel registry")
    return cast(ChannelPorts, ports)
