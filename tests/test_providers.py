"""Providers against the in-process fake LLM, through the real SDKs; and the fake's own wire format."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
import sys
import threading
import time
import zlib
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # runnable alone, without the lead's conftest
    sys.path.insert(0, str(ROOT))

import httpx  # noqa: E402
import openai  # noqa: E402

from picobot.domain.messages import ChatMessage  # noqa: E402
from picobot.errors import (  # noqa: E402
    ConfigError,
    ContextLengthExceeded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from picobot.providers import PROVIDER_TYPES, build_provider  # noqa: E402
from picobot.providers._common import Redactor, RetryPolicy, parse_retry_after  # noqa: E402
from picobot.providers.anthropic_provider import AnthropicProvider  # noqa: E402
from picobot.providers.base import (  # noqa: E402
    ChatRequest,
    Completed,
    ProviderEvent,
    ReasoningDelta,
    TextDelta,
    ToolCallDelta,
    ToolSpec,
)
from picobot.providers.openai_provider import OpenAIProvider  # noqa: E402
from scripts.fake_llm import FakeLLM  # noqa: E402
from scripts.fake_llm.wire_anthropic import signature_for  # noqa: E402

API_KEY = "sk-test-SECRET-0123456789abcdef"
KINDS = ["openai", "anthropic"]
CALC = ToolSpec("calculator", "Evaluate arithmetic", {"type": "object", "properties": {"expression": {"type": "string"}}})
GET_TIME = ToolSpec("get_time", "Current time", {"type": "object", "properties": {}})


# --- helpers ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeLLM]:
    llm = FakeLLM(host="127.0.0.1", port=0).start()
    yield llm
    llm.stop()


@pytest.fixture(autouse=True)
def _clean(fake: FakeLLM) -> None:
    fake.reset()


def make_provider(kind: str, fake: FakeLLM, *, key: str = "main", timeout: float = 5.0, max_retries: int = 2,
                  base_url: str | None = None, headers: dict[str, str] | None = None) -> Any:
    policy = RetryPolicy(max_retries=max_retries, base_delay=0.01, max_delay=0.05, max_retry_after=0.2)
    cls = OpenAIProvider if kind == "openai" else AnthropicProvider
    url = base_url or (fake.openai_url if kind == "openai" else fake.url)
    return cls(key, base_url=url, api_key=API_KEY, extra_headers=headers or {}, timeout=timeout,
               max_retries=max_retries, retry_policy=policy)


def ask(text: str, **kw: Any) -> ChatRequest:
    return ChatRequest(model="fake-model", messages=[ChatMessage("system", "Be brief."), ChatMessage("user", text)], **kw)


def collect(provider: Any, request: ChatRequest) -> list[ProviderEvent]:
    return list(provider.stream(request))


def completed(events: list[ProviderEvent]) -> Completed:
    assert isinstance(events[-1], Completed)
    assert sum(isinstance(e, Completed) for e in events) == 1
    return events[-1]


def llm_requests(fake: FakeLLM) -> list[dict[str, Any]]:
    return [r for r in fake.requests() if r["path"].endswith(("/chat/completions", "/messages"))]


def tiny_png(path: Path) -> Path:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    raw = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    raw += chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b"")
    path.write_bytes(raw)
    return path


# --- streaming content ----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_plain_text_streams_in_pieces(fake: FakeLLM, kind: str) -> None:
    fake.add_rule("hello", [{"content": "Hello there, streaming world!", "usage": {"input_tokens": 11, "output_tokens": 7}}])
    events = collect(make_provider(kind, fake), ask("hello"))
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    done = completed(events)
    assert len(deltas) > 2 and "".join(deltas) == "Hello there, streaming world!"
    assert done.message.role == "assistant" and done.message.content == "Hello there, streaming world!"
    assert done.stop_reason == "stop" and not done.message.tool_calls
    assert (done.usage.input_tokens, done.usage.output_tokens) == (11, 7)


@pytest.mark.parametrize("kind", KINDS)
def test_streamed_calls_reuse_one_connection(fake: FakeLLM, kind: str) -> None:
    provider = make_provider(kind, fake)
    for i in range(4):
        assert completed(collect(provider, ask(f"call {i}"))).message.content
    peers = {r["peer"] for r in llm_requests(fake)}
    assert len(peers) == 1, peers  # keep-alive: the body is read to its end, so the connection is pooled


def test_a_body_left_open_after_the_answer_does_not_hold_the_turn(fake: FakeLLM) -> None:
    fake.add_rule("linger", [{"content": "all here", "linger_ms": 20000}])
    provider = make_provider("openai", fake, timeout=30)
    started = time.monotonic()
    assert completed(collect(provider, ask("linger"))).message.content == "all here"
    assert time.monotonic() - started < 10  # the drain after [DONE] is bounded, not the 20 s linger
    fake.add_rule("after", [{"content": "next one"}])
    assert completed(collect(provider, ask("after"))).message.content == "next one"


@pytest.mark.parametrize("kind", KINDS)
def test_several_tool_calls_in_one_response(fake: FakeLLM, kind: str) -> None:
    fake.add_rule("compute", [{"content": "Working.", "tool_calls": [
        {"name": "calculator", "arguments": {"expression": "2+2"}},
        {"name": "get_time", "arguments": "{\"tz\": \"UTC\"}"},
    ]}])
    events = collect(make_provider(kind, fake), ask("compute", tools=[CALC, GET_TIME]))
    done = completed(events)
    calls = done.message.tool_calls
    assert [c.name for c in calls] == ["calculator", "get_time"]
    assert json.loads(calls[0].arguments) == {"expression": "2+2"} and calls[1].arguments == '{"tz": "UTC"}'
    assert len({c.id for c in calls}) == 2 and all(calls)
    assert done.stop_reason == "tool_calls" and done.message.content == "Working."
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    for index, call in enumerate(calls):
        mine = [d for d in deltas if d.index == index]
        assert (mine[0].id, mine[0].name) == (call.id, call.name)
        assert all(d.id is None for d in mine[1:])
        assert "".join(d.arguments for d in mine) == call.arguments


@pytest.mark.parametrize("kind", KINDS)
def test_tool_results_round_trip(fake: FakeLLM, kind: str) -> None:
    provider = make_provider(kind, fake)
    first = completed(collect(provider, ask("what is 6*7?", tools=[CALC])))  # the fake's demo behaviour
    assert [(c.name, json.loads(c.arguments)) for c in first.message.tool_calls] == [("calculator", {"expression": "6*7"})]
    history = [ChatMessage("user", "what is 6*7?"), first.message,
               ChatMessage("tool", "42", tool_call_id=first.message.tool_calls[0].id, name="calculator")]
    second = completed(collect(provider, ChatRequest(model="fake-model", messages=history, tools=[CALC])))
    assert second.message.content == "The tool calculator returned: 42"
    body = llm_requests(fake)[-1]["body"]
    if kind == "anthropic":
        assert body["messages"][-1] == {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": first.message.tool_calls[0].id, "content": "42"}]}
    else:
        assert body["messages"][-1] == {"role": "tool", "tool_call_id": first.message.tool_calls[0].id, "content": "42"}


def test_openai_reasoning_content_streams_and_is_replayed(fake: FakeLLM) -> None:
    provider = make_provider("openai", fake)
    fake.add_rule("think", [{"reasoning": "Let me think about it.", "content": "Done."}])
    events = collect(provider, ask("think"))
    done = completed(events)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Let me think about it."
    assert done.message.reasoning_content == "Let me think about it." and done.message.provider_state is None
    collect(provider, ChatRequest(model="m", messages=[ChatMessage("user", "think"), done.message, ChatMessage("user", "more")]))
    assistant = llm_requests(fake)[-1]["body"]["messages"][1]
    assert assistant == {"role": "assistant", "content": "Done.", "reasoning_content": "Let me think about it."}


def test_anthropic_thinking_state_replayed_only_to_same_provider(fake: FakeLLM) -> None:
    provider = make_provider("anthropic", fake, key="claude")
    fake.add_rule("think", [{"reasoning": "Pondering deeply.", "redacted_thinking": "opaque==", "content": "Answer.",
                             "tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]}])
    events = collect(provider, ask("think", tools=[CALC]))
    done = completed(events)
    assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Pondering deeply."
    blocks = [{"type": "thinking", "thinking": "Pondering deeply.", "signature": signature_for("Pondering deeply.")},
              {"type": "redacted_thinking", "data": "opaque=="}]
    assert done.message.provider_state == {"provider": "claude", "type": "anthropic", "blocks": blocks}
    assert done.message.reasoning_content == "Pondering deeply."
    history = [ChatMessage("user", "think"), done.message,
               ChatMessage("tool", "2", tool_call_id=done.message.tool_calls[0].id, name="calculator")]
    collect(provider, ChatRequest(model="m", messages=history, tools=[CALC]))
    same = llm_requests(fake)[-1]["body"]["messages"][1]["content"]
    assert same[:2] == blocks and [b["type"] for b in same[2:]] == ["text", "tool_use"]
    collect(make_provider("anthropic", fake, key="other"), ChatRequest(model="m", messages=history, tools=[CALC]))
    other = llm_requests(fake)[-1]["body"]["messages"][1]["content"]
    assert [b["type"] for b in other] == ["text", "tool_use"]  # neither thinking nor reasoning_content replayed


def test_anthropic_sends_gateway_headers_and_options(fake: FakeLLM) -> None:
    provider = make_provider("anthropic", fake, headers={"X-Team": "blue"})
    collect(provider, ChatRequest(model="m", messages=[ChatMessage("system", "A."), ChatMessage("system", "B."),
                                                       ChatMessage("user", "one"), ChatMessage("user", "two")],
                                  temperature=0.3, max_tokens=99, options={"top_k": 5}))
    record = llm_requests(fake)[-1]
    assert record["headers"]["anthropic-version"] == "2023-06-01" and record["headers"]["x-team"] == "blue"
    assert record["auth"]["x-api-key"] == hashlib.sha256(API_KEY.encode()).hexdigest()
    body = record["body"]
    assert body["system"] == "A.\n\nB." and (body["temperature"], body["max_tokens"], body["top_k"]) == (0.3, 99, 5)
    assert body["messages"] == [{"role": "user", "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}]


def test_openai_sends_headers_and_options(fake: FakeLLM) -> None:
    collect(make_provider("openai", fake, headers={"X-Team": "blue"}),
            ask("hi", temperature=0.5, max_tokens=50, options={"reasoning_effort": "low"}))
    record = llm_requests(fake)[-1]
    assert record["headers"]["x-team"] == "blue"
    assert record["auth"]["authorization"] == hashlib.sha256(API_KEY.encode()).hexdigest()
    body = record["body"]
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert (body["temperature"], body["max_tokens"], body["reasoning_effort"]) == (0.5, 50, "low")


@pytest.mark.parametrize("kind", KINDS)
def test_media_blocks_become_images_or_notes(fake: FakeLLM, kind: str, tmp_path: Path) -> None:
    png = tiny_png(tmp_path / "dot.png")
    content = [{"type": "text", "text": "look"}, {"type": "media", "path": str(png), "mime": "image/png"},
               {"type": "media", "path": str(tmp_path / "missing.pdf"), "mime": "application/pdf"}]
    collect(make_provider(kind, fake), ChatRequest(model="m", messages=[ChatMessage("user", content)]))
    parts = llm_requests(fake)[-1]["body"]["messages"][0]["content"]
    if kind == "openai":
        assert parts[1]["image_url"]["url"].startswith("data:image/png;base64,iVBOR")
    else:
        assert parts[1]["source"]["media_type"] == "image/png" and parts[1]["source"]["data"].startswith("iVBOR")
    assert parts[2]["type"] == "text" and "missing.pdf" in parts[2]["text"]


# --- retries and errors ------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("status", [429, 500, 529])
def test_retryable_error_then_success(fake: FakeLLM, kind: str, status: int) -> None:
    fake.add_rule("retry", [{"error": {"status": status, "message": "busy"}}, {"content": "ok now"}])
    done = completed(collect(make_provider(kind, fake), ask("retry")))
    assert done.message.content == "ok now" and len(llm_requests(fake)) == 2


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "error"), [(429, ProviderRateLimited), (503, ProviderUnavailable)])
def test_retries_exhausted(fake: FakeLLM, kind: str, status: int, error: type[ProviderError]) -> None:
    fake.add_rule(None, [{"error": {"status": status, "message": "still busy"}}], repeat=True)
    with pytest.raises(error) as info:
        collect(make_provider(kind, fake, max_retries=2), ask("x"))
    assert info.value.status == status and info.value.provider == "main" and "still busy" in str(info.value)
    assert len(llm_requests(fake)) == 3


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize(("status", "error"), [(401, ProviderAuthError), (403, ProviderAuthError),
                                               (400, ProviderBadRequest), (404, ProviderBadRequest)])
def test_client_errors_are_not_retried(fake: FakeLLM, kind: str, status: int, error: type[ProviderError]) -> None:
    fake.add_rule(None, [{"error": {"status": status, "message": "nope"}}], repeat=True)
    with pytest.raises(error):
        collect(make_provider(kind, fake), ask("x"))
    assert len(llm_requests(fake)) == 1


def test_retry_after_is_honoured_but_capped(fake: FakeLLM) -> None:
    fake.add_rule(None, [{"error": {"status": 429, "message": "slow down", "retry_after": 3600}}, {"content": "ok"}])
    started = time.monotonic()
    assert completed(collect(make_provider("openai", fake), ask("x"))).message.content == "ok"
    assert time.monotonic() - started < 2  # capped at max_retry_after=0.2 in make_provider
    assert RetryPolicy(max_retry_after=30).delay(0, 3600) == 30 and RetryPolicy().delay(0, 1.5) == 1.5
    delays = [RetryPolicy(base_delay=1, max_delay=4).delay(n) for n in range(5)]
    assert 0.5 <= delays[0] <= 1 and 2 <= delays[4] <= 4
    assert parse_retry_after({"retry-after-ms": "250"}) == 0.25 and parse_retry_after({"retry-after": "2"}) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_context_length_error(fake: FakeLLM, kind: str) -> None:
    fake.add_rule(None, [{"context_length_error": True}], repeat=True)
    with pytest.raises(ContextLengthExceeded):
        collect(make_provider(kind, fake), ask("long"))
    assert len(llm_requests(fake)) == 1


def test_anthropic_context_window_stop_reason(fake: FakeLLM) -> None:
    fake.add_rule(None, [{"content": "partial", "finish_reason": "model_context_window_exceeded"}])
    with pytest.raises(ContextLengthExceeded):
        collect(make_provider("anthropic", fake), ask("long"))


@pytest.mark.parametrize("kind", KINDS)
def test_dropped_stream_after_events_is_unavailable_and_not_retried(fake: FakeLLM, kind: str) -> None:
    fake.add_rule(None, [{"content": "one two three four five six", "drop_after_chunks": 5}, {"content": "retried"}])
    events: list[ProviderEvent] = []
    with pytest.raises(ProviderUnavailable):
        for event in make_provider(kind, fake).stream(ask("x")):
            events.append(event)
    assert any(isinstance(e, TextDelta) for e in events) and not any(isinstance(e, Completed) for e in events)
    assert len(llm_requests(fake)) == 1


@pytest.mark.parametrize("kind", KINDS)
def test_drop_before_first_event_is_retried(fake: FakeLLM, kind: str) -> None:
    fake.add_rule(None, [{"content": "lost", "drop_after_chunks": 1}, {"content": "second try"}])
    done = completed(collect(make_provider(kind, fake), ask("x")))
    assert done.message.content == "second try" and len(llm_requests(fake)) == 2


@pytest.mark.parametrize("kind", KINDS)
def test_mid_stream_error_event_is_unavailable(fake: FakeLLM, kind: str) -> None:
    fake.add_rule(None, [{"content": "a b c d e f", "stream_error": {"after_chunks": 4, "message": "Overloaded"}}])
    with pytest.raises(ProviderUnavailable, match="Overloaded"):
        collect(make_provider(kind, fake, max_retries=0), ask("x"))


@pytest.mark.parametrize("kind", KINDS)
def test_timeout_is_unavailable(fake: FakeLLM, kind: str) -> None:
    fake.add_rule(None, [{"delay_ms": 3000, "content": "too late"}])
    started = time.monotonic()
    with pytest.raises(ProviderUnavailable, match="timed out"):
        collect(make_provider(kind, fake, timeout=0.5, max_retries=0), ask("x"))
    assert time.monotonic() - started < 2.5


@pytest.mark.parametrize("kind", KINDS)
def test_api_key_never_in_error_text(fake: FakeLLM, kind: str) -> None:
    leak = f"bad key {API_KEY}; Authorization: Bearer {API_KEY}; x-api-key: {API_KEY}"
    fake.add_rule(None, [{"error": {"status": 401, "message": leak}}])
    with pytest.raises(ProviderAuthError) as info:
        collect(make_provider(kind, fake), ask("x"))
    refused = make_provider(kind, fake, base_url="http://127.0.0.1:9", max_retries=0)
    with pytest.raises(ProviderUnavailable) as refused_info:
        collect(refused, ask("x"))
    for err in (info.value, refused_info.value):
        text = str(err) + repr(err) + repr(err.args)
        assert API_KEY not in text and "SECRET" not in text
        assert err.__cause__ is None and err.__context__ is None
    assert "[redacted]" in str(info.value)


def test_redactor_covers_header_shapes() -> None:
    redact = Redactor.for_config("k-123456", {"Authorization": "Bearer tok-abcdefgh", "X-Plain": "visible"})
    text = redact("k-123456 tok-abcdefgh {'x-api-key': 'other-secret'} Bearer sk-zzzzzzzzzzzzzzzz visible")
    assert "k-123456" not in text and "tok-abcdefgh" not in text and "other-secret" not in text
    assert "sk-zzz" not in text and "visible" in text


# --- closing -----------------------------------------------------------------------


def _iterate_in_thread(stream: Any) -> tuple[threading.Thread, list[Any]]:
    seen: list[Any] = []

    def run() -> None:
        try:
            for event in stream:
                seen.append(event)
        except BaseException as err:  # recorded for the assertion
            seen.append(err)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, seen


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("spec", [{"delay_ms": 5000}, {"content": "a b c d e f g", "chunk_delay_ms": 5000}])
def test_close_from_another_thread_ends_iteration(fake: FakeLLM, kind: str, spec: dict[str, Any]) -> None:
    fake.add_rule(None, [spec])
    stream = make_provider(kind, fake, timeout=30).stream(ask("x"))
    thread, seen = _iterate_in_thread(stream)
    time.sleep(0.4)
    assert thread.is_alive()
    started = time.monotonic()
    stream.close()
    thread.join(1.0)
    assert not thread.is_alive() and time.monotonic() - started < 1.0
    assert not any(isinstance(e, Completed) for e in seen)


def test_stream_iterates_once_and_close_before_start(fake: FakeLLM) -> None:
    provider = make_provider("openai", fake)
    stream = provider.stream(ask("x"))
    list(stream)
    with pytest.raises(RuntimeError):
        list(stream)
    early = provider.stream(ask("y"))
    early.close()
    assert list(early) == []


# --- registry ----------------------------------------------------------------------


def test_build_provider_from_config(fake: FakeLLM) -> None:
    assert set(PROVIDER_TYPES) >= {"openai", "anthropic"}
    for kind in KINDS:
        cfg = SimpleNamespace(type=kind, base_url=fake.openai_url if kind == "openai" else fake.url, api_key=API_KEY,
                              extra_headers={}, llm_timeout_secs=5.0, max_retries=1)
        provider = build_provider("cfgkey", cfg)
        assert provider.key == "cfgkey"
        assert completed(collect(provider, ask("hi"))).message.content == "You said: hi"
    with pytest.raises(ConfigError, match="providers.bad.type"):
        build_provider("bad", SimpleNamespace(type="nope"))


def test_importing_providers_does_not_import_sdks() -> None:
    code = "import sys, picobot.providers; print(sorted(m for m in ('openai', 'anthropic', 'httpx2') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


_SLOW_HTTPX = """
import sys, threading, time
from picobot.domain.messages import ChatMessage
from picobot.providers.base import ChatRequest
from picobot.providers.openai_provider import OpenAIProvider

class SlowHttpx:  # holds httpx half made (no Response yet) for a while, as a first import on a busy machine can
    def find_spec(self, name, path=None, target=None):
        if name == "httpx._api":
            time.sleep(1.5)
        return None

provider = OpenAIProvider("p", base_url=sys.argv[1], api_key="sk-test", max_retries=0)
sys.meta_path.insert(0, SlowHttpx())
if "httpx" not in sys.modules:  # what a tool's request or a plugin's sweep does in another thread mid-turn
    threading.Thread(target=lambda: __import__("httpx"), daemon=True).start()
    time.sleep(0.3)
events = list(provider.stream(ChatRequest(model="m", messages=[ChatMessage(role="user", content="plain")])))
print(type(events[-1]).__name__, events[-1].message.content)
"""


def test_a_model_call_while_another_thread_first_imports_httpx(fake: FakeLLM) -> None:
    # the openai SDK reads sys.modules["httpx"] during every call: half made by a first import in another
    # thread, it failed the call (AttributeError); the provider imports httpx whole before its first call
    fake.add_rule("plain", [{"content": "Plain answer."}])
    out = subprocess.run([sys.executable, "-c", _SLOW_HTTPX, fake.openai_url], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "Completed Plain answer."


# --- the fake server's own wire format, through the raw SDKs ------------------------


def test_fake_openai_wire_format(fake: FakeLLM) -> None:
    client = openai.OpenAI(base_url=fake.openai_url, api_key=API_KEY, max_retries=0)
    fake.add_rule("plain", [{"content": "Plain answer.", "reasoning": "r"}])
    reply = client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "plain"}])
    assert reply.model == "gpt-x" and reply.choices[0].message.content == "Plain answer."
    assert reply.choices[0].finish_reason == "stop" and reply.usage and reply.usage.total_tokens > 0
    tools = [{"type": "function", "function": {"name": "calculator", "parameters": {"type": "object"}}}]
    chunks = list(client.chat.completions.create(model="gpt-x", messages=[{"role": "user", "content": "what is 3 * (4 + 5)?"}],
                                                 tools=tools, stream=True, stream_options={"include_usage": True}))
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-2].choices[0].finish_reason == "tool_calls"
    args = "".join(c.choices[0].delta.tool_calls[0].function.arguments or ""
                   for c in chunks if c.choices and c.choices[0].delta.tool_calls)
    assert json.loads(args) == {"expression": "3 * (4 + 5)"}
    assert [m.id for m in client.models.list()] == ["fake-model", "fake-reasoner"]


def test_fake_anthropic_wire_format(fake: FakeLLM) -> None:
    import anthropic  # here, not at the top: ~1 s of CPU that every pytest worker would pay while collecting

    client = anthropic.Anthropic(base_url=fake.url, api_key=API_KEY, max_retries=0)
    fake.add_rule("plain", [{"content": "Plain answer.", "reasoning": "hmm"}])
    message = client.messages.create(model="claude-x", max_tokens=100, messages=[{"role": "user", "content": "plain"}])
    assert [b.type for b in message.content] == ["thinking", "text"] and message.stop_reason == "end_turn"
    assert message.content[0].signature == signature_for("hmm") and message.usage.output_tokens > 0
    tools = [{"name": "get_time", "input_schema": {"type": "object"}}]
    events = list(client.messages.create(model="claude-x", max_tokens=100, stream=True, tools=tools,
                                         messages=[{"role": "user", "content": "what time is it?"}]))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block for e in events if e.type == "content_block_start"]
    assert [(b.type, b.name) for b in starts] == [("tool_use", "get_time")]
    with pytest.raises(anthropic.BadRequestError, match="tool_result"):  # unanswered tool_use is rejected
        client.messages.create(model="c", max_tokens=10, messages=[
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "get_time", "input": {}}]},
            {"role": "user", "content": "and?"}])


def test_fake_default_behaviour_and_errors_raw(fake: FakeLLM) -> None:
    client = openai.OpenAI(base_url=fake.openai_url, api_key=API_KEY, max_retries=0)
    echo = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "just chatting"}])
    assert echo.choices[0].message.content == "You said: just chatting"
    fake.add_rule(None, [{"context_length_error": True}, {"error": {"status": 429, "message": "later"}}])
    with pytest.raises(openai.BadRequestError) as overflow:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert overflow.value.code == "context_length_exceeded"
    with pytest.raises(openai.RateLimitError) as limited:
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert limited.value.response.headers["retry-after"] == "0"


def test_fake_control_api_over_http(fake: FakeLLM) -> None:
    with httpx.Client(base_url=fake.url) as http:
        assert http.post("/_fake/rules", json={"match": "ping", "responses": [{"content": "pong"}]}).status_code == 200
        assert http.get("/_fake/rules").json()["rules"][0]["match"] == "ping"
        history = [{"role": "user", "content": "ping please"},
                   {"role": "assistant", "content": None, "tool_calls": [
                       {"id": "c1", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}]},
                   {"role": "tool", "tool_call_id": "c1", "content": "noon"}]
        reply = http.post("/v1/chat/completions", json={"model": "m", "messages": history},
                          headers={"Authorization": f"Bearer {API_KEY}"}).json()
        assert reply["choices"][0]["message"]["content"] == "pong"  # matched on the last *user* message
        recorded = http.get("/_fake/requests").json()["requests"][-1]
        assert recorded["headers"]["authorization"] == "<redacted>" and API_KEY not in json.dumps(recorded)
        assert recorded["auth"] == {"authorization": hashlib.sha256(API_KEY.encode()).hexdigest(), "x-api-key": None}
        summary = http.post("/v1/chat/completions", json={"model": "m", "messages": history}).json()
        assert summary["choices"][0]["message"]["content"] == "The tool get_time returned: noon"
        assert http.delete("/_fake/rules").status_code == 200
        assert http.get("/_fake/requests").json()["requests"] == []
        assert http.post("/_fake/rules", json={"responses": "bad"}).status_code == 400


def test_fake_answers_200_concurrent_slow_requests(fake: FakeLLM) -> None:
    """Correctness only: every one is answered. How fast: `python -m scripts.bench.fake_llm`."""
    fake.add_rule(None, [{"delay_ms": 500, "content": "slow"}], repeat=True)
    results: list[int] = []
    limits = httpx.Limits(max_connections=250, max_keepalive_connections=250)
    with httpx.Client(base_url=fake.url, limits=limits, timeout=20) as http:
        def call() -> None:
            response = http.post("/v1/messages", json={"model": "m", "max_tokens": 5,
                                                       "messages": [{"role": "user", "content": "hi"}]})
            results.append(response.status_code)

        threads = [threading.Thread(target=call) for _ in range(200)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
    assert results == [200] * 200


def test_openai_body_encodes_tools_once_and_as_the_sdk_would() -> None:
    from picobot.providers import openai_provider as op

    specs = (ToolSpec("a", "first ✓", {"type": "object", "properties": {"x": {"type": "string"}}}),
             ToolSpec("b", "second", {"type": "object"}))
    body = {"model": "m", "messages": [{"role": "user", "content": "hé"}], "stream": True, "tools": specs}
    encoded = op._encode_body(body)
    expected = {**body, "tools": [op._tool(t) for t in specs]}
    assert json.loads(encoded) == expected
    assert op._tools_json(specs) is op._tools_json(specs)  # the same set: encoded once
    # the same names in new objects are encoded again (a changed schema is never served stale)
    changed = (specs[0], ToolSpec("b", "second, changed", {"type": "object"}))
    assert json.loads(op._encode_body({**body, "tools": changed}))["tools"][1]["function"]["description"] == "second, changed"
    # tools replaced through the model's options go out as given
    assert json.loads(op._encode_body({**body, "tools": [{"type": "x"}]}))["tools"] == [{"type": "x"}]
    with pytest.raises(ValueError):  # NaN is refused, as the SDK refuses it
        op._encode_body({**body, "temperature": float("nan")})
