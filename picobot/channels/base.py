"""The channel adapter contract: capabilities, one delivery, delivery errors, live hooks.

Defined in picobot/domain/channel.py (the public SDK re-exports it); named here for the channels' own code."""

from __future__ import annotations

from picobot.domain.channel import Capabilities, ChannelAdapter, Delivery, DeliveryError, LiveHooks
from picobot.domain.scope import SOCKET_CHANNELS  # noqa: F401 (re-exported)

# SOCKET_CHANNELS: replies go by pub/sub, never through the outbox

__all__ = ["Capabilities", "ChannelAdapter", "Delivery", "DeliveryError", "LiveHooks", "SOCKET_CHANNELS"]
