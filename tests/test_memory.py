"""Long-term memory: the store and its search on SQLite and PostgreSQL, the memory and knowledge
tools scoped to the calling user, automatic recall, and the whole path through a real worker."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from picobot.config import Config
from picobot.domain.messages import ToolCall
from picobot.errors import MemoryRejected
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.memory import MemorySource, MemoryStore, scope_key_for
from picobot.memory.knowledge import KnowledgeBase, check_name
from picobot.memory.recall import RECALL_HEADER, recall_note
from picobot.app import App as Runtime, build_plugins
from picobot.storage.db import Database
from picobot.tools.base import ToolContext
from picobot.memory.knowledge_tools import knowledge_tools
from picobot.memory.tools import memory_tools
from picobot.tools.registry import ToolRegistry
from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.http_client import HTTP

DAY = 86400.0


@pytest.fixture
def store(db_url: str) -> Iterator[MemoryStore]:
    db = Database(db_url)
    db.migrate()
    try:
        yield MemoryStore(db, max_content_chars=500)
    finally:
        db.dispose()


def keys(hits: list[Any]) -> list[str]:
    return [h.memory.memory_key for h in hits]


# --- the store --------------------------------------------------------------------------------


def test_put_get_update_delete_and_one_row_per_key(store: MemoryStore) -> None:
    src = MemorySource(session_id="cli_chat:c1:d1", seq=3, turn_id="t1", channel="cli_chat", chat_id="c1")
    first = store.put("owner", "prefs", "tea", "likes oolong", importance=0.7, source=src)
    again = store.put("owner", "prefs", "tea", "likes green tea now")  # same key: replaced, not added
    assert again.id == first.id
    got = store.get("owner", "prefs", "tea")
    assert got is not None and got.content == "likes green tea now" and got.source.source_type == "tool"
    assert len(store.list("owner")) == 1
    store.put("owner", "other-ns", "tea", "a different namespace")
    store.put("telegram:42", "prefs", "tea", "another user")
    assert len(store.list("owner")) == 2 and len(store.list("telegram:42")) == 1
    changed = store.update("owner", "prefs", "tea", importance=0.9, source=src)
    assert changed.importance == 0.9 and changed.content == "likes green tea now"
    assert store.get("owner", "prefs", "tea").source.seq == 3  # type: ignore[union-attr]
    with pytest.raises(MemoryRejected, match="use put"):
        store.update("owner", "prefs", "coffee", content="x")
    assert store.delete("owner", "prefs", "tea") is True
    assert store.delete("owner", "prefs", "tea") is False
    assert store.get("owner", "prefs", "tea") is None and store.get("telegram:42", "prefs", "tea") is not None


def test_the_database_refuses_a_second_row_for_a_key(store: MemoryStore) -> None:
    store.put("owner", "n", "k", "first")
    row = {"scope": "user", "scope_key": "owner", "namespace": "n", "memory_key": "k", "content": "dup",
           "category": "knowledge", "importance": 0.5, "search_text": "dup", "source_type": "tool",
           "created_at": 1.0, "updated_at": 1.0}
    cols = ", ".join(row)
    with pytest.raises(IntegrityError):
        with store.db.begin() as conn:
            conn.execute(text(f"INSERT INTO memories ({cols}) VALUES ({', '.join(':' + c for c in row)})"), row)


def test_full_text_search_in_chinese_english_and_both(store: MemoryStore) -> None:
    store.put("owner", "prefs", "drink", "我最喜欢喝乌龙茶，不加糖")
    store.put("owner", "work", "lang", "Writes Python services and prefers PostgreSQL")
    store.put("owner", "home", "city", "Lives in 北京, works near 北京大学")
    store.put("owner", "misc", "noise", "Nothing relevant here at all")
    assert keys(store.search("owner", "乌龙茶")) == ["drink"]
    assert keys(store.search("owner", "postgresql")) == ["lang"]  # case folded
    assert keys(store.search("owner", "大学")) == ["city"]  # a word inside a longer one
    mixed = store.search("owner", "北京 Python")
    assert set(keys(mixed)) == {"city", "lang"} and all(h.matched_by == "fts" for h in mixed)
    assert store.search("telegram:1", "乌龙茶") == []  # another scope sees nothing


def test_like_fallback_when_full_text_finds_nothing(store: MemoryStore) -> None:
    store.put("owner", "work", "lang", "Writes Python programming tutorials")
    store.put("owner", "misc", "mark", "status: !!! urgent")
    partial = store.search("owner", "gramm")  # no whole word matches: a substring does
    assert keys(partial) == ["lang"] and partial[0].matched_by == "like"
    assert keys(store.search("owner", "!!!")) == ["mark"]  # no indexable terms at all
    assert store.search("owner", "100%_") == []  # LIKE wildcards in the query are plain characters
    assert store.search("owner", "gramm", like_fallback=False) == []


def test_filters_namespace_category_time_and_session(store: MemoryStore) -> None:
    store.put("owner", "a", "k1", "tea facts one", source=MemorySource(session_id="s1"))
    store.put("owner", "b", "k2", "tea facts two", source=MemorySource(session_id="s2"))
    timeline_id = store.add_timeline("owner", "we talked about tea", MemorySource(session_id="s1"))
    with store.db.begin() as conn:  # k1 was written long ago
        conn.execute(text("UPDATE memories SET created_at = :t WHERE memory_key = 'k1'"), {"t": time.time() - 10 * DAY})
    assert keys(store.search("owner", "tea", namespace="b")) == ["k2"]
    timeline = store.search("owner", "tea", category="timeline")
    assert [h.memory.id for h in timeline] == [timeline_id] and timeline[0].memory.importance == 0.3
    assert set(keys(store.search("owner", "tea", category="knowledge"))) == {"k1", "k2"}
    assert keys(store.search("owner", "tea", until=time.time() - DAY)) == ["k1"]
    assert "k1" not in keys(store.search("owner", "tea", since=time.time() - DAY))
    assert set(keys(store.search("owner", "tea", session_id="s1"))) == {"k1", timeline[0].memory.memory_key}
    assert [m.memory_key for m in store.list("owner", namespace="a")] == ["k1"]


def test_ranking_weighs_relevance_importance_and_recency(store: MemoryStore) -> None:
    store.put("owner", "n", "high", "likes jasmine tea", importance=0.9)
    store.put("owner", "n", "low", "likes jasmine tea", importance=0.1)  # newer: importance must win
    assert keys(store.search("owner", "jasmine")) == ["high", "low"]
    store.put("owner", "n", "old", "prefers espresso coffee", importance=0.5)
    store.put("owner", "n", "new", "prefers espresso coffee", importance=0.5)
    with store.db.begin() as conn:
        conn.execute(text("UPDATE memories SET updated_at = :t WHERE memory_key = 'old'"), {"t": time.time() - 90 * DAY})
    assert keys(store.search("owner", "espresso")) == ["new", "old"]
    # relevance leads: the memory matching every word outranks a more important one matching one
    store.put("owner", "n", "both", "hiking boots for alpine trails", importance=0.2)
    store.put("owner", "n", "one", "alpine skiing", importance=0.8)
    assert keys(store.search("owner", "hiking boots alpine trails"))[0] == "both"


def test_index_follows_updates_and_deletes(store: MemoryStore) -> None:
    store.put("owner", "n", "k", "remembers the walrus")
    store.update("owner", "n", "k", content="remembers the penguin")
    assert store.search("owner", "walrus", like_fallback=False) == []
    assert keys(store.search("owner", "penguin")) == ["k"]
    store.delete("owner", "n", "k")
    assert store.search("owner", "penguin") == []


@pytest.mark.parametrize("query", ['"', '"unbalanced', "*", "tea*", "NEAR(", "NEAR(a b", "AND", "a AND OR NOT b",
                                   "col:tea", "'", "\\", "(((", "^x", "-tea", "!", "&|!", "\x00tea", "\ud800tea",
                                   "x" * 100_000, "", "   ", "茶" * 5000])
def test_hostile_queries_never_raise(store: MemoryStore, query: str) -> None:
    store.put("owner", "n", "k", "tea and NEAR things")
    hits = store.search("owner", query)
    assert isinstance(hits, list)


@pytest.mark.parametrize("bad", [
    {"content": ""}, {"content": "   "}, {"content": "a\x00b"}, {"content": "bad \ud800 text"},
    {"content": "x" * 501}, {"content": 12}, {"key": ""}, {"key": "k" * 201}, {"namespace": "\x00"},
    {"importance": float("nan")}, {"importance": 1.5}, {"importance": -0.1}, {"importance": True},
    {"category": "gossip"},
])
def test_bad_writes_are_refused_with_a_reason(store: MemoryStore, bad: dict[str, Any]) -> None:
    args: dict[str, Any] = {"namespace": "n", "key": "k", "content": "fine", "importance": 0.5,
                            "category": "knowledge", **bad}
    with pytest.raises(MemoryRejected) as exc:
        store.put("owner", args["namespace"], args["key"], args["content"], importance=args["importance"],
                  category=args["category"])
    assert str(exc.value)
    assert store.list("owner") == []


def test_oversize_content_is_refused_with_the_limit(store: MemoryStore) -> None:
    with pytest.raises(MemoryRejected, match="501 characters; the limit is 500"):
        store.put("owner", "n", "k", "y" * 501)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.text(max_size=60))
def test_any_text_is_a_safe_query(tmp_path: Path, query: str) -> None:
    db = Database(f"sqlite:///{tmp_path / 'prop.db'}")
    try:
        db.migrate()
        s = MemoryStore(db)
        if not s.has_any("owner"):
            s.put("owner", "n", "k", "我喜欢 tea")
        assert isinstance(s.search("owner", query), list)
    finally:
        db.dispose()


# --- scopes and tools -------------------------------------------------------------------------


def test_scope_keys() -> None:
    assert scope_key_for("web", "browser-chat") == scope_key_for("cli_chat", "terminal") == "owner"
    assert scope_key_for("telegram", "42") == "telegram:42"
    assert scope_key_for("feishu", "42") != scope_key_for("telegram", "42")


def _registry(store: MemoryStore, kb: KnowledgeBase | None = None) -> ToolRegistry:
    reg = ToolRegistry()
    for tool in memory_tools(store) + (knowledge_tools(kb) if kb else []):
        reg.register(tool)
    return reg


def _ctx(tmp_path: Path, channel: str, chat_id: str, sender: str) -> ToolContext:
    return ToolContext(session_id=f"{channel}:{chat_id}:d", channel=channel, chat_id=chat_id, sender_id=sender,
                       turn_id=uuid.uuid4().hex, workspace=tmp_path, inbound_seq=7)


def call(reg: ToolRegistry, ctx: ToolContext, name: str, args: dict[str, Any] | str) -> tuple[str, bool]:
    raw = args if isinstance(args, str) else json.dumps(args)
    res = reg.execute(ToolCall(id="c1", name=name, arguments=raw), ctx, 20_000)
    return res.content, res.is_error


def test_memory_tools_are_scoped_to_the_calling_user(store: MemoryStore, tmp_path: Path) -> None:
    reg = _registry(store)
    alice_chat1 = _ctx(tmp_path, "telegram", "group-1", "alice")
    alice_chat2 = _ctx(tmp_path, "telegram", "dm-alice", "alice")
    bob = _ctx(tmp_path, "telegram", "group-1", "bob")
    out, err = call(reg, alice_chat1, "memory_manage", {"action": "put", "namespace": "prefs", "key": "tea",
                                                       "content": "Alice drinks 乌龙茶 daily"})
    assert not err and "Saved prefs/tea" in out
    found, _ = call(reg, alice_chat2, "memory_search", {"action": "search", "query": "乌龙茶"})
    assert "Alice drinks" in found  # another chat of the same user
    got, _ = call(reg, alice_chat2, "memory_search", {"action": "get", "namespace": "prefs", "key": "tea"})
    assert "Alice drinks" in got
    for action in ({"action": "search", "query": "乌龙茶"}, {"action": "list"},
                   {"action": "get", "namespace": "prefs", "key": "tea"}):
        seen, _ = call(reg, bob, "memory_search", action)
        assert "Alice" not in seen  # same group chat, another user
    gone, _ = call(reg, bob, "memory_manage", {"action": "delete", "namespace": "prefs", "key": "tea"})
    assert "No memory" in gone and store.get("telegram:alice", "prefs", "tea") is not None
    row = store.get("telegram:alice", "prefs", "tea")
    assert row is not None and row.source.session_id == "telegram:group-1:d" and row.source.seq == 7
    assert row.source.chat_id == "group-1" and row.source.turn_id == alice_chat1.turn_id


def test_web_and_terminal_share_the_owner_memory(store: MemoryStore, tmp_path: Path) -> None:
    reg = _registry(store)
    call(reg, _ctx(tmp_path, "cli_chat", "term-1", "term-1"), "memory_manage",
         {"action": "put", "key": "editor", "content": "uses vim keybindings"})
    found, _ = call(reg, _ctx(tmp_path, "web", "browser-7", "browser-7"), "memory_search",
                    {"action": "search", "query": "vim"})
    assert "vim keybindings" in found


@pytest.mark.parametrize("extra", [{"scope_key": "telegram:bob"}, {"scope": "user"}, {"user": "bob"},
                                   {"sender_id": "bob"}, {"channel": "telegram"}])
def test_a_tool_cannot_name_another_scope(store: MemoryStore, tmp_path: Path, extra: dict[str, Any]) -> None:
    reg = _registry(store)
    ctx = _ctx(tmp_path, "telegram", "c", "alice")
    out, err = call(reg, ctx, "memory_manage", {"action": "put", "key": "k", "content": "x", **extra})
    assert err and "current user's own memories" in out
    out, err = call(reg, ctx, "memory_search", {"action": "list", **extra})
    assert err and "current user's own memories" in out
    assert store.list("telegram:bob") == [] and store.list("telegram:alice") == []


def test_tool_refusals_say_what_to_fix(store: MemoryStore, tmp_path: Path) -> None:
    reg = _registry(store)
    ctx = _ctx(tmp_path, "telegram", "c", "alice")
    out, err = call(reg, ctx, "memory_manage", {"action": "put", "key": "k", "content": "z" * 501})
    assert err and "the limit is 500" in out
    out, err = call(reg, ctx, "memory_manage", {"action": "put", "key": "k", "content": "bad \ud800"})
    assert err and "surrogate" in out
    out, err = call(reg, ctx, "memory_manage", {"action": "put", "key": "k"})
    assert err and "needs content" in out
    out, err = call(reg, ctx, "memory_manage", {"action": "put", "key": "k", "content": "c", "importance": "high"})
    assert err and "importance" in out
    deep = '{"action": "put", "key": "k", "content": ' + "[" * 5000 + "]" * 5000 + "}"
    out, err = call(reg, ctx, "memory_manage", deep)
    assert err
    out, err = call(reg, ctx, "memory_search", {"action": "get"})
    assert err and "needs key" in out
    out, err = call(reg, ctx, "memory_search", {"action": "search", "query": 'NEAR( "x" AND *', "limit": 10**9})
    assert not err
    out, err = call(reg, ctx, "memory_search", {"action": "list", "bogus": 1})
    assert err and "bogus" in out
    assert store.list("telegram:alice") == []


def test_timeline_recall_reads_only_timeline_entries(store: MemoryStore, tmp_path: Path) -> None:
    store.add_timeline("telegram:alice", "Discussed the kayak trip to Norway", MemorySource(session_id="s"))
    store.put("telegram:alice", "n", "boat", "owns a kayak")
    reg = _registry(store)
    out, err = call(reg, _ctx(tmp_path, "telegram", "c", "alice"), "timeline_recall", {"query": "kayak"})
    assert not err and "Norway" in out and "owns a kayak" not in out
    out, _ = call(reg, _ctx(tmp_path, "telegram", "c", "bob"), "timeline_recall", {"query": "kayak"})
    assert "Norway" not in out


# --- knowledge base ---------------------------------------------------------------------------


def _kb(tmp_path: Path) -> KnowledgeBase:
    ws = tmp_path / "ws" / "knowledge"
    return KnowledgeBase([("workspace", ws), ("home", tmp_path / "home" / "knowledge")], ws)


def test_knowledge_base_create_list_search_and_reindex(tmp_path: Path) -> None:
    kb = _kb(tmp_path)
    home_doc = tmp_path / "home" / "knowledge" / "office" / "content.md"
    home_doc.parent.mkdir(parents=True)
    home_doc.write_text("# Office\n\nThe wifi password is on the fridge.\n", encoding="utf-8")
    doc, replaced = kb.create("茶道", "# 茶道\n\n泡乌龙茶用九十五度的水。Brew oolong at 95 C.")
    assert not replaced and (tmp_path / "ws" / "knowledge" / "茶道" / "content.md").exists()
    assert [(d.name, d.source) for d in kb.list()] == [("office", "home"), ("茶道", "workspace")]
    assert [h.doc.name for h in kb.search("乌龙茶")] == ["茶道"]
    assert [h.doc.name for h in kb.search("wifi password")] == ["office"]
    assert "fridge" in kb.search("wifi")[0].snippet
    time.sleep(0.01)
    home_doc.write_text("# Office\n\nThe printer is on floor 3.\n", encoding="utf-8")
    os.utime(home_doc, ns=(time.time_ns() + 10**9, time.time_ns() + 10**9))  # a coarse clock still sees a change
    assert kb.search("wifi") == [] and [h.doc.name for h in kb.search("printer")] == ["office"]
    home_doc.unlink()
    assert [d.name for d in kb.list()] == ["茶道"]
    _, replaced = kb.create("茶道", "new text")
    assert replaced and kb.read("茶道")[1] == "new text"  # type: ignore[index]
    assert kb.read("missing") is None


@pytest.mark.parametrize("name", ["..", "../escape", "/etc", "a/b", "a\\b", "a\x00b", "bad\ud800", "", " ",
                                  ".hidden", "x" * 65, "a..b", "ends.", 5])
def test_knowledge_names_that_escape_are_refused(tmp_path: Path, name: Any) -> None:
    kb = _kb(tmp_path)
    with pytest.raises(MemoryRejected):
        kb.create(name, "text")
    assert not (tmp_path / "ws" / "knowledge").exists() or list((tmp_path / "ws" / "knowledge").iterdir()) == []
    assert not (tmp_path / "ws" / "escape").exists()


def test_knowledge_tools(tmp_path: Path, store: MemoryStore) -> None:
    reg = _registry(store, _kb(tmp_path))
    ctx = _ctx(tmp_path, "telegram", "c", "alice")
    out, err = call(reg, ctx, "knowledge_create", {"name": "deploy", "content": "Deploy with docker compose up."})
    assert not err and "Created" in out
    out, _ = call(reg, ctx, "knowledge_list", {})
    assert "deploy" in out
    out, _ = call(reg, ctx, "knowledge_search", {"query": "docker"})
    assert "docker compose" in out
    out, _ = call(reg, ctx, "knowledge_search", {"name": "deploy"})
    assert "Deploy with docker" in out
    out, err = call(reg, ctx, "knowledge_create", {"name": "../../etc", "content": "x"})
    assert err and "not allowed" in out
    out, err = call(reg, ctx, "knowledge_search", {"name": "nope"})
    assert err and "knowledge_list" in out


def test_check_name_accepts_plain_names() -> None:
    assert check_name(" release-notes_v2.1 ") == "release-notes_v2.1"
    assert check_name("茶道 笔记") == "茶道 笔记"


# --- automatic recall ------------------------------------------------------------------------


def test_recall_note_lists_matching_knowledge_only(store: MemoryStore) -> None:
    store.put("owner", "prefs", "tea", "favourite tea is 乌龙茶", importance=0.9)
    store.put("owner", "prefs", "pet", "has a cat named Miso")
    store.add_timeline("owner", "talked about tea prices")
    note = recall_note(store, "owner", "推荐一款茶? which tea should I buy", 5)
    assert note is not None and note.role == "system" and note.content.startswith(RECALL_HEADER)
    assert "favourite tea is 乌龙茶" in note.content
    assert "Miso" not in note.content and "prices" not in note.content
    assert recall_note(store, "owner", "tea", 0) is None
    assert recall_note(store, "telegram:someone", "tea", 5) is None


def test_recall_for_a_user_with_no_memories_never_loads_the_segmenter(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'r.db'}"
    script = (
        "import sys\n"
        "from picobot.storage.db import Database\n"
        "from picobot.memory import MemoryStore\n"
        "from picobot.memory.recall import recall_note\n"
        "from picobot.storage.segment import jieba_loaded\n"
        f"db = Database({url!r}); db.migrate(); s = MemoryStore(db)\n"
        "s.put('telegram:other', 'n', 'k', 'plain english fact')\n"
        "assert recall_note(s, 'owner', '我想喝茶', 5) is None\n"
        "assert recall_note(s, 'telegram:other', 'english fact', 5) is not None\n"
        "print('jieba', jieba_loaded(), 'jieba' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    assert "jieba False False" in out.stdout


# --- end to end: a real worker and the fake LLM -----------------------------------------------


def _completions(llm: Any) -> list[dict[str, Any]]:
    return [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")]


def _request_for(llm: Any, text_in_user: str) -> dict[str, Any] | None:
    for body in reversed(_completions(llm)):
        users = [m for m in body["messages"] if m["role"] == "user"]
        if users and text_in_user in str(users[-1].get("content")):
            return body
    return None


def _system_text(body: dict[str, Any]) -> str:
    return "\n".join(str(m.get("content")) for m in body["messages"] if m["role"] == "system")


def test_a_fact_saved_in_one_chat_is_recalled_in_another_chat_of_the_same_user(stack: Stack, llm: Any) -> None:
    fact = "favourite tea is 乌龙茶 (oolong), no sugar"
    add_rule(llm, "remember my tea", {"tool_calls": [{"name": "memory_manage", "arguments": {
        "action": "put", "namespace": "prefs", "key": "tea", "content": fact, "importance": 0.8}}]},
        {"content": "Noted."})
    add_rule(llm, None, {"content": "ok"}, repeat=True)
    terminal = stack.client()  # cli_chat: the owner
    try:
        assert terminal.ask("please remember my tea: oolong")["status"] == "completed"
    finally:
        terminal.close()
    tool_result = [m for m in _completions(llm)[-1]["messages"] if m["role"] == "tool"]
    assert "Saved prefs/tea" in tool_result[-1]["content"]

    from tests.stack import WsClient

    browser = WsClient(stack.ws_url, "browser-" + uuid.uuid4().hex[:6], channel="web", token=stack.token)
    try:
        done = browser.ask("which 乌龙茶 should I buy today?")
    finally:
        browser.close()
    assert done["status"] == "completed"
    body = _request_for(llm, "should I buy today")
    assert body is not None
    assert fact in _system_text(body)  # recalled into the request of another chat
    users = [m for m in body["messages"] if m["role"] == "user"]
    assert users[-1]["content"] == "which 乌龙茶 should I buy today?"
    # the stored dialog holds the user's words only: the recall note went with the request, not into SQL
    db = Database(stack.database_url)
    try:
        with db.connect() as conn:
            rows = conn.execute(text("SELECT role, content FROM messages WHERE session_id = :s ORDER BY position"),
                                {"s": browser.session_id}).all()
    finally:
        db.dispose()
    stored = [(role, json.loads(c) if isinstance(c, str) else c) for role, c in rows]  # JSON column, raw
    assert all(fact not in json.dumps(content, ensure_ascii=False) for _role, content in stored)
    assert [c for role, c in stored if role == "user"] == ["which 乌龙茶 should I buy today?"]
    assert [role for role, _c in stored] == ["system", "user", "assistant"]  # the agent prompt, no recall note

    # another user of another channel asks the same: nothing of the owner's memory reaches their request
    _submit_as(stack, "telegram", "tg-chat-9", "someone-else", "which 乌龙茶 should I buy for them?")
    other = wait_for(lambda: _request_for(llm, "should I buy for them"), 60, "the other user's turn never ran")
    assert fact not in json.dumps(other, ensure_ascii=False)
    assert "Known about this user" not in _system_text(other)


def _submit_as(stack: Stack, channel: str, chat_id: str, sender: str, text_: str) -> None:
    """Record input as a channel adapter would; the stack's sweeper hands it to its worker."""

    class _NoQueue:
        def enqueue_turn(self, session_id: str) -> None:
            pass  # the sweeper enqueues sessions with pending input

    db = Database(stack.database_url)
    rt = Runtime(config=Config(home=stack.home), plugins=build_plugins(Config(home=stack.home), discover=False), db=db, redis=stack.redis(), queue=_NoQueue())
    try:
        reply = Gateway(rt).accept(InboundMessage(channel, chat_id, sender, text_))
        assert reply.kind == "accepted", reply
    finally:
        rt.close()


def test_memories_web_api(stack: Stack) -> None:
    db = Database(stack.database_url)
    try:
        store = MemoryStore(db)
        saved = store.put("telegram:web-api", "prefs", "colour", "likes teal", importance=0.4,
                          source=MemorySource(session_id="telegram:c:d", channel="telegram", chat_id="c"))
    finally:
        db.dispose()
    http = httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {stack.token}"}, timeout=10)
    try:
        assert HTTP.get(stack.http + "/api/memories", timeout=10).status_code == 401  # the pairing guard
        scopes = http.get("/api/memories/scopes").json()["scopes"]
        assert {"scope_key": "telegram:web-api", "count": 1} in scopes
        found = http.get("/api/memories", params={"scope_key": "telegram:web-api", "q": "teal"}).json()
        assert [m["memory_key"] for m in found["memories"]] == ["colour"]
        assert http.get("/api/memories", params={"scope_key": "telegram:web-api", "namespace": "x"}).json()[
            "memories"] == []
        one = http.get(f"/api/memories/{saved.id}").json()
        assert one["source"]["session_id"] == "telegram:c:d" and one["content"] == "likes teal"
        edited = http.put(f"/api/memories/{saved.id}", json={"content": "likes navy", "importance": 0.6})
        assert edited.status_code == 200 and edited.json()["content"] == "likes navy"
        assert edited.json()["source"]["source_type"] == "web"
        assert http.put(f"/api/memories/{saved.id}", json={"content": "x" * 100_000}).status_code == 400
        assert http.put(f"/api/memories/{saved.id}", json={"importance": "NaN"}).status_code == 400
        assert http.put(f"/api/memories/{saved.id}", json=["not", "an object"]).status_code == 400
        assert http.get("/api/memories", params={"scope_key": "telegram:web-api", "since": "soon"}).status_code == 400
        assert http.get("/api/memories", params={"q": "teal"}).status_code == 400  # a scope is required
        assert http.get("/api/memories/999999999").status_code == 404
        assert http.get("/api/memories/abc").status_code == 404
        assert http.delete(f"/api/memories/{saved.id}").status_code == 200
        assert http.get(f"/api/memories/{saved.id}").status_code == 404
    finally:
        http.close()


def test_knowledge_web_api(stack: Stack) -> None:
    doc = stack.home / "knowledge" / "runbook" / "content.md"
    doc.parent.mkdir(parents=True, exist_ok=True)
    doc.write_text("# Runbook\n\nRestart the worker with systemctl restart picobot-worker.\n", encoding="utf-8")
    http = httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {stack.token}"}, timeout=10)
    try:
        listed = http.get("/api/knowledge").json()["documents"]
        assert {"name": "runbook", "source": "home", "title": "Runbook"}.items() <= next(
            d for d in listed if d["name"] == "runbook").items()
        hits = http.get("/api/knowledge", params={"q": "restart worker"}).json()["documents"]
        assert hits[0]["name"] == "runbook" and "systemctl" in hits[0]["snippet"]
        one = http.get("/api/knowledge/runbook").json()
        assert "systemctl restart" in one["content"]
        assert http.get("/api/knowledge/nope").status_code == 404
        assert http.get("/api/knowledge/..%2F..%2Fetc").status_code in (400, 404)
    finally:
        http.close()
