"""Get-or-create and first-one-wins writes under real concurrency, on SQLite and PostgreSQL.

SQLite serialises writers and hides these races; PostgreSQL runs them side by side, where a
"look, then insert" dies on the key.
"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Iterator

import pytest
import sqlalchemy

from picobot.storage import inbound, outbox, sessions
from picobot.storage.db import Database
from picobot.storage.models import ChatScopeRow, InboundRow, OutboxRow, SessionRow
from tests.stack import Stack, WsClient, all_at_once

THREADS = 16


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = Database(db_url)
    d.migrate()
    yield d
    d.dispose()


def _count(db: Database, column: Any, *where: Any) -> int:
    with db.read() as s:
        return s.scalar(sqlalchemy.select(sqlalchemy.func.count(column)).where(*where)) or 0


def test_first_dialog_of_a_new_chat_is_created_once(db: Database) -> None:
    def open_chat(i: int) -> str:
        with db.write() as s:
            return sessions.get_or_create_current(s, "cli_chat", "newcomer").id

    ids = all_at_once(THREADS, open_chat)
    assert set(ids) == {"cli_chat:newcomer:default"}
    assert _count(db, SessionRow.id, SessionRow.chat_id == "newcomer") == 1
    assert _count(db, ChatScopeRow.scope, ChatScopeRow.scope == "cli_chat:newcomer") == 1


def test_first_message_of_a_new_chat_races_on_the_core_path(db: Database) -> None:
    def first_message(i: int) -> str:
        with db.begin() as conn:
            sid = sessions.current_or_create_id(conn, "web", "two-tabs")
            inbound.enqueue(conn, sid, "web", f"hello {i}", "u")
            return sid

    assert set(all_at_once(THREADS, first_message)) == {"web:two-tabs:default"}
    assert _count(db, InboundRow.id, InboundRow.session_id == "web:two-tabs:default") == THREADS


def test_a_platform_event_delivered_twice_at_once_is_stored_once(db: Database) -> None:
    with db.write() as s:
        sid = sessions.get_or_create_current(s, "feishu", "group").id

    def deliver(i: int) -> bool:
        with db.begin() as conn:
            return inbound.enqueue(conn, sid, "feishu", "hi", "u", platform_message_id="om_twice")[1]

    assert sorted(all_at_once(THREADS, deliver)) == [False] * (THREADS - 1) + [True]
    assert _count(db, InboundRow.id, InboundRow.platform_message_id == "om_twice") == 1


def test_an_outbound_delivery_is_recorded_once_per_idempotency_key(db: Database) -> None:
    def record(i: int) -> bool:
        with db.write() as s:
            return outbox.add(s, "feishu", "group", {"text": f"answer {i}"}, idempotency_key="turn-1:0")

    assert sorted(all_at_once(THREADS, record)) == [False] * (THREADS - 1) + [True]
    assert _count(db, OutboxRow.id, OutboxRow.idempotency_key == "turn-1:0") == 1


@pytest.mark.slow
def test_many_clients_opening_new_chats_at_once_all_get_ready(tmp_path: Path, fake_llm, pg_url: str) -> None:  # type: ignore[no-untyped-def]
    """Forty sockets over twenty new chats, on PostgreSQL: every handshake ends in `ready`."""
    stack = Stack(tmp_path, fake_llm.url, database_url=pg_url)
    try:
        stack.start_web()
        token = stack.token
        chats = [f"crowd-{i // 2}" for i in range(40)]
        clients: list[WsClient] = all_at_once(len(chats), lambda i: WsClient(stack.ws_url, chats[i], token=token))
        try:
            by_chat: dict[str, set[str]] = {}
            for c in clients:
                assert c.ready["type"] == "ready"
                by_chat.setdefault(c.chat_id, set()).add(c.session_id)
            assert all(len(ids) == 1 for ids in by_chat.values()), by_chat  # both sockets of a chat share its dialog
            db = Database(pg_url)
            try:
                assert _count(db, SessionRow.id, SessionRow.chat_id.like("crowd-%")) == 20
            finally:
                db.dispose()
        finally:
            for c in clients:
                c.close()
        assert "UniqueViolation" not in stack.all_logs()
    finally:
        stack.stop()
