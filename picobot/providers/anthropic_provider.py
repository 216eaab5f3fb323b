"""Anthropic Messages through the official SDK (raw stream events).

The SDK is imported when a provider is constructed, not when this module is imported.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterator

from picobot.domain.messages import ChatMessage, Content, ToolCall, Usage, text_of
from picobot.errors import ProviderError
from picobot.providers._common import (
    SdkProvider,
    SdkAttempt,
    api_message,
    error_for_status,
    join_nonempty,
    looks_like_context_overflow,
    media_note,
    parse_retry_after,
    read_image,
    split_data_url,
    turn_start,
    unavailable,
)
from picobot.providers.base import (
    ChatRequest,
    Completed,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)

API_VERSION = "2023-06-01"  # what Anthropic-compatible gateways understand; the SDK's default is newer
DEFAULT_MAX_TOKENS = 4096  # the API requires max_tokens
STATE_TYPE = "anthropic"
STOP_REASONS = {"end_turn": "stop", "stop_sequence": "stop", "tool_use": "tool_calls", "max_tokens": "length"}


class AnthropicProvider(SdkProvider):
    """A Provider for the Messages API."""

    def _make_client(self, api_key: str, base_url: str | None, headers: dict[str, str], timeout: float) -> Any:
        import anthropic

        self._sdk = anthropic
        headers = {"anthropic-version": API_VERSION, "x-api-key": api_key, **headers}
        return anthropic.Anthropic(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0,
                                   default_headers=headers)

    def _request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        system, messages = to_anthropic_messages(request.messages, self.key)
        kwargs: dict[str, Any] = {
            "model": request.model,
            "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
            "messages": messages,
            "stream": True,
        }
        if system:
            kwargs["system"] = system
        if request.tools:
            kwargs["tools"] = [_tool(t) for t in request.tools]
        # anthropic 2.x takes no temperature argument; the body field still works
        body = {"temperature": request.temperature} if request.temperature is not None else {}
        body.update(request.options)
        if body:
            kwargs["extra_body"] = body
        return kwargs

    def _open(self, kwargs: dict[str, Any]) -> _AnthropicAttempt:
        try:
            sdk_stream = self._client.messages.create(**kwargs)
        except Exception as exc:
            raise self._map_error(exc) from None
        return _AnthropicAttempt(sdk_stream, self)

    def _map_error(self, exc: BaseException) -> BaseException:
        """The PicoBot error for an SDK/transport failure; other exceptions pass through."""
        sdk = self._sdk
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, sdk.APIStatusError):  # also in-stream `error` events (status 200)
            message = api_message(exc.body, exc.message)
            overflow = exc.status_code in (400, 200) and looks_like_context_overflow(message)
            status = exc.status_code if exc.status_code >= 400 else 0
            return error_for_status(status, message, provider=self.key, redact=self._redact,
                                    overflow=overflow, retry_after=parse_retry_after(exc.response.headers))
        if isinstance(exc, sdk.APITimeoutError):
            return unavailable(self.key, f"timed out after {self._timeout:g}s", self._redact)
        if isinstance(exc, sdk.APIConnectionError):
            return unavailable(self.key, f"connection failed: {exc.__cause__ or exc.message}", self._redact)
        import httpx2

        if isinstance(exc, httpx2.TimeoutException):
            return unavailable(self.key, f"timed out after {self._timeout:g}s", self._redact)
        if isinstance(exc, (httpx2.HTTPError, httpx2.StreamError)):  # the SDK does not wrap in-stream failures
            return unavailable(self.key, f"connection failed: {exc}", self._redact)
        if isinstance(exc, (sdk.APIError, ValueError)):
            return unavailable(self.key, f"broken response: {type(exc).__name__}: {exc}", self._redact)
        return exc


@dataclass
class _Block:
    kind: str
    text: str = ""  # text, thinking text, or tool input JSON
    signature: str = ""
    data: str = ""  # redacted_thinking
    tool_index: int = -1
    tool_id: str = ""
    tool_name: str = ""
    initial_input: Any = field(default_factory=dict)


class _AnthropicAttempt(SdkAttempt):
    def __init__(self, sdk_stream: Any, provider: AnthropicProvider) -> None:
        super().__init__(sdk_stream)
        self._provider = provider
        self._blocks: dict[int, _Block] = {}
        self._usage = Usage()
        self._stop: str | None = None
        self._finished = False

    def events(self) -> Iterator[ProviderEvent]:
        try:
            yield from self._translate()
        except Exception as exc:
            raise self._provider._map_error(exc) from None

    def _translate(self) -> Iterator[ProviderEvent]:
        for event in self.sdk_stream:
            kind = event.type
            if kind == "message_start":
                self._usage = Usage(_input_tokens(event.message.usage), event.message.usage.output_tokens or 0,
                                    getattr(event.message.usage, "cache_read_input_tokens", None) or 0)
            elif kind == "content_block_start":
                yield from self._start_block(event.index, event.content_block)
            elif kind == "content_block_delta":
                yield from self._delta(event.index, event.delta)
            elif kind == "message_delta":
                self._stop = event.delta.stop_reason or self._stop
                self._usage = Usage(self._usage.input_tokens, event.usage.output_tokens or self._usage.output_tokens,
                                    self._usage.cached_input_tokens)
            elif kind == "message_stop":
                self._finished = True
        provider = self._provider
        if self._stop == "model_context_window_exceeded":
            raise error_for_status(400, "the model's context window was exceeded", provider=provider.key,
                                   redact=provider._redact, overflow=True)
        if not self._finished:
            raise unavailable(provider.key, "stream ended before the response was complete", provider._redact)
        yield self._completed()

    def _start_block(self, index: int, block: Any) -> Iterator[ProviderEvent]:
        kind = block.type
        if kind == "tool_use":
            tool_index = sum(1 for b in self._blocks.values() if b.kind == "tool_use")
            self._blocks[index] = _Block(kind, tool_index=tool_index, tool_id=block.id, tool_name=block.name,
                                         initial_input=block.input)
            yield ToolCallDelta(tool_index, block.id, block.name, "")
        elif kind == "text":
            self._blocks[index] = _Block(kind, text=block.text or "")
            if block.text:
                yield TextDelta(block.text)
        elif kind == "thinking":
            self._blocks[index] = _Block(kind, text=block.thinking or "", signature=block.signature or "")
            if block.thinking:
                yield ReasoningDelta(block.thinking)
        elif kind == "redacted_thinking":
            self._blocks[index] = _Block(kind, data=block.data)
        # server-tool blocks are not used by PicoBot and are left out

    def _delta(self, index: int, delta: Any) -> Iterator[ProviderEvent]:
        block = self._blocks.get(index)
        if block is None:
            return
        kind = delta.type
        if kind == "text_delta":
            block.text += delta.text
            yield TextDelta(delta.text)
        elif kind == "thinking_delta":
            block.text += delta.thinking
            yield ReasoningDelta(delta.thinking)
        elif kind == "signature_delta":
            block.signature += delta.signature
        elif kind == "input_json_delta" and delta.partial_json:
            block.text += delta.partial_json
            yield ToolCallDelta(block.tool_index, arguments=delta.partial_json)

    def _completed(self) -> Completed:
        blocks = [self._blocks[i] for i in sorted(self._blocks)]
        calls = [ToolCall(b.tool_id, b.tool_name, b.text or json.dumps(b.initial_input or {}))
                 for b in blocks if b.kind == "tool_use"]
        thinking = [_thinking_param(b) for b in blocks if b.kind in ("thinking", "redacted_thinking")]
        state = {"provider": self._provider.key, "type": STATE_TYPE, "blocks": thinking} if thinking else None
        message = ChatMessage(
            role="assistant",
            content="".join(b.text for b in blocks if b.kind == "text"),
            tool_calls=calls,
            reasoning_content=join_nonempty(b.text for b in blocks if b.kind == "thinking") or None,
            provider_state=state,
        )
        stop = STOP_REASONS.get(self._stop or "", self._stop or "stop")
        return Completed(message=message, usage=self._usage, stop_reason=stop)


def _input_tokens(usage: Any) -> int:
    # Total input is the sum of fresh, cache-creating and cache-read tokens.
    return sum(getattr(usage, name, None) or 0
               for name in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens"))


def _thinking_param(block: _Block) -> dict[str, Any]:
    if block.kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": block.data}
    return {"type": "thinking", "thinking": block.text, "signature": block.signature}


# --- request conversion -------------------------------------------------------------


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"name": spec.name, "description": spec.description, "input_schema": spec.parameters}


def to_anthropic_messages(messages: list[ChatMessage], provider_key: str) -> tuple[str, list[dict[str, Any]]]:
    """(system text, messages) with same-role turns merged and tool results as user blocks."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    start = turn_start(messages)
    for i, m in enumerate(messages):
        if m.role == "system":
            system.append(text_of(m.content))
            continue
        role, blocks = _turn(m, provider_key, images=i > start)
        if not blocks:
            continue
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})
    for turn in out:
        if turn["role"] == "user":  # tool_result blocks must come first in their user turn
            turn["content"].sort(key=lambda b: b.get("type") != "tool_result")
    return join_nonempty(system), out


def _turn(m: ChatMessage, provider_key: str, images: bool = True) -> tuple[str, list[dict[str, Any]]]:
    if m.role == "tool":
        return "user", [_tool_result(m, images)]
    if m.role == "assistant":
        return "assistant", _assistant_blocks(m, provider_key)
    return "user", content_blocks(m.content)


def _assistant_blocks(m: ChatMessage, provider_key: str) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    state = m.provider_state or {}
    # Signed thinking is only valid for the provider that produced it; elsewhere it is dropped.
    if state.get("provider") == provider_key and state.get("type") == STATE_TYPE:
        blocks.extend(dict(b) for b in state.get("blocks") or [])
    text = text_of(m.content)
    if text:
        blocks.append({"type": "text", "text": text})
    for call in m.tool_calls:
        blocks.append({"type": "tool_use", "id": call.id, "name": call.name, "input": _tool_input(call.arguments)})
    return blocks


def _tool_input(arguments: str) -> dict[str, Any]:
    try:
        value = json.loads(arguments or "{}")
    except ValueError:
        return {"_raw_arguments": arguments}  # keep what the model wrote; the API needs an object
    return value if isinstance(value, dict) else {"_value": value}


def _tool_result(m: ChatMessage, images: bool = True) -> dict[str, Any]:
    """`images` False: an earlier turn's result, whose images (see turn_start) are not sent again."""
    content: str | list[dict[str, Any]]
    if isinstance(m.content, str) or not images or all(b.get("type") == "text" for b in m.content):
        content = text_of(m.content) or "(no output)"
    else:
        content = content_blocks(m.content)
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": m.tool_call_id or "", "content": content}
    if m.is_error:
        block["is_error"] = True
    return block


def content_blocks(content: Content) -> list[dict[str, Any]]:
    """Anthropic content blocks for user content (empty text is left out: the API rejects it)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks = [_block(b) for b in content]
    return [b for b in blocks if b is not None and not (b["type"] == "text" and not b["text"])]


def _block(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image_url":
        url = str(block.get("url", ""))
        data = split_data_url(url)
        if data is not None:
            return _image(*data)
        return {"type": "image", "source": {"type": "url", "url": url}}
    if kind == "media":
        image = read_image(str(block.get("path") or ""), block.get("mime"))
        return _image(*image) if image is not None else {"type": "text", "text": media_note(block)}
    return None


def _image(mime: str, data: str) -> dict[str, Any]:
    return {"type": "image", "source": {"type": "base64", "media_type": mime, "data": data}}
