"""OpenAI Chat Completions (and any OpenAI-compatible endpoint) through the official SDK.

The SDK is imported when a provider is constructed, not when this module is imported.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from typing import Any, Iterable, Iterator

from picobot.domain.messages import ChatMessage, Content, ToolCall, Usage, text_of
from picobot.errors import ProviderError
from picobot.providers._common import (
    Redactor,
    SdkProvider,
    SdkAttempt,
    api_message,
    drain_rest,
    error_for_status,
    looks_like_context_overflow,
    media_note,
    parse_retry_after,
    read_image,
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

FINISH_REASONS = {"stop": "stop", "tool_calls": "tool_calls", "function_call": "tool_calls", "length": "length"}


class OpenAIProvider(SdkProvider):
    """A Provider for the Chat Completions API."""

    def _make_client(self, api_key: str, base_url: str | None, headers: dict[str, str], timeout: float) -> Any:
        # httpx first, whole: the SDK looks up sys.modules["httpx"] during every call (for clients of the older
        # library), and a first import of httpx in another thread (a tool's request, a plugin's sweep) leaves it
        # there half made for a moment, which failed the call with an AttributeError. An import waits for
        # another thread's import of the same module to finish, so after this line it is always complete.
        import httpx  # noqa: F401
        import openai

        self._sdk = openai
        self._stream_cls = _draining_stream_class(openai)
        return openai.OpenAI(api_key=api_key, base_url=base_url, timeout=timeout, max_retries=0,
                             default_headers=headers)

    def _request_kwargs(self, request: ChatRequest) -> dict[str, Any]:
        kwargs: dict[str, Any] = {
            "model": request.model,
            "messages": to_openai_messages(request.messages),
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if request.tools:
            kwargs["tools"] = tuple(request.tools)  # encoded once per tool set (_encode_body)
        if request.temperature is not None:
            kwargs["temperature"] = request.temperature
        if request.max_tokens is not None:
            kwargs["max_tokens"] = request.max_tokens
        if request.options:
            kwargs["extra_body"] = dict(request.options)
        return kwargs

    def _open(self, kwargs: dict[str, Any]) -> _OpenAIAttempt:
        try:
            sdk_stream = self._post_stream(kwargs)
        except Exception as exc:
            raise self._map_error(exc) from None
        return _OpenAIAttempt(sdk_stream, self)

    def _post_stream(self, kwargs: dict[str, Any]) -> Any:
        """`chat.completions.create(stream=True)` minus its request transform.

        Our messages are plain JSON already; the SDK's `maybe_transform` walks every message
        and tool schema by type introspection, which costs more CPU than the rest of a turn
        and grows with history. The response side (types, stream parsing, errors) is the SDK's.
        """
        from openai.types.chat import ChatCompletion

        body = dict(kwargs)
        body.update(body.pop("extra_body", None) or {})
        return self._client.post("/chat/completions", content=_encode_body(body), cast_to=ChatCompletion, stream=True,
                                 stream_cls=self._stream_cls[object],
                                 options={"security": {"bearer_auth": True}})

    def _map_error(self, exc: BaseException) -> BaseException:
        """The PicoBot error for an SDK/transport failure; other exceptions pass through."""
        sdk = self._sdk
        if isinstance(exc, ProviderError):
            return exc
        if isinstance(exc, sdk.APIStatusError):
            message = api_message(exc.body, exc.message)
            overflow = exc.code == "context_length_exceeded" or looks_like_context_overflow(message)
            return error_for_status(exc.status_code, message, provider=self.key, redact=self._redact,
                                    overflow=overflow, retry_after=parse_retry_after(exc.response.headers))
        if isinstance(exc, sdk.APITimeoutError):
            return unavailable(self.key, f"timed out after {self._timeout:g}s", self._redact)
        if isinstance(exc, sdk.APIConnectionError):
            return unavailable(self.key, f"connection failed: {exc.__cause__ or exc.message}", self._redact)
        if isinstance(exc, sdk.APIError):  # an error event inside the stream
            message = api_message(exc.body, exc.message)
            overflow = exc.code == "context_length_exceeded" or looks_like_context_overflow(message)
            return error_for_status(0, message, provider=self.key, redact=self._redact, overflow=overflow)
        if isinstance(exc, _transport_errors()) or isinstance(exc, ValueError):
            return unavailable(self.key, f"broken response: {type(exc).__name__}: {exc}", self._redact)
        return exc


def _draining_stream_class(openai: Any) -> Any:
    """The SDK's Stream, reading the body to its end after `[DONE]`.

    The sync SDK stops reading at `[DONE]` and closes the response with the chunked body's end
    still unread, so every streamed call opened a new TCP connection. (Its async Stream drains.)
    """
    from typing import Generic, TypeVar

    T = TypeVar("T")

    class DrainingStream(openai.Stream[T], Generic[T]):
        def _iter_events(self) -> Iterator[Any]:  # the SDK's ServerSentEvents
            events = super()._iter_events()
            for sse in events:
                if sse.data.startswith("[DONE]"):
                    drain_rest(self.response, events)
                yield sse

    return DrainingStream


def _transport_errors() -> tuple[type[BaseException], ...]:
    import httpx2

    return (httpx2.HTTPError, httpx2.StreamError)


@dataclass
class _ToolAcc:
    index: int
    id: str
    name: str
    arguments: str = ""


class _OpenAIAttempt(SdkAttempt):
    def __init__(self, sdk_stream: Any, provider: OpenAIProvider) -> None:
        super().__init__(sdk_stream)
        self._provider = provider

    def events(self) -> Iterator[ProviderEvent]:
        try:
            yield from self._translate()
        except Exception as exc:
            raise self._provider._map_error(exc) from None

    def _translate(self) -> Iterator[ProviderEvent]:
        # Chunks arrive as the JSON objects the server sent (the SDK's Stream[object]: its SSE
        # parsing and in-stream error handling, without building a pydantic model per chunk).
        yield from chunk_events(self.sdk_stream, self._provider.key, self._provider._redact)


def chunk_events(chunks: Iterable[Any], provider: str, redact: Redactor) -> Iterator[ProviderEvent]:
    """PicoBot's events of a stream of chat.completion.chunk JSON objects, ending with Completed
    (ProviderUnavailable when the chunks end before a finish_reason). Also the plugin adapters' parser."""
    text: list[str] = []
    reasoning: list[str] = []
    tools: dict[int, _ToolAcc] = {}
    usage = Usage()
    finish: str | None = None
    # Compatible servers may leave fields out or set them to null, hence `_obj` and .get.
    for chunk in chunks:
        chunk = _obj(chunk)
        chunk_usage = _obj(chunk.get("usage"))
        if chunk_usage:
            usage = Usage(chunk_usage.get("prompt_tokens") or 0, chunk_usage.get("completion_tokens") or 0,
                          _cached_tokens(chunk_usage))
        for choice in (chunk.get("choices") or [])[:1]:
            choice = _obj(choice)
            delta = _obj(choice.get("delta"))
            if delta:
                yield from _delta_events(delta, text, reasoning, tools)
            finish = choice.get("finish_reason") or finish
    if finish is None:
        raise unavailable(provider, "stream ended before the response was complete", redact)
    yield _completed(text, reasoning, tools, usage, finish)


def _cached_tokens(usage: dict[str, Any]) -> int:
    """Prompt tokens served from the provider's cache (`prompt_tokens_details.cached_tokens`), else 0."""
    cached = _obj(usage.get("prompt_tokens_details")).get("cached_tokens")
    return cached if type(cached) is int and cached >= 0 else 0


def _obj(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _delta_events(delta: dict[str, Any], text: list[str], reasoning: list[str],
                  tools: dict[int, _ToolAcc]) -> Iterator[ProviderEvent]:
    thought = delta.get("reasoning_content") or delta.get("reasoning")
    if isinstance(thought, str) and thought:
        reasoning.append(thought)
        yield ReasoningDelta(thought)
    content = delta.get("content")
    if isinstance(content, str) and content:
        text.append(content)
        yield TextDelta(content)
    for call in delta.get("tool_calls") or []:
        call = _obj(call)
        function = _obj(call.get("function"))
        slot = _slot(call, tools)
        acc = tools.get(slot)
        first = acc is None
        if acc is None:
            acc = tools[slot] = _ToolAcc(len(tools), call.get("id") or f"call_{uuid.uuid4().hex[:24]}",
                                         function.get("name") or "")
        piece = function.get("arguments") or ""
        if not isinstance(piece, str):  # a server that sends the arguments as a JSON object
            piece = json.dumps(piece)
        acc.arguments += piece
        if first or piece:
            yield ToolCallDelta(acc.index, acc.id if first else None, acc.name if first else None, piece)


def _slot(call: dict[str, Any], tools: dict[int, _ToolAcc]) -> int:
    """The accumulator key of a tool-call delta: its index, or (servers that omit it) its id."""
    index = call.get("index")
    if isinstance(index, int):
        return index
    call_id = call.get("id")
    known = next((k for k, acc in tools.items() if call_id and acc.id == call_id), None)
    if known is not None:
        return known
    if call_id or not tools:
        return -1 - len(tools)  # a new call; negative keys cannot clash with real indexes
    return next(reversed(tools))  # a continuation of the latest call


def _completed(text: list[str], reasoning: list[str], tools: dict[int, _ToolAcc], usage: Usage, finish: str) -> Completed:
    calls = [ToolCall(a.id, a.name, a.arguments or "{}") for a in sorted(tools.values(), key=lambda a: a.index)]
    stop = FINISH_REASONS.get(finish, finish)
    if calls and stop == "stop":  # some compatible servers say "stop" after tool calls
        stop = "tool_calls"
    message = ChatMessage(role="assistant", content="".join(text), tool_calls=calls,
                          reasoning_content="".join(reasoning) or None)
    return Completed(message=message, usage=usage, stop_reason=stop)


# --- request conversion -------------------------------------------------------------


def _dumps(obj: Any) -> bytes:
    # as the SDK encodes a body (httpx's JSON defaults); NaN is refused, not sent
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()


_tool_sets: dict[tuple[int, ...], tuple[tuple[ToolSpec, ...], bytes]] = {}


def _tools_json(tools: tuple[ToolSpec, ...]) -> bytes:
    """The `tools` array of a request, encoded once per set of ToolSpec objects (a registry builds its
    specs once, and they are the largest and the same part of every request)."""
    key = tuple(map(id, tools))
    hit = _tool_sets.get(key)
    if hit is not None and all(a is b for a, b in zip(hit[0], tools)):
        return hit[1]
    data = _dumps([_tool(t) for t in tools])
    if len(_tool_sets) >= 64:
        _tool_sets.clear()
    _tool_sets[key] = (tools, data)
    return data


def _encode_body(body: dict[str, Any]) -> bytes:
    """The request's JSON as bytes, posted as the request's `content` (the SDK sends it as it is)."""
    tools = body.get("tools")
    if not isinstance(tools, tuple):  # none, or replaced through the model's options
        return _dumps(body)
    head = _dumps({k: v for k, v in body.items() if k != "tools"})
    return head[:-1] + b',"tools":' + _tools_json(tools) + b"}"


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": spec.name, "description": spec.description,
                                             "parameters": spec.parameters}}


def to_openai_messages(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """Chat Completions messages. A tool message carries text only, so the images of a run of tool
    results (a browser screenshot) follow it as one user message."""
    out: list[dict[str, Any]] = []
    images: list[dict[str, Any]] = []
    start = turn_start(messages)
    for i, m in enumerate(messages):
        if m.role != "tool" and images:
            out.append(_tool_images(images))
            images = []
        out.append(_wire_message(m))
        if m.role == "tool" and i > start and not isinstance(m.content, str):
            images += [p for p in (_part(b) for b in m.content if b.get("type") != "text") if p is not None]
    if images:
        out.append(_tool_images(images))
    return out


def _tool_images(parts: list[dict[str, Any]]) -> dict[str, Any]:
    return {"role": "user", "content": [{"type": "text", "text": "(images from the tool results above)"}, *parts]}


def _wire_message(m: ChatMessage) -> dict[str, Any]:
    if m.role == "tool":
        return {"role": "tool", "tool_call_id": m.tool_call_id or "", "content": text_of(m.content)}
    if m.role == "assistant":
        out: dict[str, Any] = {"role": "assistant", "content": text_of(m.content) or None}
        if m.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments or "{}"}}
                for c in m.tool_calls
            ]
        elif out["content"] is None:
            out["content"] = ""
        if m.reasoning_content:
            out["reasoning_content"] = m.reasoning_content  # DeepSeek needs it back on tool-call turns
        return out
    if m.role == "user":
        return {"role": "user", "content": user_content(m.content)}
    return {"role": m.role, "content": text_of(m.content)}


def user_content(content: Content) -> str | list[dict[str, Any]]:
    """A string when the content is all text (widest server support), else content parts."""
    if isinstance(content, str):
        return content
    parts = [p for p in (_part(b) for b in content) if p is not None]
    if all(p["type"] == "text" for p in parts):
        return "\n".join(p["text"] for p in parts)
    return parts


def _part(block: dict[str, Any]) -> dict[str, Any] | None:
    kind = block.get("type")
    if kind == "text":
        return {"type": "text", "text": block.get("text", "")}
    if kind == "image_url":
        return {"type": "image_url", "image_url": {"url": block.get("url", "")}}
    if kind == "media":
        image = read_image(str(block.get("path") or ""), block.get("mime"))
        if image is not None:
            return {"type": "image_url", "image_url": {"url": f"data:{image[0]};base64,{image[1]}"}}
        return {"type": "text", "text": media_note(block)}
    return None
