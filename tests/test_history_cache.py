"""The worker's history cache: used only while SQL says nothing changed; a real turn path proves it."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

import pytest

from picobot.config.loader import load_config
from picobot.domain.messages import ChatMessage
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.runtime.history_cache import HistoryCache
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.turn_runner import drain_session
from picobot.storage import messages
from tests.conftest import add_rule
from tests.stack import base_config


def msgs(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=t) for t in texts]


def test_hit_only_while_position_and_compaction_match() -> None:
    cache = HistoryCache()
    cache.put("s", 2, None, msgs("a", "b"))
    assert [m.content for m in cache.get("s", 2, None)] == ["a", "b"]
    assert cache.get("s", 3, None) is None  # something was stored since
    assert cache.get("s", 2, 1) is None  # compacted since
    assert cache.get("other", 2, None) is None


def test_extend_keeps_only_directly_following_messages() -> None:
    cache = HistoryCache()
    cache.put("s", 2, None, msgs("a", "b"))
    cache.extend("s", 2, msgs("c"))
    assert [m.content for m in cache.get("s", 3, None)] == ["a", "b", "c"]
    cache.extend("s", 7, msgs("x"))  # a gap: another writer stored positions 3..6
    assert cache.get("s", 8, None) is None and cache.get("s", 3, None) is None


def test_returned_lists_are_copies() -> None:
    cache = HistoryCache()
    cache.put("s", 1, None, msgs("a"))
    got = cache.get("s", 1, None)
    got.append(ChatMessage(role="user", content="mutated"))
    assert len(cache.get("s", 1, None)) == 1


def test_bounded_by_sessions_and_text() -> None:
    cache = HistoryCache(max_sessions=2, max_chars=10_000)
    for sid in ("a", "b", "c"):
        cache.put(sid, 1, None, msgs(sid))
    assert cache.get("a", 1, None) is None  # least recently used went first
    assert cache.get("c", 1, None) is not None
    cache.put("big", 1, None, msgs("x" * 3000))  # over a quarter of the budget: not kept
    assert cache.get("big", 1, None) is None
    cache.put("grows", 1, None, msgs("y" * 1000))
    cache.extend("grows", 1, msgs("z" * 2000))  # the entry would pass a quarter: dropped, read again
    assert cache.get("grows", 2, None) is None


# --- the real turn path, in process: SQL, Redis, the provider against the fake LLM ------------


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:  # the test drains by itself
        pass


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps(base_config(llm.url, 1)))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-history")
    monkeypatch.setenv("REDIS_URL", redis_url)
    rt = build_runtime(load_config(), _NoQueue(), migrate=True)
    yield rt
    rt.close()


def _turn(rt: Runtime, gw: Gateway, text: str) -> str:
    reply = gw.submit(InboundMessage("cli_chat", "hc", "u", text))
    assert reply.kind == "accepted", reply
    assert drain_session(rt, reply.session_id) == 1
    return reply.session_id


def _last_request_texts(llm) -> list[str]:  # type: ignore[no-untyped-def]
    body = [r for r in llm.requests() if r["path"].endswith("/chat/completions")][-1]["body"]
    return [m.get("content") for m in body["messages"] if isinstance(m.get("content"), str)]


def test_a_message_stored_by_another_writer_reaches_the_next_turn(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, None, {"content": "ok"}, repeat=True)
    gw = Gateway(runtime)
    sid = _turn(runtime, gw, "first")
    sid = _turn(runtime, gw, "second")
    assert runtime.history.hits >= 1  # the second turn used the cached history
    # another writer (a tool of another session, another worker) appends to this dialog
    with runtime.db.begin() as conn:
        messages.append(conn, sid, None, [ChatMessage(role="assistant", content="note from elsewhere")])
    misses = runtime.history.misses
    _turn(runtime, gw, "third")
    assert runtime.history.misses == misses + 1
    texts = _last_request_texts(llm)
    assert texts.index("first") < texts.index("second") < texts.index("note from elsewhere") < texts.index("third")
    # and the cache follows the commit again
    hits = runtime.history.hits
    _turn(runtime, gw, "fourth")
    assert runtime.history.hits == hits + 1
    assert _last_request_texts(llm)[-1] == "fourth"
