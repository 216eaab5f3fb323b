"""Chat messages as PicoBot stores and replays them.

Content is either a string or a list of blocks:
    {"type": "text", "text": "..."}
    {"type": "image_url", "url": "https://... or data:image/png;base64,..."}
    {"type": "media", "path": "/local/file.png", "mime": "image/png"}
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

Content = str | list[dict[str, Any]]

# System message markers (ChatMessage.marker)
MARKER_AGENT_PROMPT = "agent_prompt"
MARKER_SCHEDULED_PROMPT = "scheduled_system_prompt"
MARKER_HISTORY_COMPACTION = "history_compaction"
MARKER_TOOL_REPAIR = "tool_chain_repair"
MARKER_TURN_ERROR = "turn_error"  # a failed turn's notice to the user; never sent to the model
MARKER_TURN_STOPPED = "turn_stopped"  # a stopped turn's record; never sent to the model


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # raw JSON text, exactly as the model produced it

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ToolCall":
        return cls(id=d["id"], name=d["name"], arguments=d.get("arguments") or "")


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # of input_tokens, read from the provider's prompt cache (metrics only)

    def __add__(self, other: "Usage") -> "Usage":
        return Usage(self.input_tokens + other.input_tokens, self.output_tokens + other.output_tokens,
                     self.cached_input_tokens + other.cached_input_tokens)


@dataclass
class ChatMessage:
    role: str  # "system" | "user" | "assistant" | "tool"
    content: Content = ""
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None  # the tool's name, on role="tool"
    reasoning_content: str | None = None
    # Opaque replay state owned by one provider, e.g. Anthropic thinking blocks with
    # signatures: {"provider": "<provider key>", "blocks": [...]}. Replayed only to it.
    provider_state: dict[str, Any] | None = None
    marker: str | None = None  # system markers, see MARKER_*
    is_error: bool = False  # on role="tool": the tool failed

    def to_dict(self) -> dict[str, Any]:
        d: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            d["tool_calls"] = [c.to_dict() for c in self.tool_calls]
        for key in ("tool_call_id", "name", "reasoning_content", "provider_state", "marker"):
            value = getattr(self, key)
            if value is not None:
                d[key] = value
        if self.is_error:
            d["is_error"] = True
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "ChatMessage":
        return cls(
            role=d["role"],
            content=d.get("content") or "",
            tool_calls=[ToolCall.from_dict(c) for c in d.get("tool_calls") or []],
            tool_call_id=d.get("tool_call_id"),
            name=d.get("name"),
            reasoning_content=d.get("reasoning_content"),
            provider_state=d.get("provider_state"),
            marker=d.get("marker"),
            is_error=bool(d.get("is_error")),
        )


def text_of(content: Content) -> str:
    """The plain text of a message's content (image and media blocks are left out)."""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if b.get("type") == "text")
