"""Provider types from plugins (`picobot_providers`): an adapter for a made-up "echo-API", served by a small
HTTP server on loopback, driven through the real provider classes — streamed (SSE) and whole JSON answers,
a tool call, usage, a 500 or a 429 then success, an adapter that breaks (the call fails naming the plugin),
an unknown type refused at start with its key path, and a fallback chain moving past the plugin's provider.
No mocks: a real server, a real PluginHost, a real Redis for the breakers and the runtime.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis as redis_lib

from picobot.app import build_runtime, check_config
from picobot.config import Config
from picobot.domain.messages import ChatMessage
from picobot.errors import ConfigError, ProviderError, ProviderRateLimited, ProviderUnavailable
from picobot.plugins import PluginHost, ProviderAdapter, hookimpl
from picobot.plugins.contributions import ContributionError, check_provider_adapter
from picobot.providers import build_provider
from picobot.providers.adapted import AdaptedProvider
from picobot.providers.base import ChatRequest, Completed, ProviderEvent, TextDelta, ToolCallDelta, ToolSpec
from picobot.providers.fallback import BreakerSettings, ChainEntry, CircuitBreakers, FallbackProvider

PLUGIN = "echoplug"
API_KEY = "echo-key-0123456789abcdef"


# ---------------------------------------------------------------- the echo-API on loopback


class EchoServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), EchoHandler)
        self.requests: list[dict[str, Any]] = []
        self.seen: set[str] = set()
        self.lock = threading.Lock()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/api"

    def of(self, text: str) -> list[dict[str, Any]]:
        """The requests whose last turn says `text`."""
        with self.lock:
            return [r for r in self.requests if r["body"]["turns"][-1]["say"] == text]


class EchoHandler(BaseHTTPRequestHandler):
    """POST /api/echo/<engine>/talk with {engine, turns: [{who, say}], functions, live, limit}."""

    server: EchoServer

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        say = body["turns"][-1]["say"]
        with self.server.lock:
            self.server.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
            first = say not in self.server.seen
            self.server.seen.add(say)
        if body["engine"] == "down":
            return self._json(503, {"problem": "the engine is down"})
        if "flaky" in say and first:
            return self._json(500, {"problem": "overloaded"}, {"Retry-After": "0"})
        if "busy" in say and first:
            return self._json(429, {"problem": "slow down"}, {"Retry-After": "1"})
        invoke = [{"fn": "clock", "args": {"tz": "UTC"}}] if "call a tool" in say else []
        said = "" if invoke else f"echo: {say}"
        counts = {"in": 10 * len(body["turns"]), "out": len(said.split()) + len(invoke)}
        done = "invoke" if invoke else "end"
        if not body["live"]:
            return self._json(200, {"reply": {"said": said, "invoke": invoke}, "counts": counts, "done": done})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()  # HTTP/1.0: the body ends when the connection closes
        events = [": a comment, then a keep-alive the adapter skips\n", 'data: {"ping": true}\n\n']
        events += [f"event: piece\ndata: {json.dumps({'piece': w})}\n\n" for w in _pieces(said)]
        events += [f"event: invoke\ndata: {json.dumps({'invoke': c})}\n\n" for c in invoke]
        events.append(f"data: {json.dumps({'counts': counts, 'done': done})}\n\n")
        for event in events:
            self.wfile.write(event.encode())
            self.wfile.flush()

    def _json(self, status: int, value: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for name, v in (headers or {}).items():
            self.send_header(name, v)
        self.end_headers()
        self.wfile.write(data)


def _pieces(text: str) -> list[str]:
    words = text.split(" ")
    return [w if i == len(words) - 1 else w + " " for i, w in enumerate(words) if w or i == len(words) - 1]


@pytest.fixture(scope="module")
def echo() -> Iterator[EchoServer]:
    server = EchoServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


# ---------------------------------------------------------------- the plugin


class EchoAdapter:
    """Chat Completions <-> the echo-API."""

    path = "/echo/{model}/talk"

    def __init__(self, live: bool = True) -> None:
        self.live = live

    def headers(self, api_key: str) -> dict[str, str]:
        return {"X-Echo-Key": api_key}

    def transform_request(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"engine": request["model"], "live": self.live and request["stream"], "limit": request.get("max_tokens"),
                "turns": [{"who": m["role"], "say": m.get("content") or ""} for m in request["messages"]],
                "functions": [t["function"]["name"] for t in request.get("tools", [])]}

    def transform_response(self, body: dict[str, Any]) -> dict[str, Any]:
        reply = body["reply"]
        calls = [_call(i, c) for i, c in enumerate(reply["invoke"])]
        return {"object": "chat.completion", "usage": _usage(body["counts"]),
                "choices": [{"index": 0, "finish_reason": "tool_calls" if calls else "stop",
                             "message": {"role": "assistant", "content": reply["said"] or None,
                                         "tool_calls": calls or None}}]}

    def transform_stream_chunk(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        if "piece" in chunk:
            return {"choices": [{"index": 0, "delta": {"content": chunk["piece"]}}]}
        if "invoke" in chunk:
            return {"choices": [{"index": 0, "delta": {"tool_calls": [{**_call(0, chunk["invoke"]), "index": 0}]}}]}
        if "done" in chunk:
            return {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if chunk["done"] == "invoke"
                                 else "stop"}], "usage": _usage(chunk["counts"])}
        return None


def _call(i: int, invoke: dict[str, Any]) -> dict[str, Any]:
    return {"id": f"call_{i}", "type": "function", "function": {"name": invoke["fn"],
                                                                "arguments": json.dumps(invoke["args"])}}


def _usage(counts: dict[str, int]) -> dict[str, int]:
    return {"prompt_tokens": counts["in"], "completion_tokens": counts["out"]}


class RaisingAdapter(EchoAdapter):
    def transform_request(self, request: dict[str, Any]) -> dict[str, Any]:
        raise KeyError("no such field: turns")


class NotJsonAdapter(EchoAdapter):
    def transform_request(self, request: dict[str, Any]) -> dict[str, Any]:
        return {"engine": request["model"], "when": object()}


class BadChunkAdapter(EchoAdapter):
    def transform_stream_chunk(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        return ["not", "a", "chunk"] if "piece" in chunk else super().transform_stream_chunk(chunk)  # type: ignore[return-value]


class WrongShapeAdapter(EchoAdapter):
    def transform_stream_chunk(self, chunk: dict[str, Any]) -> dict[str, Any] | None:
        return {"choices": [{"delta": {"tool_calls": 5}}]} if "piece" in chunk else None


class BadResponseAdapter(EchoAdapter):
    def __init__(self) -> None:
        super().__init__(live=False)

    def transform_response(self, body: dict[str, Any]) -> dict[str, Any]:
        return {"text": body["reply"]["said"]}  # not a chat.completion


BROKEN = {"echo-raises": (RaisingAdapter(), "transform_request raised KeyError"),
          "echo-notjson": (NotJsonAdapter(), "transform_request returned what is not JSON"),
          "echo-badchunk": (BadChunkAdapter(), "transform_stream_chunk returned list"),
          "echo-wrongshape": (WrongShapeAdapter(), "tool_calls is not a list"),
          "echo-badresponse": (BadResponseAdapter(), "transform_response returned a dict with keys ['text']")}


class EchoPlugin:
    @hookimpl
    def picobot_providers(self, register: Any) -> None:
        adapter: ProviderAdapter = EchoAdapter()  # the SDK's protocol, met by a plain class
        register("echo-api", adapter)
        register("echo-batch", EchoAdapter(live=False))
        for name, (adapter, _) in BROKEN.items():
            register(name, adapter)


class Squatter:
    @hookimpl
    def picobot_providers(self, register: Any) -> None:
        register("openai", EchoAdapter())  # PicoBot's own
        register("echo-api", EchoAdapter())  # EchoPlugin's, registered first (called first)
        register("squat-api", EchoAdapter())


def _config(tmp_path: Path, providers: dict[str, Any], redis_url: str = "redis://127.0.0.1:9/0") -> Config:
    agents = {"default": {"provider": next(iter(providers), "default")}}
    return Config(home=tmp_path, redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'picobot.db'}",
                  providers=providers, agents=agents, models={"default": {"model_id": "echo-1"}},
                  gateway={"pairing_required": False})


def _host(config: Config, *plugins: Any) -> PluginHost:
    from picobot.app import builtin_plugins

    host = PluginHost(config, builtins=builtin_plugins(config), discover=False)
    for plugin in plugins:
        assert host.register(PLUGIN if isinstance(plugin, EchoPlugin) else type(plugin).__name__.lower(), plugin,
                             source="entry_point")
    return host


def _provider(tmp_path: Path, echo: EchoServer, kind: str = "echo-api", max_retries: int = 2,
              key: str = "echo") -> tuple[AdaptedProvider, PluginHost]:
    entry = {"type": kind, "base_url": echo.url, "api_key": API_KEY, "max_retries": max_retries,
             "extra_headers": {"X-Tenant": "t1"}, "llm_timeout_secs": 10}
    config = _config(tmp_path, {key: entry})
    host = _host(config, EchoPlugin())
    provider = build_provider(key, config.providers[key], host.provider_adapters(), host.report)
    assert isinstance(provider, AdaptedProvider)
    return provider, host


def _ask(text: str, model: str = "echo-1", tools: list[ToolSpec] | None = None) -> ChatRequest:
    return ChatRequest(model=model, messages=[ChatMessage(role="system", content="be brief"),
                                              ChatMessage(role="user", content=text)],
                       tools=tools or [], max_tokens=64)


def _collect(stream: Any) -> list[ProviderEvent]:
    try:
        return list(stream)
    finally:
        stream.close()


def _completed(events: list[ProviderEvent]) -> Completed:
    assert isinstance(events[-1], Completed), events
    return events[-1]


def _errors(host: PluginHost, name: str) -> str:
    return next(s for s in host.statuses() if s["name"] == name)["error"] or ""


CLOCK = ToolSpec("clock", "The time now.", {"type": "object", "properties": {"tz": {"type": "string"}}})


# ---------------------------------------------------------------- answers


@pytest.mark.parametrize("kind", ["echo-api", "echo-batch"])
def test_text_and_usage_through_the_adapter(tmp_path: Path, echo: EchoServer, kind: str) -> None:
    provider, _ = _provider(tmp_path, echo, kind)
    text = f"hello there {uuid.uuid4().hex[:6]}"
    events = _collect(provider.stream(_ask(text, model="echo/1")))
    done = _completed(events)
    assert done.message.content == f"echo: {text}"
    assert (done.usage.input_tokens, done.usage.output_tokens) == (20, 4)
    assert done.stop_reason == "stop"
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == f"echo: {text}"
    assert len(deltas) == (4 if kind == "echo-api" else 1)  # streamed piece by piece, or the whole body at once
    [sent] = echo.of(text)
    assert sent["path"] == "/api/echo/echo%2F1/talk"  # base_url + the adapter's path, the model id quoted
    assert sent["headers"]["X-Echo-Key"] == API_KEY and sent["headers"]["X-Tenant"] == "t1"
    assert "Authorization" not in sent["headers"]  # the adapter's headers replace the Bearer default
    assert sent["body"] == {"engine": "echo/1", "live": kind == "echo-api", "limit": 64, "functions": [],
                            "turns": [{"who": "system", "say": "be brief"}, {"who": "user", "say": text}]}


@pytest.mark.parametrize("kind", ["echo-api", "echo-batch"])
def test_a_tool_call_through_the_adapter(tmp_path: Path, echo: EchoServer, kind: str) -> None:
    provider, _ = _provider(tmp_path, echo, kind)
    text = f"please call a tool {uuid.uuid4().hex[:6]}"
    events = _collect(provider.stream(_ask(text, tools=[CLOCK])))
    done = _completed(events)
    assert done.stop_reason == "tool_calls"
    assert [(c.id, c.name, json.loads(c.arguments)) for c in done.message.tool_calls] == [("call_0", "clock",
                                                                                            {"tz": "UTC"})]
    assert [(d.id, d.name) for d in events if isinstance(d, ToolCallDelta) and d.id] == [("call_0", "clock")]
    assert echo.of(text)[0]["body"]["functions"] == ["clock"]


@pytest.mark.parametrize("kind", ["echo-api", "echo-batch"])
def test_a_500_is_retried_and_then_answered(tmp_path: Path, echo: EchoServer, kind: str) -> None:
    provider, _ = _provider(tmp_path, echo, kind, max_retries=2)
    text = f"flaky {uuid.uuid4().hex[:6]}"
    stream = provider.stream(_ask(text))
    assert _completed(_collect(stream)).message.content == f"echo: {text}"
    assert stream.attempts == 2 and len(echo.of(text)) == 2


def test_a_500_without_retries_left_is_a_provider_error(tmp_path: Path, echo: EchoServer) -> None:
    provider, _ = _provider(tmp_path, echo, max_retries=0)
    with pytest.raises(ProviderUnavailable) as caught:
        _collect(provider.stream(_ask(f"flaky {uuid.uuid4().hex[:6]}")))
    assert caught.value.status == 500 and "overloaded" in str(caught.value)


def test_a_429_waits_for_its_retry_after(tmp_path: Path, echo: EchoServer) -> None:
    provider, _ = _provider(tmp_path, echo, max_retries=1)
    text = f"busy {uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    assert _completed(_collect(provider.stream(_ask(text)))).message.content == f"echo: {text}"
    assert time.monotonic() - started >= 0.9  # Retry-After: 1, not the 0.25-0.5 s backoff
    provider, _ = _provider(tmp_path, echo, max_retries=0)
    with pytest.raises(ProviderRateLimited) as caught:
        _collect(provider.stream(_ask(f"busy {uuid.uuid4().hex[:6]}")))
    assert caught.value.retry_after == 1.0  # type: ignore[attr-defined]


# ---------------------------------------------------------------- a broken adapter


@pytest.mark.parametrize("kind", sorted(BROKEN))
def test_a_broken_adapter_fails_the_call_naming_the_plugin(tmp_path: Path, echo: EchoServer, kind: str) -> None:
    provider, host = _provider(tmp_path, echo, kind, max_retries=2)
    text = f"hello {uuid.uuid4().hex[:6]}"
    stream = provider.stream(_ask(text))
    with pytest.raises(ProviderError) as caught:
        _collect(stream)
    message = str(caught.value)
    assert f"plugin {PLUGIN!r}" in message and f"{kind!r} adapter" in message, message
    assert BROKEN[kind][1] in message, message
    assert API_KEY not in message
    assert stream.attempts == 1  # the same input would fail the same way: not retried
    assert len(echo.of(text)) == (0 if "transform_request" in BROKEN[kind][1] else 1)
    assert BROKEN[kind][1] in _errors(host, PLUGIN)  # and reported against the plugin (/health)


def test_a_provider_still_answers_after_its_adapter_failed_once(tmp_path: Path, echo: EchoServer) -> None:
    class Moody(EchoAdapter):
        calls = 0

        def transform_request(self, request: dict[str, Any]) -> dict[str, Any]:
            Moody.calls += 1
            if Moody.calls == 1:
                raise RuntimeError("first call")
            return super().transform_request(request)

    class MoodyPlugin:
        @hookimpl
        def picobot_providers(self, register: Any) -> None:
            register("moody", Moody())

    config = _config(tmp_path, {"m": {"type": "moody", "base_url": echo.url}})
    host = _host(config, MoodyPlugin())
    provider = build_provider("m", config.providers["m"], host.provider_adapters(), host.report)
    with pytest.raises(ProviderError, match="moodyplugin"):
        _collect(provider.stream(_ask("one")))
    assert _completed(_collect(provider.stream(_ask("two")))).message.content == "echo: two"


# ---------------------------------------------------------------- registration and config


def test_adapter_checks_refuse_builtin_names_and_non_callables() -> None:
    assert check_provider_adapter("p", "echo-api", EchoAdapter()).name == "echo-api"
    for name in ["openai", "anthropic", "Echo", "", None, "a b", "x" * 60]:
        with pytest.raises(ContributionError):
            check_provider_adapter("p", name, EchoAdapter())

    class NoStream:
        transform_request = transform_response = staticmethod(lambda body: body)
        transform_stream_chunk = "not callable"

    class BadPath(EchoAdapter):
        path = "chat completions"

    class BadHeaders(EchoAdapter):
        headers = {"X-Key": "k"}  # type: ignore[assignment]

    for adapter in [NoStream(), BadPath(), BadHeaders(), object(), None]:
        with pytest.raises(ContributionError):
            check_provider_adapter("p", "fine", adapter)


def test_a_taken_or_builtin_type_name_is_reported_and_the_first_stays(tmp_path: Path) -> None:
    config = _config(tmp_path, {})
    host = _host(config, EchoPlugin(), Squatter())  # pluggy calls the last registered first
    adapters = host.provider_adapters()
    assert {"echo-api", "squat-api"} <= set(adapters) and "openai" not in adapters
    assert adapters["echo-api"].plugin == "squatter"  # first in call order
    assert "already another plugin's" in _errors(host, PLUGIN)
    assert "PicoBot's own" in _errors(host, "squatter")


def test_an_unknown_type_fails_at_start_with_its_key_path(tmp_path: Path) -> None:
    good = _config(tmp_path, {"default": {"type": "echo-api", "base_url": "http://127.0.0.1:9/api"}})
    check_config(good, _host(good, EchoPlugin()))
    with pytest.raises(ConfigError) as caught:
        check_config(good, _host(good))  # the plugin is not installed
    assert caught.value.key_path == "providers.default.type" and "'echo-api'" in caught.value.reason
    typo = _config(tmp_path, {"default": {}, "odd": {"type": "echo-apj", "base_url": "http://127.0.0.1:9"}})
    with pytest.raises(ConfigError) as caught:
        check_config(typo, _host(typo, EchoPlugin()))
    assert caught.value.key_path == "providers.odd.type" and "echo-api" in caught.value.reason  # the known ones
    no_url = _config(tmp_path, {"odd": {"type": "echo-api"}})
    with pytest.raises(ConfigError) as caught:
        check_config(no_url, _host(no_url, EchoPlugin()))
    assert caught.value.key_path == "providers.odd.base_url"


def test_the_runtime_builds_the_plugins_provider_and_refuses_an_unknown_one(tmp_path: Path, echo: EchoServer,
                                                                            redis_url: str) -> None:
    config = _config(tmp_path, {"default": {"type": "echo-api", "base_url": echo.url}}, redis_url)
    with pytest.raises(ConfigError, match="providers.default.type"):
        build_runtime(config, queue=None, migrate=True, plugins=_host(config))  # type: ignore[arg-type]
    rt = build_runtime(config, queue=None, migrate=True, plugins=_host(config, EchoPlugin()))  # type: ignore[arg-type]
    try:
        provider = rt.provider("default")
        assert isinstance(provider, AdaptedProvider) and provider.spec.plugin == PLUGIN
        assert _completed(_collect(provider.stream(_ask("from the runtime")))).message.content == "echo: from the runtime"
    finally:
        rt.close()


# ---------------------------------------------------------------- fallback chains


@pytest.mark.parametrize("first", ["down", "raises"])
def test_a_fallback_chain_moves_past_the_plugins_provider(tmp_path: Path, echo: EchoServer, redis_url: str,
                                                          first: str) -> None:
    tag = uuid.uuid4().hex[:6]
    kind = "echo-api" if first == "down" else "echo-raises"
    primary, _ = _provider(tmp_path, echo, kind, max_retries=0, key=f"primary-{tag}")
    backup, _ = _provider(tmp_path, echo, "echo-batch", max_retries=0, key=f"backup-{tag}")
    client = redis_lib.Redis.from_url(redis_url)
    breakers = CircuitBreakers(client, lambda key: BreakerSettings(failures=1, cooldown_secs=600))
    chain = FallbackProvider([ChainEntry("primary:default", primary, "down"),
                              ChainEntry("backup:default", backup, "echo-2")], breakers)
    text = f"fall over {tag}"
    stream = chain.stream(_ask(text, model="down"))
    done = _completed(_collect(stream))
    assert done.message.content == f"echo: {text}" and done.answered_by == "backup:default"
    assert stream.tried == ["primary:default", "backup:default"]
    assert [r["body"]["engine"] for r in echo.of(text)] == (["down", "echo-2"] if first == "down" else ["echo-2"])
    assert not breakers.allows(primary.key)  # its failure counted: the next call skips it
