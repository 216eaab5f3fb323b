"""What the fake LLM answers: scripted responses and the default demo behaviour.

Protocol-neutral: the wire modules turn a request body into a RequestView and a
Reply into OpenAI or Anthropic JSON/SSE.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

# The keys of a scripted response that define its content (anything else is timing or faults).
CONTENT_KEYS = ("content", "reasoning", "tool_calls", "redacted_thinking")


@dataclass
class RequestView:
    """The parts of a chat request the fake needs, whatever the protocol."""

    model: str
    stream: bool
    tool_names: list[str]
    last_user_text: str  # text of the last user message that has text
    last_is_user: bool  # the conversation ends with a user text message
    tool_results: list[tuple[str, str]]  # (tool name, result text) ending the conversation
    input_chars: int
    include_usage: bool = True  # OpenAI: stream_options.include_usage


@dataclass
class FakeToolCall:
    name: str
    arguments: str  # raw JSON text (may be invalid on purpose)


@dataclass
class Reply:
    content: str = ""
    reasoning: str = ""
    redacted_thinking: str | None = None
    tool_calls: list[FakeToolCall] = field(default_factory=list)
    finish_reason: str = "stop"  # "stop" | "length" | "tool_calls" | raw value
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # OpenAI: usage.prompt_tokens_details.cached_tokens


@dataclass
class Fault:
    """Timing and failure settings of one scripted response."""

    delay_ms: int = 0
    chunk_delay_ms: int = 0
    error: dict[str, Any] | None = None
    context_length_error: bool = False
    drop_after_chunks: int | None = None
    stream_error: dict[str, Any] | None = None  # {"after_chunks": N, "message": ..., "type": ...}
    linger_ms: int = 0  # after the last event, before the body ends (a slow proxy)

    @classmethod
    def from_spec(cls, spec: dict[str, Any]) -> Fault:
        drop = spec.get("drop_after_chunks")
        return cls(
            delay_ms=int(spec.get("delay_ms") or 0),
            chunk_delay_ms=int(spec.get("chunk_delay_ms") or 0),
            error=spec.get("error"),
            context_length_error=bool(spec.get("context_length_error")),
            drop_after_chunks=None if drop is None else int(drop),
            stream_error=spec.get("stream_error"),
            linger_ms=int(spec.get("linger_ms") or 0),
        )


def estimate_tokens(chars: int) -> int:
    return max(1, chars // 4)


def build_reply(spec: dict[str, Any], view: RequestView) -> Reply:
    """The reply for one request: scripted when the spec has content, else the default."""
    if any(key in spec for key in CONTENT_KEYS):
        reply = _scripted_reply(spec)
    else:
        reply = default_reply(view)
    if spec.get("finish_reason"):
        reply.finish_reason = str(spec["finish_reason"])
    out_chars = len(reply.content) + len(reply.reasoning) + sum(len(c.arguments) for c in reply.tool_calls)
    usage = spec.get("usage") or {}
    reply.input_tokens = int(usage.get("input_tokens", estimate_tokens(view.input_chars)))
    reply.output_tokens = int(usage.get("output_tokens", estimate_tokens(out_chars)))
    reply.cached_input_tokens = int(usage.get("cached_input_tokens", 0))
    return reply


def _scripted_reply(spec: dict[str, Any]) -> Reply:
    calls = [
        FakeToolCall(
            name=str(c["name"]),
            arguments=c["arguments"] if isinstance(c.get("arguments"), str) else json.dumps(c.get("arguments") or {}),
        )
        for c in spec.get("tool_calls") or []
    ]
    return Reply(
        content=str(spec.get("content") or ""),
        reasoning=str(spec.get("reasoning") or ""),
        redacted_thinking=spec.get("redacted_thinking"),
        tool_calls=calls,
        finish_reason="tool_calls" if calls else "stop",
    )


def default_reply(view: RequestView) -> Reply:
    """Demo behaviour: call calculator / get_time when offered, summarise tool results, else echo."""
    if view.tool_results:
        lines = [f"The tool {name} returned: {text[:500]}" for name, text in view.tool_results]
        return Reply(content="\n".join(lines))
    if view.last_is_user and view.tool_names:
        call = _default_tool_call(view.last_user_text, view.tool_names)
        if call is not None:
            return Reply(tool_calls=[call], finish_reason="tool_calls")
    return Reply(content=f"You said: {view.last_user_text}")


def _default_tool_call(text: str, tool_names: list[str]) -> FakeToolCall | None:
    expression = find_arithmetic(text)
    if expression and "calculator" in tool_names:
        return FakeToolCall("calculator", json.dumps({"expression": expression}))
    lowered = text.lower()
    if ("time" in lowered or "date" in lowered) and "get_time" in tool_names:
        return FakeToolCall("get_time", "{}")
    return None


_CANDIDATE = re.compile(r"[\d(][\d\s+\-*/().]*")
_OPERATOR_BETWEEN = re.compile(r"[\d)]\s*[-+*/]\s*[\d(]")


def find_arithmetic(text: str) -> str | None:
    """The first arithmetic expression in text, e.g. "(3 + 4) * 12" in "what is (3 + 4) * 12?"."""
    for match in _CANDIDATE.finditer(text):
        candidate = match.group(0).strip().rstrip(".+-*/ ").strip()
        if _OPERATOR_BETWEEN.search(candidate):
            return candidate
    return None


def split_words(text: str) -> list[str]:
    """Small stream pieces: each word with its trailing whitespace."""
    return re.findall(r"\S+\s*|\s+", text) or ([text] if text else [])


def split_fixed(text: str, size: int = 8) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]
