"""The provider interface: one streaming chat call that yields PicoBot's own events.

SDK types never leave `providers/<name>.py`. A provider knows nothing of sessions,
channels or storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterator, Protocol

from picobot.domain.messages import ChatMessage, Usage


@dataclass
class ToolSpec:
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema of the arguments object


@dataclass
class ChatRequest:
    model: str
    messages: list[ChatMessage]
    tools: list[ToolSpec] = field(default_factory=list)
    temperature: float | None = None
    max_tokens: int | None = None
    # Extra, provider-specific body fields (e.g. {"reasoning_effort": "low"} or
    # {"thinking": {"type": "enabled", "budget_tokens": 2048}}).
    options: dict[str, Any] = field(default_factory=dict)


# --- events -----------------------------------------------------------------------


@dataclass
class TextDelta:
    text: str


@dataclass
class ReasoningDelta:
    text: str


@dataclass
class ToolCallDelta:
    """Part of a tool call as it streams; id and name arrive with the first delta."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


@dataclass
class Completed:
    """The last event of every successful stream: the whole assistant message."""

    message: ChatMessage  # role="assistant", with tool_calls / reasoning_content / provider_state
    usage: Usage
    stop_reason: str = ""  # normalised: "stop" | "tool_calls" | "length" | other raw value
    answered_by: str = ""  # "<provider>:<model>" when a fallback chain answered (see providers.fallback)


@dataclass
class StreamRestarted:
    """A fallback chain threw away what this call had streamed and starts again on its next entry."""

    reason: str = ""


ProviderEvent = TextDelta | ReasoningDelta | ToolCallDelta | Completed | StreamRestarted


class ProviderStream(Protocol):
    """An iterator of ProviderEvent that can be closed from another thread."""

    def __iter__(self) -> Iterator[ProviderEvent]: ...

    def close(self) -> None: ...


class Provider(Protocol):
    key: str  # the config key of this provider, e.g. "default"

    def stream(self, request: ChatRequest) -> ProviderStream:
        """Start a streaming call; raises picobot.errors.ProviderError subclasses.

        Retries (429/5xx/timeouts, with backoff) happen before the first event is
        yielded. A stream that breaks after events were yielded raises
        ProviderUnavailable from the iterator.
        """
        ...
