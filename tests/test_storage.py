"""Storage against SQLite and PostgreSQL: sessions, inbound queue, history, repair."""

from __future__ import annotations

import threading

import pytest

from picobot.domain.messages import ChatMessage, ToolCall, Usage
from picobot.storage import inbound, messages, sessions, turns
from picobot.storage.db import Database
from picobot.storage.messages import REPAIR_TEXT, repair_tool_chains
from picobot.storage.models import INBOUND_PENDING


@pytest.fixture
def db(db_url: str) -> Database:
    d = Database(db_url)
    d.migrate()
    d.migrate()  # idempotent
    yield d
    d.dispose()


def test_sessions_lifecycle(db: Database) -> None:
    with db.write() as s:
        first = sessions.get_or_create_current(s, "cli_chat", "c1")
        assert first.id == "cli_chat:c1:default"
        second = sessions.create(s, "cli_chat", "c1", title="Plans")
        assert second.dialog_id.startswith("d_") and second.id != first.id
    with db.read() as s:
        assert sessions.current(s, "cli_chat", "c1").id == second.id
    with db.write() as s:
        assert sessions.switch(s, "cli_chat", "c1", "default").id == first.id
        assert sessions.switch(s, "cli_chat", "c1", "nope") is None
        row = sessions.get(s, first.id)
        sessions.rename(s, row, "Renamed")
        sessions.archive(s, row)
    with db.read() as s:
        # archived dialogs leave the current pointer; the other live dialog takes over
        assert sessions.current(s, "cli_chat", "c1").id == second.id
        listed = sessions.list_for_chat(s, "cli_chat", "c1")
        assert [r.id for r in listed] == [second.id]
        assert len(sessions.list_for_chat(s, "cli_chat", "c1", include_archived=True)) == 2
    with db.write() as s:
        sessions.delete(s, sessions.get(s, second.id))
        assert sessions.current(s, "cli_chat", "c1") is None
        # other chats are isolated
        assert sessions.get_or_create_current(s, "cli_chat", "c2").id == "cli_chat:c2:default"


def test_inbound_sequence_is_monotonic_under_concurrency(db: Database) -> None:
    with db.write() as s:
        sid = sessions.get_or_create_current(s, "cli_chat", "busy").id
    seqs: list[int] = []
    lock = threading.Lock()

    def writer(n: int) -> None:
        for i in range(10):
            with db.begin() as conn:
                row, created = inbound.enqueue(conn, sid, "cli_chat", f"m{n}-{i}", "u")
                assert created
                with lock:
                    seqs.append(row.seq)

    threads = [threading.Thread(target=writer, args=(n,)) for n in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 61))


def test_platform_ids_dedupe(db: Database) -> None:
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "feishu", "oc_1")
        a, created_a = inbound.enqueue(conn, sid, "feishu", "hi", "u", platform_message_id="om_1")
        b, created_b = inbound.enqueue(conn, sid, "feishu", "hi", "u", platform_message_id="om_1")
        assert created_a and not created_b and (a.id, a.seq) == (b.id, b.seq)
        assert inbound.intake_state(conn, sid) == (1, False)


def test_claims_respect_steer_and_queue(db: Database) -> None:
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "q")
        for text, mode in [("a", "steer"), ("b", "steer"), ("c", "queue"), ("d", "steer")]:
            inbound.enqueue(conn, sid, "cli_chat", text, "u", mode=mode)
    with db.begin() as conn:
        first = inbound.claim_first(conn, sid, "t1")
        assert [r.content for r in first] == ["a", "b"]
        # mid-turn steering takes steer input only; the queued message waits for the next turn
        assert [r.content for r in inbound.claim_steer(conn, sid, "t1")] == ["d"]
        inbound.finish(conn, "t1")
    with db.begin() as conn:
        assert [r.content for r in inbound.claim_first(conn, sid, "t2")] == ["c"]
        assert inbound.release_claims(conn, "t2") == 1
        assert inbound.has_pending(conn, sid)
        assert inbound.cancel_pending(conn, sid) == 1
        assert not inbound.has_pending(conn, sid)


def test_turn_messages_keep_true_order(db: Database) -> None:
    call = ToolCall("call_1", "calculator", '{"expression": "1+1"}')
    batch = [
        ChatMessage(role="user", content="what is 1+1"),
        ChatMessage(role="assistant", content="", tool_calls=[call], reasoning_content="think"),
        ChatMessage(role="tool", content="2", tool_call_id="call_1", name="calculator"),
        ChatMessage(role="assistant", content="It is 2."),
    ]
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "order")
        turns.start(conn, "t1", sid, "w", 1, [1])
        assert sessions.claim_view(conn, sid).running
        assert messages.append(conn, sid, None, [ChatMessage(role="user", content="earlier")]) == 0
        first = sessions.record_turn(conn, sid, len(batch), Usage(10, 5), 10, 1)
        assert first == 1
        messages.insert_at(conn, sid, first, "t1", batch)
        assert turns.finish(conn, "t1", "completed", Usage(10, 5), "It is 2.", None, [1])
        assert not turns.finish(conn, "t1", "failed", Usage(), None, "late", [1])  # fenced: no longer running
        assert not sessions.claim_view(conn, sid).running
        # a turn without usage keeps the last context figure
        assert sessions.record_turn(conn, sid, 0, Usage(), 0, 0) == 5
    with db.connect() as conn:
        history = messages.load_history(conn, sid)
        assert [m.role for m in history] == ["user", "user", "assistant", "tool", "assistant"]
        assert history[2].tool_calls[0].arguments == '{"expression": "1+1"}'
        assert history[2].reasoning_content == "think"
    with db.read() as s:
        row = sessions.get(s, sid)
        assert (row.input_tokens, row.output_tokens, row.user_turns, row.last_input_tokens) == (10, 5, 1, 10)
        assert row.next_position == 5
        assert turns.get(s, "t1").status == "completed"


def test_content_blocks_round_trip(db: Database) -> None:
    blocks = [{"type": "text", "text": "look"}, {"type": "image_url", "url": "https://example.invalid/a.png"},
              {"type": "media", "path": "/tmp/x.png", "mime": "image/png"}]
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "img")
        messages.append(conn, sid, None, [ChatMessage(role="user", content=blocks)])
    with db.connect() as conn:
        assert messages.load_history(conn, sid)[0].content == blocks


def test_repair_on_load(db: Database) -> None:
    calls = [ToolCall("a", "bash", "{}"), ToolCall("b", "read", "{}")]
    broken = [
        ChatMessage(role="tool", content="stray", tool_call_id="zzz"),
        ChatMessage(role="user", content="go"),
        ChatMessage(role="assistant", content="", tool_calls=calls),
        ChatMessage(role="tool", content="ok", tool_call_id="b", name="read"),
        ChatMessage(role="user", content="next"),
    ]
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "broken")
        messages.append(conn, sid, None, broken)
    with db.connect() as conn:
        fixed = messages.load_history(conn, sid)
    assert [m.role for m in fixed] == ["user", "assistant", "tool", "tool", "user"]
    assert [m.tool_call_id for m in fixed[2:4]] == ["a", "b"]
    assert fixed[2].content == REPAIR_TEXT and fixed[2].is_error
    assert fixed[3].content == "ok"


def test_repair_is_identity_on_whole_chains() -> None:
    whole = [ChatMessage(role="user", content="x"),
             ChatMessage(role="assistant", tool_calls=[ToolCall("a", "t", "{}")]),
             ChatMessage(role="tool", content="r", tool_call_id="a"),
             ChatMessage(role="assistant", content="done")]
    assert repair_tool_chains(whole) == whole


def test_claimed_rows_states(db: Database) -> None:
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "st")
        inbound.enqueue(conn, sid, "cli_chat", "x", "u")
        rows = inbound.claim_first(conn, sid, "tx")
        assert rows[0].attempts == 1
        assert [(r.seq, r.attempts) for r in inbound.claimed_by(conn, "tx")] == [(1, 1)]
        inbound.release_claims(conn, "tx")
        assert inbound.claim_first(conn, sid, "ty")[0].attempts == 2
        inbound.set_status(conn, [rows[0].id], INBOUND_PENDING)
    with db.connect() as conn:
        assert inbound.sessions_with_work(conn) == [sid]
        pending = inbound.count_pending(conn, sid)
    assert pending == 1


def test_current_or_create_follows_the_pointer(db: Database) -> None:
    with db.begin() as conn:
        first = sessions.current_or_create_id(conn, "cli_chat", "ptr")
        assert sessions.current_id(conn, "cli_chat", "ptr") == first
    with db.write() as s:
        second = sessions.create(s, "cli_chat", "ptr").id
    with db.begin() as conn:
        assert sessions.current_or_create_id(conn, "cli_chat", "ptr") == second
    with db.write() as s:
        sessions.archive(s, sessions.get(s, second))
    with db.begin() as conn:  # the archived pointer falls back to the other live dialog
        assert sessions.current_id(conn, "cli_chat", "ptr") is None
        assert sessions.current_or_create_id(conn, "cli_chat", "ptr") == first


def test_newest_rows_respect_limit_and_compaction(db: Database) -> None:
    with db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "cli_chat", "newest")
        messages.append(conn, sid, None, [ChatMessage(role="user", content=f"m{i}") for i in range(5)])
    with db.connect() as conn:
        assert [r.content for r in messages.newest(conn, sid, 2)] == ["m3", "m4"]
        assert [r.position for r in messages.newest(conn, sid, 10)] == [0, 1, 2, 3, 4]
    with db.write() as s:
        sessions.get(s, sid).compacted_before = 2  # older messages were summarised away
    with db.connect() as conn:
        assert [r.content for r in messages.newest(conn, sid, 10)] == ["m2", "m3", "m4"]
