"""Fallback chains (`agents.<name>.fallback`) and the providers' circuit breakers.

Against the fake LLM (a real process): a whole stack whose primary provider points at a port where
nothing listens, and in-process agent loops over real providers for the HTTP failure kinds.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import redis as redis_lib
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.agent.loop import AgentLoop, LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.cli.embedded_redis import free_port
from picobot.config.schema import Config
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage
from picobot.errors import ConfigError
from picobot.providers.fallback import BreakerSettings, ChainEntry, CircuitBreakers, FallbackProvider
from picobot.providers.openai_provider import OpenAIProvider
from picobot.tools import build_registry
from picobot.tools.base import ToolContext
from tests.conftest import add_rule
from tests.stack import Stack, base_config
from tests.http_client import HTTP


def _requests(llm, text: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The chat requests the fake received whose last user message contains `text`."""
    found = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    out = []
    for r in found:
        body = r.get("body") or {}
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if users and text in json.dumps(users[-1].get("content")):
            out.append(r)
    return out


# --- in-process loops over real providers ----------------------------------------------


@pytest.fixture
def breakers() -> Iterator[CircuitBreakers]:
    client = redis_lib.Redis.from_url("redis://127.0.0.1:6379/0")
    yield CircuitBreakers(client, lambda key: BreakerSettings(failures=2, cooldown_secs=600))
    for key in client.scan_iter("picobot:breaker:fb-*"):
        client.delete(key)


def _chain(llm, breakers: CircuitBreakers, primary_url: str | None = None) -> FallbackProvider:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:8]
    primary = OpenAIProvider(f"fb-primary-{tag}", base_url=primary_url or f"{llm.url}/v1", api_key="sk-fb",
                             timeout=10, max_retries=0)
    backup = OpenAIProvider(f"fb-backup-{tag}", base_url=f"{llm.url}/v1", api_key="sk-fb", timeout=10, max_retries=0)
    return FallbackProvider([ChainEntry("primary:default", primary, "primary-model"),
                             ChainEntry("backup:second", backup, "backup-model")], breakers)


def _run(provider: FallbackProvider, text: str, tmp_path: Path) -> tuple[Any, TurnController]:
    controller = TurnController("s", "t")
    ctx = ToolContext(session_id="s", channel="cli_chat", chat_id="c", sender_id="u", turn_id="t",
                      workspace=tmp_path, cancel=CancelToken())
    loop = AgentLoop(provider, build_registry(), LoopSettings(model="primary-model"))
    return loop.run([], [ChatMessage(role="user", content=text)], ctx, controller, lambda: []), controller


@pytest.mark.parametrize("status", [500, 503, 429])
def test_a_5xx_or_429_falls_through_to_the_next_entry(llm, breakers, tmp_path: Path, status: int) -> None:  # type: ignore[no-untyped-def]
    text = f"fail-{status}-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"error": {"status": status, "message": "primary down"}}, {"content": "backup answers"})
    result, controller = _run(_chain(llm, breakers), text, tmp_path)
    assert result.status == "completed" and result.final_text == "backup answers"
    assert result.answered_by == "backup:second" and controller.snapshot()["answered_by"] == "backup:second"
    models = [r["body"]["model"] for r in _requests(llm, text)]
    assert models == ["primary-model", "backup-model"]  # the same request, once on each


@pytest.mark.parametrize("status", [400, 401, 404])
def test_a_4xx_other_than_429_does_not_fall_through(llm, breakers, tmp_path: Path, status: int) -> None:  # type: ignore[no-untyped-def]
    text = f"bad-{status}-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"error": {"status": status, "message": "you sent junk"}}, {"content": "must not be asked"})
    result, _ = _run(_chain(llm, breakers), text, tmp_path)
    assert result.status == "failed" and "junk" in (result.error or "")
    assert [r["body"]["model"] for r in _requests(llm, text)] == ["primary-model"]


def test_connection_refused_falls_through_once(llm, breakers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = f"refused-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"content": "backup answers"})
    provider = _chain(llm, breakers, primary_url=f"http://127.0.0.1:{free_port()}/v1")
    result, _ = _run(provider, text, tmp_path)
    assert result.status == "completed" and result.final_text == "backup answers"
    assert [r["body"]["model"] for r in _requests(llm, text)] == ["backup-model"]


def test_a_mid_stream_failure_restarts_cleanly_on_the_next_entry(llm, breakers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    text = f"midstream-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"content": "HALF ANSWER THAT BREAKS OFF HERE AND NEVER ENDS", "drop_after_chunks": 3},
             {"content": "the whole backup answer"})
    result, controller = _run(_chain(llm, breakers), text, tmp_path)
    assert result.status == "completed" and result.final_text == "the whole backup answer"
    shown = [b["text"] for b in controller.snapshot()["blocks"] if b["type"] == "text"]
    assert shown == ["the whole backup answer"]  # one answer, not two halves
    assert [m.role for m in result.messages] == ["user", "assistant"]


def test_stop_during_a_fallback_call_cancels_the_turn(llm, breakers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    import threading

    text = f"stop-fallback-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"error": {"status": 503, "message": "primary down"}},
             {"content": "too late", "delay_ms": 30000})
    controller = TurnController("s", "t")
    ctx = ToolContext(session_id="s", channel="cli_chat", chat_id="c", sender_id="u", turn_id="t",
                      workspace=tmp_path, cancel=CancelToken())
    loop = AgentLoop(_chain(llm, breakers), build_registry(), LoopSettings(model="primary-model"))

    def stop_when_the_backup_is_asked() -> None:
        while len(_requests(llm, text)) < 2:
            threading.Event().wait(0.05)
        ctx.cancel.cancel()

    threading.Thread(target=stop_when_the_backup_is_asked, daemon=True).start()
    result = loop.run([], [ChatMessage(role="user", content=text)], ctx, controller, lambda: [])
    assert result.status == "cancelled" and result.final_text == ""


def test_the_breaker_opens_after_consecutive_failures_and_skips_the_provider(llm, breakers, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    provider = _chain(llm, breakers, primary_url=f"http://127.0.0.1:{free_port()}/v1")
    primary_key = provider.chain[0].provider.key
    for i in range(2):
        text = f"breaker-{i}-{uuid.uuid4().hex[:6]}"
        add_rule(llm, text, {"content": f"backup {i}"})
        assert _run(provider, text, tmp_path)[0].final_text == f"backup {i}"
    assert breakers.state(primary_key)["state"] == "open" and breakers.state(primary_key)["failures"] == 2
    stream = provider.stream(_request("breaker-open"))
    add_rule(llm, "breaker-open", {"content": "straight to backup"})
    list(stream)
    assert stream.tried == ["backup:second"]  # the open provider was not even tried
    breakers.succeeded(primary_key)
    assert breakers.state(primary_key)["state"] == "closed"


def _request(text: str):  # type: ignore[no-untyped-def]
    from picobot.providers.base import ChatRequest

    return ChatRequest(model="primary-model", messages=[ChatMessage(role="user", content=text)])


# --- config ----------------------------------------------------------------------------


def _config(fallback: Any, **provider: Any) -> dict[str, Any]:
    return {
        "providers": {"default": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", **provider},
                      "second": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"default": {"model_id": "a"}, "backup": {"model_id": "b"}},
        "agents": {"default": {"provider": "default", "model": "default", "fallback": fallback}},
    }


def _rejected(raw: dict[str, Any]) -> str:
    from pydantic import ValidationError

    try:
        Config.model_validate(raw)
    except ConfigError as exc:
        return str(exc)
    except ValidationError as exc:
        return " ".join(".".join(str(p) for p in e["loc"]) + " " + e["msg"] for e in exc.errors())
    raise AssertionError("accepted")


def test_a_valid_fallback_chain_is_accepted() -> None:
    cfg = Config.model_validate(_config(["second:backup", "default:backup"]))
    assert cfg.agents["default"].fallback == ["second:backup", "default:backup"]


@pytest.mark.parametrize("entry, where, why", [
    ("nope:backup", "agents.default.fallback[0]", "unknown provider"),
    ("second:nope", "agents.default.fallback[0]", "unknown model"),
    ("", "agents.default.fallback[0]", "<provider>:<model>"),
    ("second", "agents.default.fallback[0]", "<provider>:<model>"),
    (":backup", "agents.default.fallback[0]", "<provider>:<model>"),
    ("second:", "agents.default.fallback[0]", "<provider>:<model>"),
])
def test_bad_fallback_entries_are_rejected_with_their_key_path(entry: str, where: str, why: str) -> None:
    text = _rejected(_config([entry]))
    assert where in text and why in text


@pytest.mark.parametrize("fallback", ["second:backup", 7, [7], [None], {"a": 1}, [["second:backup"]]])
def test_wrong_fallback_types_are_rejected_with_their_key_path(fallback: Any) -> None:
    assert "agents.default.fallback" in _rejected(_config(fallback))


@pytest.mark.parametrize("field, value", [("breaker_failures", -1), ("breaker_failures", "x"),
                                          ("breaker_cooldown_secs", 0), ("breaker_cooldown_secs", float("nan")),
                                          ("breaker_cooldown_secs", 1e12), ("breaker_unknown", 1)])
def test_bad_breaker_settings_are_rejected(field: str, value: Any) -> None:
    assert f"providers.default.{field}" in _rejected(_config([], **{field: value}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.text(max_size=30), max_size=4))
def test_hostile_fallback_entries_never_crash_validation(entries: list[str]) -> None:
    good = {"default:default", "default:backup", "second:default", "second:backup"}
    raw = _config(entries)
    if all(e in good for e in entries):
        Config.model_validate(raw)
    else:
        assert "agents.default.fallback[" in _rejected(raw)


# --- the whole stack -------------------------------------------------------------------


@pytest.fixture(scope="module")
def fallback_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("fallback")
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["providers"]["dead"] = {"type": "openai", "base_url": f"http://127.0.0.1:{free_port()}/v1",
                                "max_retries": 0, "breaker_failures": 5}
    cfg["models"]["backup"] = {"model_id": "backup-model"}
    cfg["agents"]["default"] = {"provider": "dead", "model": "default", "fallback": ["default:backup"]}
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    s.start(workers=1, beat=False)
    yield s
    s.stop()


def test_a_turn_whose_provider_refuses_connections_is_answered_by_the_fallback(fallback_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    text = f"stack-refused-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"content": "answered by the fallback"})
    client = fallback_stack.client()
    try:
        done = client.ask(text)
        info = client.command("/info --json")["data"]
    finally:
        client.close()
    assert done["status"] == "completed" and done["final_text"] == "answered by the fallback"
    assert done["answered_by"] == "default:backup" and info["answered_by"] == "default:backup"
    stored = _stored_answer(fallback_stack, info["session_id"])
    assert stored == ("answered by the fallback", "default:backup")  # the stored turn says who answered
    assert [r["body"]["model"] for r in _requests(llm, text)] == ["backup-model"]  # answered once
    assert _model_calls_ok(fallback_stack, "default", "backup-model") >= 1  # metrics name who answered
    assert _model_calls_ok(fallback_stack, "dead", "fake-model") == 0
    breaker = fallback_stack.health()["checks"]["provider_breakers"]
    assert breaker["providers"]["dead"]["failures"] >= 1 and breaker["providers"]["default"]["state"] == "closed"


def _stored_answer(stack: Stack, session_id: str) -> tuple[str, str]:
    import sqlalchemy as sa

    engine = sa.create_engine(stack.database_url)
    try:
        with engine.connect() as conn:
            row = conn.execute(sa.text("SELECT content, provider_state FROM messages WHERE session_id = :s AND "
                                       "role = 'assistant' ORDER BY position DESC LIMIT 1"), {"s": session_id}).one()
    finally:
        engine.dispose()
    state = row.provider_state if isinstance(row.provider_state, dict) else json.loads(row.provider_state)
    content = json.loads(row.content) if isinstance(row.content, str) else row.content
    return content, state["answered_by"]


def _model_calls_ok(stack: Stack, provider: str, model: str) -> float:
    """Successful model calls in /metrics for this provider and model, once the worker's samples arrived."""
    from prometheus_client.parser import text_string_to_metric_families

    from tests.stack import wait_for

    def scraped() -> list | None:
        text = HTTP.get(stack.http + "/metrics", timeout=10).text
        found = [(s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples
                 if s.name == "picobot_model_calls_total"]
        return found or None

    found = wait_for(scraped, 30, "no model calls in /metrics")
    return sum(v for labels, v in found if labels.get("provider") == provider and labels.get("model") == model
               and labels.get("outcome") == "ok")
