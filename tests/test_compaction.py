"""Context compaction: the boundary, what is kept, the summary call and its fallback, the fenced commit,
overflow mid-turn, /compact, and a worker killed mid-compaction — against real SQL, Redis and the fake LLM."""

from __future__ import annotations

import json
import threading
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest
from sqlalchemy import update
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.config.loader import load_config
from picobot.domain.messages import (
    MARKER_AGENT_PROMPT, MARKER_HISTORY_COMPACTION, MARKER_SCHEDULED_PROMPT, ChatMessage, ToolCall,
)
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.memory import compaction as rules
from picobot.memory.compactor import compact_session, schedule_if_needed
from picobot.app import App as Runtime, build_runtime
from picobot.runtime.turn_runner import drain_session
from picobot.storage import compaction as sql
from picobot.storage import messages
from picobot.storage.models import SessionRow
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for
from tests.http_client import HTTP

SUMMARY_MATCH = "Conversation to summarise"


# --- the boundary: never splits a tool chain (property) ----------------------------------------


def _call_id() -> st.SearchStrategy[str]:
    return st.uuids().map(lambda u: "c" + u.hex[:8])


@st.composite
def histories(draw: st.DrawFn, broken: bool) -> list[ChatMessage]:
    """Random dialogs of user / assistant / tool-call / tool messages, with system messages between turns.
    `broken` also drops results, moves them after later user messages and adds stray ones."""
    out: list[ChatMessage] = []
    late: list[ChatMessage] = []  # results moved behind a later user message (a broken history)
    for _turn in range(draw(st.integers(0, 9))):
        if draw(st.integers(0, 4)) == 0:
            marker = draw(st.sampled_from([MARKER_AGENT_PROMPT, MARKER_SCHEDULED_PROMPT, None]))
            out.append(ChatMessage(role="system", content="sys", marker=marker))
        out.append(ChatMessage(role="user", content="u"))
        out.extend(late)
        late = []
        for _round in range(draw(st.integers(0, 3))):
            ids = draw(st.lists(_call_id(), min_size=1, max_size=3, unique=True))
            out.append(ChatMessage(role="assistant", tool_calls=[ToolCall(i, "t", "{}") for i in ids]))
            results = [ChatMessage(role="tool", content="r", tool_call_id=i, name="t") for i in ids]
            results = draw(st.permutations(results))
            if broken and draw(st.booleans()):
                cut = draw(st.integers(0, len(results)))
                late, results = results[cut:], results[:cut]
            out.extend(results)
        if draw(st.booleans()):
            out.append(ChatMessage(role="assistant", content="a"))
        if broken and draw(st.integers(0, 5)) == 0:
            out.append(ChatMessage(role="tool", content="stray", tool_call_id="nope", name="t"))
    return out


def _check_boundary(history: list[ChatMessage], keep: int) -> int | None:
    b = rules.choose_boundary(history, keep)
    if b is None:
        return None
    assert history[b].role == "user"
    called_before = {c.id for m in history[:b] for c in m.tool_calls}
    answered_after = {m.tool_call_id for m in history[b:] if m.role == "tool"}
    assert not called_before & answered_after, "a tool_calls message was split from its results"
    assert sum(1 for m in history[b:] if m.role == "user") >= keep  # the recent turns stay whole
    assert any(m.role != "system" for m in history[:b])  # something to fold
    return b


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(broken=False), st.integers(1, 4))
def test_boundary_is_the_keep_th_user_message_from_the_end(history: list[ChatMessage], keep: int) -> None:
    b = _check_boundary(history, keep)
    users = [i for i, m in enumerate(history) if m.role == "user"]
    if len(users) > keep and any(m.role != "system" for m in history[:users[-keep]]):
        assert b == users[-keep]
    else:
        assert b is None


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(histories(broken=True), st.integers(1, 4))
def test_boundary_never_splits_a_chain_even_in_broken_histories(history: list[ChatMessage], keep: int) -> None:
    _check_boundary(history, keep)


def test_a_result_after_a_later_user_message_moves_the_boundary_back() -> None:
    h = [ChatMessage(role="user", content="1"),
         ChatMessage(role="assistant", tool_calls=[ToolCall("x", "t", "{}")]),
         ChatMessage(role="user", content="2"),  # arrived before the result (a broken history)
         ChatMessage(role="tool", content="r", tool_call_id="x", name="t"),
         ChatMessage(role="user", content="3")]
    assert rules.choose_boundary(h, 1) == 4
    assert rules.choose_boundary(h, 2) is None  # cutting at "2" would strand the result of x


# --- what is kept, trimmed and asked for -------------------------------------------------------


def _dialog(turns: int, text: str = "hello", tool_output: str = "out", ids: str = "c") -> list[ChatMessage]:
    out = []
    for i in range(turns):
        out += [ChatMessage(role="user", content=f"{text} {i}"),
                ChatMessage(role="assistant", tool_calls=[ToolCall(f"{ids}{i}", "bash", '{"cmd": "ls /srv"}')]),
                ChatMessage(role="tool", content=tool_output, tool_call_id=f"{ids}{i}", name="bash"),
                ChatMessage(role="assistant", content=f"answer {i}")]
    return out


def test_plan_keeps_agent_and_scheduled_prompts_and_folds_other_system_messages() -> None:
    agent = ChatMessage(role="system", content="AGENT.md", marker=MARKER_AGENT_PROMPT)
    sched = ChatMessage(role="system", content="job rules", marker=MARKER_SCHEDULED_PROMPT)
    old_summary = rules.summary_message("earlier things")
    other = ChatMessage(role="system", content="a note")
    history = [agent, old_summary] + _dialog(2, ids="old") + [sched, other] + _dialog(3)
    plan = rules.plan(history)
    assert plan is not None
    assert plan.kept_system == [agent, sched]
    assert old_summary in plan.summarised and other in plan.summarised  # an older summary is re-summarised
    assert all(m.marker not in rules.KEPT_MARKERS for m in plan.summarised)
    assert history[plan.boundary:] == _dialog(3)


def test_nothing_to_fold_with_three_user_turns_or_fewer() -> None:
    assert rules.plan(_dialog(3)) is None
    assert not rules.needs_compaction(_dialog(3, text="x" * 100_000), 1000)
    assert rules.needs_compaction(_dialog(4, text="x" * 4000), 1000)
    assert not rules.needs_compaction(_dialog(4), 1000)  # small: under half the window


def test_estimate_is_chars_over_four_times_1_2() -> None:
    assert rules.estimate_tokens([ChatMessage(role="user", content="x" * 4000)]) == 1200


def test_transcript_trims_tool_output_over_2000_chars_and_names_the_tool() -> None:
    lines = rules.transcript_lines(_dialog(1, tool_output="y" * 5000))
    result = next(line for line in lines if line.startswith("[tool result: bash]"))
    assert "y" * 2000 in result and "y" * 2001 not in result and "3000 characters trimmed" in result
    assert any(line.startswith("[assistant called tool bash]") and "/srv" in line for line in lines)
    short = rules.transcript_lines(_dialog(1, tool_output="z" * 2000))
    assert any(line.endswith("z" * 2000) for line in short)  # at the limit: untouched


def test_transcript_fits_the_window_budget() -> None:
    text = rules.transcript(_dialog(50, text="w" * 2000), 2000)
    assert len(text) <= rules.transcript_budget(2000)
    assert "characters left out" in text


@given(st.text(max_size=300), st.integers(0, 10_000))
def test_fit_never_exceeds_its_budget_when_cut(text: str, budget: int) -> None:
    out = rules.fit(text, max(budget, 64))
    assert out == text or len(out) <= max(budget, 64)


_odd_text = st.text(alphabet=st.characters(codec=None, blacklist_categories=()), max_size=50) | st.sampled_from(
    ["\ud800", "\x00", "", "x" * 5000])


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["user", "assistant", "tool", "system"]),
                          _odd_text | st.lists(st.fixed_dictionaries({"type": st.just("text"), "text": _odd_text})),
                          _odd_text), max_size=12),
       st.integers(1, 10_000_000))
def test_hostile_messages_make_a_bounded_transcript_and_a_clean_summary(items, window: int) -> None:  # type: ignore[no-untyped-def]
    history = [ChatMessage(role=role, content=content, name=name or None,
                           tool_calls=[ToolCall("i", name, name)] if role == "assistant" else [])
               for role, content, name in items]
    text = rules.transcript(history, window)
    assert len(text) <= max(rules.transcript_budget(window), len("\n\n".join(rules.transcript_lines(history))))
    summary = rules.summary_message(rules.fallback_summary(text))
    summary.content.encode("utf-8")  # no lone surrogate, no NUL reaches SQL or the provider
    assert "\x00" not in summary.content
    assert len(summary.content) <= rules.FALLBACK_MAX_CHARS + 200
    rules.estimate_tokens(history)
    rules.plan(history)


def test_context_limit_is_read_from_provider_errors() -> None:
    assert rules.context_limit("This model's maximum context length is 8192 tokens. However") == 8192
    assert rules.context_limit("prompt is too long: 215304 tokens > 200000 maximum") == 200000
    assert rules.context_limit("something else went wrong") is None
    assert rules.context_limit("") is None


# --- against SQL, Redis and the fake LLM, in process -------------------------------------------


class _RecordingQueue:
    """The task seam: turns are drained by the test; compactions are only recorded."""

    def __init__(self) -> None:
        self.compactions: list[tuple[str, bool]] = []

    def enqueue_turn(self, session_id: str) -> None:
        pass

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        self.compactions.append((session_id, force))


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    cfg = base_config(llm.url, 1)
    cfg["models"]["default"]["context_window_tokens"] = 4000
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-compaction")
    monkeypatch.setenv("REDIS_URL", redis_url)
    rt = build_runtime(load_config(), _RecordingQueue(), migrate=True)
    yield rt
    rt.close()


def _turn(rt: Runtime, text: str, chat: str = "cmp", channel: str = "telegram") -> str:
    reply = Gateway(rt).submit(InboundMessage(channel, chat, "alice", text))
    assert reply.kind == "accepted", reply
    assert drain_session(rt, reply.session_id) == 1
    return reply.session_id


def _chat_requests(llm) -> list[dict]:  # type: ignore[no-untyped-def]
    return [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")]


def _texts(body: dict) -> list[str]:
    return [m["content"] for m in body["messages"] if isinstance(m.get("content"), str)]


def _active(rt: Runtime, sid: str) -> list[ChatMessage]:
    with rt.db.connect() as conn:
        return messages.load_history(conn, sid)


def _seed_dialog(rt: Runtime, llm, turns: int = 5) -> str:  # type: ignore[no-untyped-def]
    add_rule(llm, "turn-", {"content": "noted"}, repeat=True)
    sid = ""
    for i in range(turns):
        sid = _turn(rt, f"turn-{i} path /srv/app/{i}.txt")
    HTTP.delete(llm.url + "/_fake/rules")
    return sid


def test_compaction_writes_summary_moves_the_boundary_and_keeps_raw_messages(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    with runtime.db.connect() as conn:
        raw_before = len(messages.load(conn, sid, 0))
    add_rule(llm, SUMMARY_MATCH, {"content": "User asked about /srv/app files 0-1."})
    outcome = compact_session(runtime, sid, force=True)
    assert outcome.status == "compacted" and not outcome.fallback
    active = _active(runtime, sid)
    assert active[0].marker == MARKER_AGENT_PROMPT  # kept prompt first
    assert active[1].marker == MARKER_HISTORY_COMPACTION
    assert active[1].content == "[Compressed History]\nUser asked about /srv/app files 0-1."
    users = [m.content for m in active if m.role == "user"]
    assert users == [f"turn-{i} path /srv/app/{i}.txt" for i in (2, 3, 4)]  # the last 3 turns, whole
    with runtime.db.connect() as conn:
        assert len(messages.load(conn, sid, 0)) > raw_before  # nothing was deleted
        assert [m.content for m in messages.load(conn, sid, 0)[:2] if m.role == "user"] == [
            "turn-0 path /srv/app/0.txt"]
    # the summary request: same provider and model, the keep-list prompt, the older turns only
    body = _chat_requests(llm)[-1]
    assert body["model"] == "fake-model" and not body.get("tools")
    prompt = body["messages"][0]["content"]
    for word in ("requests", "identifiers", "paths", "URLs", "tool calls", "commands", "results", "errors",
                 "decisions", "preferences", "state"):
        assert word in prompt
    transcript = body["messages"][-1]["content"]
    assert "turn-0 path /srv/app/0.txt" in transcript and "turn-1" in transcript and "turn-2" not in transcript
    # the Timeline memory of the user's scope
    timeline = runtime.memory.list("telegram:alice", category="timeline")
    assert len(timeline) == 1 and timeline[0].importance == pytest.approx(0.3)
    assert timeline[0].content.endswith("/srv/app files 0-1.")
    assert timeline[0].source.source_type == "compaction" and timeline[0].source.session_id == sid
    assert timeline[0].source.message_id is not None


def test_later_turns_send_prompts_summary_and_recent_turns(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    add_rule(llm, SUMMARY_MATCH, {"content": "SUMMARY-OF-OLD"})
    assert compact_session(runtime, sid, force=True).status == "compacted"
    add_rule(llm, "after", {"content": "ok"})
    _turn(runtime, "after compaction")
    texts = _texts(_chat_requests(llm)[-1])
    assert any(t.startswith("[Compressed History]\nSUMMARY-OF-OLD") for t in texts)
    assert "turn-0 path /srv/app/0.txt" not in texts and "turn-1 path /srv/app/1.txt" not in texts
    order = [texts.index(f"turn-{i} path /srv/app/{i}.txt") for i in (2, 3, 4)] + [texts.index("after compaction")]
    assert order == sorted(order)


def test_a_failed_summary_call_falls_back_to_truncation(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    add_rule(llm, SUMMARY_MATCH, {"error": {"status": 500, "message": "boom"}}, repeat=True)
    outcome = compact_session(runtime, sid, force=True)
    assert outcome.status == "compacted" and outcome.fallback
    summary = _active(runtime, sid)[1]
    assert summary.marker == MARKER_HISTORY_COMPACTION
    assert "No summary could be made" in summary.content and "turn-1 path /srv/app/1.txt" in summary.content


def test_a_compaction_that_lost_the_race_changes_nothing(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    with runtime.db.connect() as conn:
        state = sql.read_state(conn, sid)
        positioned = sql.load_positioned(conn, sid, state.compacted_before)
    boundary = next(p for p, m in positioned if m.role == "user" and m.content.startswith("turn-3"))
    head = [rules.summary_message("first")]
    with runtime.db.begin() as conn:
        assert sql.commit(conn, sid, state.compacted_before, boundary, head) is not None
    with runtime.db.begin() as conn:  # a second one, from the same stale read
        assert sql.commit(conn, sid, state.compacted_before, boundary, [rules.summary_message("second")]) is None
    assert [m.content for m in _active(runtime, sid) if m.marker == MARKER_HISTORY_COMPACTION] == [
        "[Compressed History]\nfirst"]


def test_a_turn_committed_during_the_summary_call_is_kept_after_the_summary(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    add_rule(llm, SUMMARY_MATCH, {"content": "slow summary", "delay_ms": 1500})
    outcome: dict = {}
    worker = threading.Thread(target=lambda: outcome.update(o=compact_session(runtime, sid, force=True)))
    worker.start()
    wait_for(lambda: any(SUMMARY_MATCH in json.dumps(b) for b in _chat_requests(llm)), 10, "no summary call")
    add_rule(llm, "meanwhile", {"content": "answered meanwhile"})
    _turn(runtime, "meanwhile")  # the session's turn does not wait for the compaction
    worker.join(30)
    assert outcome["o"].status == "compacted"
    active = _active(runtime, sid)
    assert active[1].content == "[Compressed History]\nslow summary"
    assert [m.content for m in active if m.role == "user"][-1] == "meanwhile"
    assert active[-1].content == "answered meanwhile"


def test_the_cheap_check_after_a_turn_enqueues_on_the_maintenance_seam(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, None, {"content": "k" * 10}, repeat=True)
    sid = ""
    for i in range(3):
        sid = _turn(runtime, f"short {i}")
    assert runtime.queue.compactions == []  # small, and not more than 3 user turns
    for i in range(3):
        sid = _turn(runtime, f"long {i} " + "z" * 3000)  # window 4000: half is 2000 tokens
    assert runtime.queue.compactions and runtime.queue.compactions[0] == (sid, False)
    # while one runs (its lease is held), no second one is asked for
    runtime.redis.set(f"picobot:compacting:{sid}", "x", ex=30)
    runtime.queue.compactions.clear()
    assert not schedule_if_needed(runtime, sid, "default", _active(runtime, sid))
    assert runtime.queue.compactions == []


def test_overflow_mid_turn_compacts_against_the_limit_and_retries(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    add_rule(llm, "too big", {"context_length_error": True}, {"content": "fits now"})
    add_rule(llm, SUMMARY_MATCH, {"content": "OVERFLOW-SUMMARY"})
    _turn(runtime, "too big")
    reqs = _chat_requests(llm)
    retry = _texts(reqs[-1])
    assert "[Compressed History]\nOVERFLOW-SUMMARY" in retry
    # the turn's own input is one of the 3 user turns kept whole
    users = [t for t in retry if t.startswith("turn-") or t == "too big"]
    assert users == ["turn-3 path /srv/app/3.txt", "turn-4 path /srv/app/4.txt", "too big"]
    active = _active(runtime, sid)
    assert active[-1].content == "fits now" and active[1].marker == MARKER_HISTORY_COMPACTION


def test_overflow_with_nothing_to_fold_ends_as_before(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "huge", {"context_length_error": True}, {"context_length_error": True})
    sid = _turn(runtime, "huge")
    active = _active(runtime, sid)
    assert "no longer fits" in active[-1].content
    with runtime.db.connect() as conn:
        assert sql.read_state(conn, sid).compacted_before is None


def test_previous_context_when_the_summary_is_missing(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    sid = _seed_dialog(runtime, llm)
    from picobot.memory import MemorySource

    runtime.memory.add_timeline("telegram:alice", "TIMELINE-A", MemorySource(source_type="compaction"))
    runtime.memory.add_timeline("telegram:alice", "TIMELINE-B", MemorySource(source_type="compaction"))
    with runtime.db.begin() as conn:  # a boundary without a summary (one removed by hand, say)
        conn.execute(update(SessionRow.__table__).where(SessionRow.__table__.c.id == sid).values(compacted_before=7))
    add_rule(llm, "resume", {"content": "ok"})
    _turn(runtime, "resume")
    texts = _texts(_chat_requests(llm)[-1])
    prev = [t for t in texts if t.startswith("[Previous Context]")]
    assert len(prev) == 1 and prev[0].index("TIMELINE-A") < prev[0].index("TIMELINE-B")
    # with the summary present, no [Previous Context]
    add_rule(llm, "more", {"content": "ok"})
    _turn(runtime, "more")
    add_rule(llm, SUMMARY_MATCH, {"content": "S"})
    assert compact_session(runtime, sid, force=True).status == "compacted"
    add_rule(llm, "again", {"content": "ok"})
    _turn(runtime, "again")
    assert not any(t.startswith("[Previous Context]") for t in _texts(_chat_requests(llm)[-1]))


# --- a real worker: background compaction, /compact, kill -9 mid-compaction --------------------


@pytest.fixture(scope="module")
def small_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    from picobot.cli.embedded_redis import free_port

    tmp = tmp_path_factory.mktemp("cstack")
    cfg = base_config(fake_llm.url, free_port())
    cfg["models"]["default"]["context_window_tokens"] = 3000  # compaction above ~1500 estimated tokens
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = cfg["gateway"]["port"]
    try:
        s.start(beat=True)
        yield s
    finally:
        s.stop()


def _info(client) -> dict:  # type: ignore[no-untyped-def]
    return client.command("/info --json")["data"]["compaction"]


def test_a_long_conversation_compacts_in_the_background(small_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    # every summary call answers this (the transcripts contain "msg-" too; the first rule wins)
    add_rule(llm, SUMMARY_MATCH, {"content": "BG-SUMMARY of the early turns"}, repeat=True)
    add_rule(llm, "msg-", {"content": "ack"}, repeat=True)
    c = small_stack.client()
    try:
        n = 0
        while _info(c)["compactions"] == 0:
            assert n < 12, "no compaction after 12 long turns"
            assert c.ask(f"msg-{n} " + "q" * 1200)["status"] == "completed"
            n += 1
            if n > 4:
                wait_for(lambda: not _info(c)["running"], 20, "compaction still running")
        c.ask("msg-final question")
        # the final turn's own request: a later background compaction may have called the model after it
        final = [b for b in _chat_requests(llm) if _texts(b)[-1:] == ["msg-final question"]]
        assert len(final) == 1
        texts = _texts(final[0])
        assert "[Compressed History]\nBG-SUMMARY of the early turns" in texts
        recent = [t for t in texts if t.startswith("msg-")]
        assert recent[-1] == "msg-final question" and len(recent) >= 3
        assert all(t.endswith("q" * 1200) for t in recent[:-1])  # the recent turns, whole
        assert "msg-0 " + "q" * 1200 not in texts
    finally:
        c.close()


def test_slash_compact_runs_it_by_hand(small_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, SUMMARY_MATCH, {"content": "BY-HAND summary"}, repeat=True)
    add_rule(llm, "hand-", {"content": "ok"}, repeat=True)
    c = small_stack.client()
    try:
        for i in range(5):
            c.ask(f"hand-{i}")
        reply = c.command("/compact")
        assert reply["data"]["queued"] is True
        wait_for(lambda: _info(c)["compactions"] == 1, 30, "/compact did not compact")
        c.send({"type": "history", "id": "h1"})
        shown = c.recv_until(lambda f: f.get("id") == "h1")["messages"]
        assert any("BY-HAND summary" in json.dumps(m) for m in shown)  # the result shows in history
        c.ask("hand-after")
        assert "[Compressed History]\nBY-HAND summary" in _texts(_chat_requests(llm)[-1])
        assert "hand-0" not in _texts(_chat_requests(llm)[-1])
    finally:
        c.close()


def test_killing_the_worker_mid_compaction_leaves_the_session_uncompacted(small_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, SUMMARY_MATCH, {"content": "never arrives", "delay_ms": 60_000})
    add_rule(llm, "kill-", {"content": "ok"}, repeat=True)
    c = small_stack.client()
    try:
        for i in range(5):
            c.ask(f"kill-{i}")
        c.command("/compact")
        wait_for(lambda: any(SUMMARY_MATCH in json.dumps(b) for b in _chat_requests(llm)), 20, "no summary call")
        worker = next(name for name in small_stack.procs if name not in ("web", "beat"))
        small_stack.kill(worker)
        from picobot.storage.db import Database

        db = Database(small_stack.database_url)
        try:
            with db.connect() as conn:
                assert sql.read_state(conn, c.session_id).compacted_before is None
                history = messages.load_history(conn, c.session_id)
        finally:
            db.dispose()
        assert [m.content for m in history if m.role == "user"] == [f"kill-{i}" for i in range(5)]
        small_stack.start_worker("w" + uuid.uuid4().hex[:4])
        done = c.ask("kill-after", timeout=60)
        assert done["status"] == "completed" and done["final_text"] == "ok"
        assert _info(c)["compactions"] == 0
    finally:
        c.close()
