"""The channel contract, shared by the core and every channel plugin: what a platform event becomes
(`InboundMessage`), what an adapter can do (`Capabilities`), one outbox delivery (`Delivery`) and how
it fails (`DeliveryError`), and the adapter's shape (`ChannelAdapter`, `LiveHooks`).

The public SDK (`picobot.plugins`) re-exports these, so a channel from outside imports nothing else.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from picobot.domain.messages import Content, text_of


@dataclass
class InboundMessage:
    channel: str
    chat_id: str
    sender_id: str
    content: Content
    platform_message_id: str | None = None
    mode: str = "steer"  # "steer" (default) or "queue"
    metadata: dict[str, Any] = field(default_factory=dict)

    @property
    def text(self) -> str:
        return text_of(self.content)


@dataclass(frozen=True)
class Capabilities:
    max_message_chars: int = 4000
    edits: bool = False
    reactions: bool = False
    markdown: bool = True
    live: bool = False  # has LiveHooks


@dataclass
class Delivery:
    """One outbox row, as handed to an adapter."""

    id: int
    channel: str
    chat_id: str  # the platform chat id (for feishu: the oc_… chat id)
    kind: str  # "reply" | "notice" | "message" | "command"
    # {"text": str, "format": "markdown"|"plain", "reply_to": platform msg id | None,
    #  "turn_id": str | None, "session_id": str | None}
    payload: dict = field(default_factory=dict)
    idempotency_key: str = ""  # ≤ 50 chars (sha1-based when the natural key is longer)
    attempts: int = 0


class DeliveryError(Exception):
    """A delivery failed; permanent ones are not retried, transient ones back off (retry_after honoured)."""

    def __init__(self, message: str, *, permanent: bool = False, retry_after: float | None = None,
                 code: str | None = None, defer: bool = False) -> None:
        super().__init__(message)
        self.defer = defer  # hold the row (outbox `deferred`) until the chat writes again: a delivery window
        self.permanent = permanent
        self.retry_after = retry_after
        self.code = code


class LiveHooks(Protocol):
    def turn_started(self, chat_id: str, reply_to: str | None, turn_id: str) -> None: ...

    def snapshot(self, chat_id: str, turn_id: str, snapshot: dict) -> None: ...  # throttled by the relay

    def turn_finished(self, chat_id: str, turn_id: str, event: dict) -> None: ...


class ChannelAdapter(Protocol):
    name: str  # the channel key in config (e.g. "feishu")
    capabilities: Capabilities

    def deliver(self, delivery: Delivery) -> dict | None: ...  # e.g. {"message_ids": [...]}; raises DeliveryError

    def normalize(self, event: dict) -> list[InboundMessage]: ...  # a stored raw event -> inputs; [] = ignore

    def live(self) -> LiveHooks | None: ...
