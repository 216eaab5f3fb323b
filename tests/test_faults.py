"""Fault injection with real processes: kill -9 a worker, FLUSHALL Redis, restart web."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Iterator

import pytest

from tests.conftest import add_rule
from tests.stack import Stack, wait_for

pytestmark = pytest.mark.slow


# Every fault runs on both databases: PostgreSQL's writers really race, and a /stop or a restart
# must behave the same whichever database holds the record.
BOTH_DATABASES = pytest.mark.parametrize("fresh", ["sqlite", "postgres"], indirect=True)


@pytest.fixture
def fresh(request: pytest.FixtureRequest, tmp_path: Path, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    database = getattr(request, "param", "sqlite")
    s = Stack(tmp_path, fake_llm.url, database_url=request.getfixturevalue("pg_url") if database == "postgres" else None)
    try:
        yield s
    finally:
        s.stop()


def _model_saw(llm, text: str, count: int = 1) -> None:  # type: ignore[no-untyped-def]
    """Wait until the fake LLM has received `count` requests whose last user text is `text`."""
    def seen() -> bool:
        hits = [r for r in llm.requests() if text in str(r["body"].get("messages", [])[-1:])]
        return len(hits) >= count
    wait_for(seen, 30, f"the model never saw {text!r}")


def _history(c) -> list[dict]:  # type: ignore[no-untyped-def]
    c.send({"type": "history", "id": "hist"})
    return c.recv_until(lambda f: f.get("id") == "hist")["messages"]


@BOTH_DATABASES
def test_worker_killed_mid_turn_reruns_the_message(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "kill-me-once", {"content": "first try", "delay_ms": 6000}, {"content": "recovered answer"})
    fresh.start(workers=1)
    c = fresh.client()
    acc = c.say("kill-me-once")
    _model_saw(llm, "kill-me-once")
    fresh.kill("w1")  # SIGKILL the whole worker mid model call
    fresh.start_worker("w2")
    done = c.wait_completed(acc["seq"], timeout=60)
    assert done["status"] == "completed" and done["final_text"] == "recovered answer"
    users = [m for m in _history(c) if m["role"] == "user"]
    assert [u["content"] for u in users] == ["kill-me-once"]  # stored once, answered once


@BOTH_DATABASES
def test_worker_killed_every_attempt_reports_failure(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "doomed", *[{"content": "never", "delay_ms": 8000}] * 3)
    fresh.start(workers=1)
    c = fresh.client()
    acc = c.say("doomed")
    for attempt in (1, 2):
        _model_saw(llm, "doomed", attempt)
        fresh.kill(f"w{attempt}")
        fresh.start_worker(f"w{attempt + 1}")
    done = c.wait_completed(acc["seq"], timeout=60)
    assert done["status"] == "failed" and "stopped" in done["error"]
    hist = _history(c)
    assert hist[-1]["role"] == "assistant" and "could not be answered" in hist[-1]["content"]


@BOTH_DATABASES
def test_flushall_with_pending_messages_loses_nothing(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    fresh.start_web()
    fresh.start_beat()
    c = fresh.client()
    seqs = [c.say(f"pending message {i}")["seq"] for i in range(3)]
    fresh.redis().flushall()  # the broker's queued turn tasks and every lease are gone
    fresh.start_worker("w1")
    answered = set()
    while len(answered) < 3:
        f = c.recv_until(lambda f: f["type"] == "turn_completed", timeout=60)
        assert f["status"] == "completed"
        answered.update(f["inbound_seqs"])
    assert answered == set(seqs)


@BOTH_DATABASES
def test_flushall_while_running_keeps_beat_and_progress(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "long-one", {"content": "long done", "delay_ms": 3000})
    fresh.start(workers=1)
    c = fresh.client()
    acc = c.say("long-one")
    _model_saw(llm, "long-one")
    fresh.redis().flushall()
    done = c.wait_completed(acc["seq"], timeout=60)
    assert done["status"] == "completed" and done["final_text"] == "long done"
    # beat survives the flush: it re-takes its lock and its schedule, and sweeps keep coming
    r = fresh.redis()
    r.delete("picobot:sweep:last")
    wait_for(lambda: r.get("picobot:sweep:last"), 30, "no sweep after the flush")
    assert fresh.procs["beat"].poll() is None
    later = c.ask("after the flush")
    assert later["status"] == "completed"


@BOTH_DATABASES
def test_web_restart_keeps_history_and_accepts_again(fresh: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    fresh.start(workers=1)
    c = fresh.client("restart-chat")
    assert c.ask("before restart")["status"] == "completed"
    fresh.kill("web")
    fresh.start_web()
    c2 = fresh.client("restart-chat")
    contents = [m["content"] for m in c2.ready["history"] if m["role"] == "user"]
    assert contents == ["before restart"]
    assert c2.ask("after restart")["status"] == "completed"
