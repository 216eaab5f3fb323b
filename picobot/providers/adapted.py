"""Provider types that plugins bring (`picobot_providers`): an adapter translates between PicoBot's
OpenAI-shaped calls and an API of another shape (seed 001's Lua adapters, in Python).

    ChatRequest ─▶ Chat Completions body ─ transform_request ─▶ POST base_url + path
    an SSE event's JSON ─ transform_stream_chunk ─▶ chat.completion.chunk ─┐
    a JSON body ─ transform_response ─▶ chat.completion ─▶ one chunk ───────┴▶ chunk_events (the OpenAI parser)

The answer is read by its Content-Type: `text/event-stream` as a stream, anything else as one JSON body.
Retries, Retry-After, redaction and the closable stream are the SDK providers' (`_common`), so what wraps a
Provider (fallback chains, breakers, budgets, metrics) sees no difference. An adapter that raises or
returns what is not the shape asked for fails the call with ProviderUnavailable naming the plugin: not
retried (it would fail the same way again), but a fallback chain moves on to its next entry.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Iterator, Mapping, Protocol
from urllib.parse import quote

from picobot.errors import ProviderError, ProviderUnavailable
from picobot.providers._common import (
    Redactor,
    RetryingStream,
    RetryPolicy,
    api_message,
    drain_rest,
    error_for_status,
    looks_like_context_overflow,
    parse_retry_after,
    shutdown_socket,
    unavailable,
)
from picobot.providers.base import ChatRequest, ProviderEvent, ToolSpec
from picobot.providers.openai_provider import chunk_events, to_openai_messages

DEFAULT_PATH = "/chat/completions"
MAX_ERROR_BYTES = 64 * 1024  # of an error body, for its message
MAX_BODY_BYTES = 64 * 1024 * 1024  # of a non-streamed answer
HOOK = "picobot_providers"

Report = Callable[[str, str, str], None]  # (plugin, hook, problem): PluginHost.report


class ProviderAdapter(Protocol):
    """What a plugin registers with `picobot_providers`. Optional: `path` (default "/chat/completions";
    "{model}" is replaced by the model id) and `headers(api_key) -> dict` (default: a Bearer token)."""

    def transform_request(self, request: dict[str, Any]) -> dict[str, Any]: ...

    def transform_response(self, body: dict[str, Any]) -> dict[str, Any]: ...

    def transform_stream_chunk(self, chunk: dict[str, Any]) -> dict[str, Any] | None: ...


class AdapterType(Protocol):
    """A registered adapter as build_provider takes it (picobot.plugins' ProviderAdapterSpec)."""

    @property
    def plugin(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def adapter(self) -> Any: ...


class AdaptedProvider:
    """A Provider for an API that a plugin's adapter translates to and from Chat Completions."""

    def __init__(self, key: str, spec: AdapterType, *, base_url: str, api_key: str | None = None,
                 extra_headers: Mapping[str, str] | None = None, timeout: float = 120.0, max_retries: int = 2,
                 retry_policy: RetryPolicy | None = None, report: Report | None = None) -> None:
        import httpx  # here, not at import: processes that never call a model stay small

        self.key = key
        self.spec = spec
        self._base = base_url.rstrip("/")
        self._api_key = api_key or ""
        self._extra_headers = dict(extra_headers or {})
        self._timeout = timeout
        self._policy = retry_policy or RetryPolicy(max_retries=max_retries)
        self._redact = Redactor.for_config(api_key, extra_headers)
        self._report = report
        self._httpx = httpx
        self._client = httpx.Client(timeout=timeout, follow_redirects=False)

    @classmethod
    def from_config(cls, key: str, cfg: Any, spec: AdapterType, report: Report | None = None) -> AdaptedProvider:
        return cls(key, spec, base_url=cfg.base_url or "", api_key=cfg.api_key,
                   extra_headers=getattr(cfg, "extra_headers", None) or {}, timeout=float(cfg.llm_timeout_secs),
                   max_retries=int(cfg.max_retries), report=report)

    def stream(self, request: ChatRequest) -> RetryingStream:
        call = _Call(self, openai_body(request))
        return RetryingStream(call.open, self._policy, provider=self.key)

    def close(self) -> None:
        self._client.close()

    # ------------------------------------------------------------------ the request

    def _prepare(self, body: dict[str, Any]) -> tuple[str, dict[str, str], bytes]:
        """(url, headers, content) of a request: the adapter's transform, encoded."""
        sent = self._adapt("transform_request", body)
        if not isinstance(sent, dict):
            raise self._fault("transform_request", f"returned {type(sent).__name__}, not a JSON object")
        try:
            content = json.dumps(sent, ensure_ascii=False, allow_nan=False).encode("utf-8", "backslashreplace")
        except (TypeError, ValueError, RecursionError) as exc:
            raise self._fault("transform_request", f"returned what is not JSON ({exc})") from None
        path = getattr(self.spec.adapter, "path", None) or DEFAULT_PATH
        url = self._base + path.replace("{model}", quote(str(body.get("model") or ""), safe=""))
        return url, self._headers(), content

    def _headers(self) -> dict[str, str]:
        if callable(getattr(self.spec.adapter, "headers", None)):
            own = self._adapt("headers", self._api_key)
            if not isinstance(own, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in own.items()):
                raise self._fault("headers", f"returned {type(own).__name__}, not a dict of strings")
            self._redact = Redactor.for_config(self._api_key or None, {**own, **self._extra_headers})
        else:
            own = {"Authorization": f"Bearer {self._api_key}"} if self._api_key else {}
        return {"Content-Type": "application/json", "Accept": "text/event-stream, application/json", **own,
                **self._extra_headers}

    def _post(self, url: str, headers: dict[str, str], content: bytes) -> _AdaptedAttempt:
        httpx = self._httpx
        try:
            response = self._client.send(self._client.build_request("POST", url, headers=headers, content=content),
                                         stream=True)
        except httpx.TimeoutException:
            raise unavailable(self.key, f"timed out after {self._timeout:g}s", self._redact) from None
        except httpx.HTTPError as exc:
            raise unavailable(self.key, f"connection failed: {exc}", self._redact) from None
        if response.status_code >= 400:
            raise self._status_error(response)
        return _AdaptedAttempt(response, self)

    def _status_error(self, response: Any) -> ProviderError:
        try:
            raw = _read(response, MAX_ERROR_BYTES)[0]
        except self._httpx.HTTPError:
            raw = b""
        finally:
            response.close()
        text = raw.decode("utf-8", "replace").strip()
        message = api_message(_json_or_text(raw), text[:300] or f"HTTP {response.status_code}")  # an odd shape: as sent
        return error_for_status(response.status_code, message, provider=self.key, redact=self._redact,
                                overflow=looks_like_context_overflow(message),
                                retry_after=parse_retry_after(response.headers))

    # ------------------------------------------------------------------ the answer

    def _chunk(self, data: str) -> dict[str, Any] | None:
        """One SSE event's data, as the adapter makes it a chat.completion.chunk (None: skipped)."""
        chunk = self._adapt("transform_stream_chunk", self._decode(data))
        if chunk is None:
            return None
        if not isinstance(chunk, dict):
            raise self._fault("transform_stream_chunk", f"returned {type(chunk).__name__}, not a dict or None")
        self._raise_error_in(chunk)
        return self._checked("transform_stream_chunk", chunk)

    def _whole(self, response: Any) -> dict[str, Any]:
        """A non-streamed answer as the one chunk that carries all of it."""
        raw, cut = _read(response, MAX_BODY_BYTES)
        if cut:
            raise unavailable(self.key, f"broken response: over {MAX_BODY_BYTES} bytes", self._redact)
        body = self._adapt("transform_response", self._decode(raw))
        if isinstance(body, dict):
            self._raise_error_in(body)
        choices = body.get("choices") if isinstance(body, dict) else None
        if not (isinstance(choices, list) and choices and isinstance(choices[0], dict)
                and isinstance(choices[0].get("message"), dict)):
            raise self._fault("transform_response", f"returned {_shape(body)}, not a chat.completion body "
                              "(choices[0].message)")
        return self._checked("transform_response", completion_chunk(body))

    def _checked(self, method: str, chunk: dict[str, Any]) -> dict[str, Any]:
        problem = chunk_problem(chunk)
        if problem is not None:
            raise self._fault(method, f"returned a chunk PicoBot cannot read: {problem}")
        return chunk

    def _decode(self, data: str | bytes) -> Any:
        try:
            return json.loads(data)
        except (ValueError, RecursionError):
            raise unavailable(self.key, f"broken response: not JSON: {str(data[:200])!r}", self._redact) from None

    def _raise_error_in(self, body: dict[str, Any]) -> None:
        """An OpenAI-shaped `{"error": …}` the adapter passed on: the API's own error, mapped as the OpenAI one is."""
        error = body.get("error")
        if error:
            message = api_message(body, str(error))
            raise error_for_status(0, message, provider=self.key, redact=self._redact,
                                   overflow=looks_like_context_overflow(message))

    # ------------------------------------------------------------------ the adapter's faults

    def _adapt(self, method: str, value: Any) -> Any:
        try:
            return getattr(self.spec.adapter, method)(value)
        except Exception as exc:  # the plugin's bug: this call fails, the worker goes on
            raise self._fault(method, f"raised {type(exc).__name__}: {str(exc)[:300]}") from None

    def _fault(self, method: str, problem: str) -> ProviderUnavailable:
        text = f"the {self.spec.name!r} adapter of plugin {self.spec.plugin!r}: {method} {problem}"
        err = unavailable(self.key, text, self._redact)
        err.retryable = False  # the same input fails the same way; a fallback chain still moves on
        if self._report is not None:
            self._report(self.spec.plugin, HOOK, self._redact(text))
        return err


class _Call:
    """One stream() call: the request transformed on its first attempt, posted on each."""

    def __init__(self, provider: AdaptedProvider, body: dict[str, Any]) -> None:
        self._provider = provider
        self._body = body
        self._prepared: tuple[str, dict[str, str], bytes] | None = None

    def open(self) -> _AdaptedAttempt:
        if self._prepared is None:
            self._prepared = self._provider._prepare(self._body)
        return self._provider._post(*self._prepared)


class _AdaptedAttempt:
    """One HTTP answer: iterate its events once; abort() may be called from another thread."""

    def __init__(self, response: Any, provider: AdaptedProvider) -> None:
        self._response = response
        self._provider = provider

    def events(self) -> Iterator[ProviderEvent]:
        provider = self._provider
        try:
            yield from chunk_events(self._chunks(), provider.key, provider._redact)
        except ProviderError:
            raise
        except provider._httpx.TimeoutException:
            raise unavailable(provider.key, f"timed out after {provider._timeout:g}s", provider._redact) from None
        except (provider._httpx.HTTPError, provider._httpx.StreamError) as exc:
            raise unavailable(provider.key, f"connection failed: {exc}", provider._redact) from None
        except (TypeError, ValueError, AttributeError, KeyError) as exc:  # a value in the adapter's chunks
            raise provider._fault("output", f"could not be read: {type(exc).__name__}: {exc}") from None

    def _chunks(self) -> Iterator[dict[str, Any]]:
        if "text/event-stream" in self._response.headers.get("content-type", ""):
            yield from self._stream_chunks()
        else:
            yield self._provider._whole(self._response)

    def _stream_chunks(self) -> Iterator[dict[str, Any]]:
        events = sse_data(self._response.iter_lines())
        for data in events:
            if data.strip() == "[DONE]":
                drain_rest(self._response, events)
                return
            chunk = self._provider._chunk(data)
            if chunk is not None:
                yield chunk

    def abort(self) -> None:
        shutdown_socket(self._response)

    def close(self) -> None:
        try:
            self._response.close()
        except Exception:  # closing a broken stream may fail again; nothing left to do
            pass


# --- shapes -------------------------------------------------------------------------


def openai_body(request: ChatRequest) -> dict[str, Any]:
    """The Chat Completions request body an adapter transforms (streamed, with usage)."""
    body: dict[str, Any] = {"model": request.model, "messages": to_openai_messages(request.messages),
                            "stream": True, "stream_options": {"include_usage": True}}
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    if request.temperature is not None:
        body["temperature"] = request.temperature
    if request.max_tokens is not None:
        body["max_tokens"] = request.max_tokens
    body.update(request.options)
    return body


def _tool(spec: ToolSpec) -> dict[str, Any]:
    return {"type": "function", "function": {"name": spec.name, "description": spec.description,
                                             "parameters": spec.parameters}}


def completion_chunk(body: dict[str, Any]) -> dict[str, Any]:
    """A chat.completion body as the one chat.completion.chunk that carries all of it."""
    choice = body["choices"][0]
    message = choice["message"]
    delta = {k: message[k] for k in ("content", "reasoning_content", "reasoning") if message.get(k) is not None}
    calls = message.get("tool_calls")
    if isinstance(calls, list):  # a whole message's calls carry no index; the chunk parser keys on it
        delta["tool_calls"] = [{**c, "index": i} if isinstance(c, dict) else c for i, c in enumerate(calls)]
    return {"choices": [{"index": 0, "delta": delta, "finish_reason": choice.get("finish_reason") or "stop"}],
            "usage": body.get("usage")}


def sse_data(lines: Iterator[str]) -> Iterator[str]:
    """The data of each server-sent event (its `data:` lines joined), in order; other fields are dropped."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            value = line[5:]
            data.append(value[1:] if value.startswith(" ") else value)
    if data:
        yield "\n".join(data)


def chunk_problem(chunk: dict[str, Any]) -> str | None:
    """What in a chunk the parser cannot take (a field of the wrong type), or None."""
    usage = chunk.get("usage")
    if usage is not None and not (isinstance(usage, dict) and all(
            _int_or_none(usage.get(k)) for k in ("prompt_tokens", "completion_tokens"))):
        return "usage is not an object of token counts"
    choices = chunk.get("choices")
    if choices is None:
        return None
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        return "choices is not a list of objects"
    for choice in choices[:1]:
        if not isinstance(choice.get("finish_reason"), (str, type(None))):
            return "finish_reason is not text"
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            return "delta is not an object"
        calls = delta.get("tool_calls") or []
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            return "tool_calls is not a list of objects"
        for call in calls:
            function = call.get("function") or {}
            if not isinstance(function, dict) or not all(isinstance(v, (str, type(None))) for v in (
                    call.get("id"), function.get("name"))):
                return "a tool call's id or function.name is not text"
    return None


def _int_or_none(value: Any) -> bool:
    return value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0)


def _read(response: Any, limit: int) -> tuple[bytes, bool]:
    """(the body up to `limit` bytes, whether there was more)."""
    out = bytearray()
    for piece in response.iter_bytes():
        out += piece
        if len(out) > limit:
            return bytes(out[:limit]), True
    return bytes(out), False


def _json_or_text(raw: bytes) -> Any:
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        return raw.decode("utf-8", "replace")


def _shape(value: Any) -> str:
    if isinstance(value, dict):
        return f"a dict with keys {sorted(map(str, value))[:8]}"
    return type(value).__name__
