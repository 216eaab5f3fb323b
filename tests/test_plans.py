"""Session plans (`todo`, /plan, the plan's note, `session_plan`/`plan_updated`, `task` plan_item_id).

In process: a runtime on SQLite or PostgreSQL, a private Redis and the fake LLM; turns run through the
gateway and `drain_session`, the fake LLM scripts the tool calls and records what the model was sent.
Over the wire: a real stack (web, worker) and websocket clients.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot import plans
from picobot.app import App as Runtime, build_runtime
from picobot.config.loader import load_config
from picobot.errors import ToolError
from picobot.gateway.inbound import InboundMessage
from picobot.gateway.intake import Gateway
from picobot.plans.tool import TodoTool
from picobot.runtime.turn_runner import drain_session
from picobot.security.redact import MASK
from picobot.storage import sessions
from picobot.tools.base import ToolContext
from tests.conftest import add_rule
from tests.stack import Stack, WsClient, base_config


class _NoQueue:
    def enqueue_turn(self, session_id: str, queue: str = "turns") -> None:  # the test drains by itself
        pass

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass

    def enqueue_background(self, task: str, args: list[Any]) -> None:
        pass


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, db_url: str,  # type: ignore[no-untyped-def]
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Runtime]:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps(base_config(llm.url, 1)))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-plans")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("DATABASE_URL", db_url)
    monkeypatch.setenv("PICOBOT_WORKSPACE", str(tmp_path / "ws"))
    rt = build_runtime(load_config(), _NoQueue(), migrate=True)
    yield rt
    rt.close()


def dialog(rt: Runtime, chat_id: str | None = None) -> str:
    with rt.db.write() as s:
        return sessions.get_or_create_current(s, "web", chat_id or uuid.uuid4().hex[:10], "default").id


def ctx_for(session_id: str, tmp: Path) -> ToolContext:
    channel, chat_id, _ = session_id.split(":")
    return ToolContext(session_id=session_id, channel=channel, chat_id=chat_id, sender_id="u1", turn_id="t1",
                       workspace=tmp)


def todo(rt: Runtime, session_id: str, tmp: Path, **args: Any) -> str:
    return TodoTool(rt).execute(args, ctx_for(session_id, tmp))


def state(rt: Runtime, session_id: str) -> dict[str, Any] | None:
    found = plans.read(rt, session_id)
    return found.as_dict() if found else None


def items(*texts: str) -> list[dict[str, str]]:
    return [{"text": t} for t in texts]


# ---------------------------------------------------------------- the tool on real SQL


def test_create_update_add_list_clear(runtime: Runtime, tmp_path: Path) -> None:
    sid = dialog(runtime)
    assert todo(runtime, sid, tmp_path, action="list") == "No plan in this dialog."
    out = todo(runtime, sid, tmp_path, action="create", title="  Ship   the\nrelease ", items=items("tests", "docs"))
    assert out.startswith("Plan created.\nPlan: Ship the release (0/2 done)")
    out = todo(runtime, sid, tmp_path, action="update", item_id=1, status="done", note="all green")
    assert "Item 1: done." in out and "1. [x] tests — all green" in out
    assert "Added item 3." in todo(runtime, sid, tmp_path, action="add", items=items("tag it"))
    assert "Added items 4, 5." in todo(runtime, sid, tmp_path, action="add", items=items("announce"), text="rest")
    todo(runtime, sid, tmp_path, action="update", item_id=2, status="blocked")  # no note: kept (empty)
    todo(runtime, sid, tmp_path, action="update", item_id=3.0, status="in_progress")  # an integer to JSON Schema
    assert state(runtime, sid) == {"title": "Ship the release", "items": [
        {"id": 1, "text": "tests", "status": "done", "note": "all green"},
        {"id": 2, "text": "docs", "status": "blocked", "note": ""},
        {"id": 3, "text": "tag it", "status": "in_progress", "note": ""},
        {"id": 4, "text": "announce", "status": "pending", "note": ""},
        {"id": 5, "text": "rest", "status": "pending", "note": ""}]}
    listed = todo(runtime, sid, tmp_path, action="list")
    assert listed.splitlines()[0] == "Plan: Ship the release (1/5 done)" and "2. [!] docs" in listed
    assert todo(runtime, sid, tmp_path, action="clear") == "Plan cleared."
    assert state(runtime, sid) is None
    assert todo(runtime, sid, tmp_path, action="clear") == "There was no plan."
    todo(runtime, sid, tmp_path, action="create", title="Again", items=items("one"))  # a new plan after a clear
    assert state(runtime, sid)["items"] == [{"id": 1, "text": "one", "status": "pending", "note": ""}]


def test_secrets_in_plan_text_are_masked_before_they_are_stored(runtime: Runtime, tmp_path: Path) -> None:
    sid = dialog(runtime)
    ctx = ctx_for(sid, tmp_path)
    ctx.secrets = frozenset({"hunter2-plan-secret"})
    TodoTool(runtime).execute({"action": "create", "title": "Use hunter2-plan-secret",
                               "items": items("login with hunter2-plan-secret")}, ctx)
    TodoTool(runtime).execute({"action": "update", "item_id": 1, "status": "done",
                               "note": "key sk-abcdefghijklmnopqrstuvwxyz123456"}, ctx)
    stored = json.dumps(state(runtime, sid))
    assert "hunter2-plan-secret" not in stored and "sk-abcdefghijklmnopqrstuvwxyz123456" not in stored
    assert stored.count(MASK) == 3


def test_one_plan_per_dialog(runtime: Runtime, tmp_path: Path) -> None:
    sid, other = dialog(runtime), dialog(runtime)
    todo(runtime, sid, tmp_path, action="create", title="First", items=items("a"))
    before = state(runtime, sid)
    with pytest.raises(ToolError, match="has a plan already: update or add to its items, or clear it first"):
        todo(runtime, sid, tmp_path, action="create", title="Second", items=items("b"))
    assert state(runtime, sid) == before
    todo(runtime, other, tmp_path, action="create", title="Elsewhere", items=items("c"))  # another dialog's own
    assert state(runtime, other)["title"] == "Elsewhere" and state(runtime, sid) == before


@pytest.mark.parametrize("args, error", [
    ({"action": "create", "title": "t", "items": items(*["x"] * 51)}, "51 given; a plan has at most 50"),
    ({"action": "create", "title": "t", "items": items("x" * 501)}, r"items\[0\].text: 501 characters; the limit is 500"),
    ({"action": "create", "title": "t" * 201, "items": items("x")}, "title: 201 characters; the limit is 200"),
    ({"action": "create", "title": "t", "items": []}, "give at least one item"),
    ({"action": "create", "items": items("x")}, "title: give it as text"),
    ({"action": "create", "title": "t", "items": ["x"]}, r"items\[0\]: an object"),
    ({"action": "create", "title": "t", "items": items("ok\ud800")}, "lone surrogate or NUL"),
    ({"action": "update", "item_id": 9, "status": "done"}, "the plan has no item 9"),
    ({"action": "update", "item_id": 1, "status": "finished"}, "status: one of pending, in_progress, done, blocked"),
    ({"action": "update", "item_id": True, "status": "done"}, "item_id: the item's number"),
    ({"action": "update", "item_id": 1, "status": "done", "note": "n" * 501}, "note: 501 characters"),
    ({"action": "add", "items": items(*["x"] * 49)}, "the plan has 2 items and may have 50"),
    ({"action": "remove"}, "action: one of create, update, add, list, clear"),
    ({}, "action: one of"),
])
def test_limits_and_bad_arguments_are_refused_and_change_nothing(runtime: Runtime, tmp_path: Path,
                                                                  args: dict[str, Any], error: str) -> None:
    sid = dialog(runtime)
    todo(runtime, sid, tmp_path, action="create", title="Plan", items=items("a", "b"))
    before = state(runtime, sid)
    with pytest.raises(ToolError, match=error):
        todo(runtime, sid, tmp_path, **args)
    assert state(runtime, sid) == before


def test_changes_without_a_plan_say_create_first(runtime: Runtime, tmp_path: Path) -> None:
    sid = dialog(runtime)
    for args in ({"action": "add", "items": items("a")}, {"action": "update", "item_id": 1, "status": "done"}):
        with pytest.raises(ToolError, match="No plan in this dialog: create one first"):
            todo(runtime, sid, tmp_path, **args)
    assert state(runtime, sid) is None


_hostile = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2 ** 80), max_value=2 ** 80)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=30)
    | st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=3)
    | st.just("x" * 10_000) | st.sampled_from(["create", "update", "add", "list", "clear", "done", "pending"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.sampled_from(["text", "id", "x"]), inner, max_size=3),
    max_leaves=12)
_args = st.fixed_dictionaries({}, optional={
    "action": st.sampled_from(["create", "update", "add", "list", "clear"]) | _hostile,
    "title": _hostile, "items": _hostile, "text": _hostile, "item_id": _hostile, "status": _hostile, "note": _hostile})


def test_hostile_arguments_get_a_clear_tool_error_and_change_nothing(runtime: Runtime, tmp_path: Path) -> None:
    sid = dialog(runtime)
    todo(runtime, sid, tmp_path, action="create", title="Plan", items=items("a", "b"))

    @settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
    @given(args=_args)
    def check(args: dict[str, Any]) -> None:
        before = state(runtime, sid)
        try:
            todo(runtime, sid, tmp_path, **args)
        except ToolError as exc:
            assert str(exc).strip() and len(str(exc)) < 300
            assert state(runtime, sid) == before
            return
        after = state(runtime, sid)  # a valid call: whatever it stored is clean and within the limits
        if after is not None:
            json.dumps(after, ensure_ascii=False).encode("utf-8")
            assert len(after["items"]) <= plans.MAX_ITEMS and len(after["title"]) <= plans.MAX_TITLE_CHARS
            assert all(len(i["text"]) <= plans.MAX_TEXT_CHARS and i["status"] in plans.STATUSES for i in after["items"])
        if after is None or not after["items"]:  # cleared: the next examples start from a plan again
            todo(runtime, sid, tmp_path, action="clear")
            todo(runtime, sid, tmp_path, action="create", title="Plan", items=items("a", "b"))

    check()


def test_a_sub_agent_is_not_offered_the_plan(runtime: Runtime) -> None:
    from picobot.subagents.runner import child_tools

    tools = runtime.tools()
    assert "todo" in tools
    assert "todo" not in child_tools(tools, lambda t: True, None)


# ---------------------------------------------------------------- turns, /plan, compaction, sub-agents


def call(name: str, **args: Any) -> dict[str, Any]:
    return {"tool_calls": [{"name": name, "arguments": args}]}


def turn(rt: Runtime, chat_id: str, text: str) -> str:
    reply = Gateway(rt).submit(InboundMessage("web", chat_id, "u1", text))
    assert reply.kind == "accepted", reply
    assert drain_session(rt, reply.session_id) == 1
    return reply.session_id


def bodies(llm, word: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The chat requests whose last user message holds `word`."""
    found = [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")]
    return [b for b in found
            if word in json.dumps([m for m in b["messages"] if m["role"] == "user"][-1:], ensure_ascii=False)]


def test_slash_plan_shows_the_dialog_plan(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    chat = uuid.uuid4().hex[:10]
    gateway = Gateway(runtime)
    assert gateway.submit(InboundMessage("web", chat, "u1", "/plan")).text == "No plan in this dialog."
    add_rule(llm, "plan-cmd", call("todo", action="create", title="Trip", items=items("book", "pack")),
             call("todo", action="update", item_id=1, status="done"), {"content": "planned"})
    sid = turn(runtime, chat, "plan-cmd now")
    reply = gateway.submit(InboundMessage("web", chat, "u1", "/plan"))
    assert reply.text == "Plan: Trip (1/2 done)\n1. [x] book\n2. [ ] pack"
    assert reply.data["session_id"] == sid and reply.data["plan"]["items"][1]["status"] == "pending"
    assert "/plan" in gateway.submit(InboundMessage("web", chat, "u1", "/help")).text


def test_the_plan_summary_reaches_the_model_after_compaction(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    from picobot.memory import compactor

    chat = uuid.uuid4().hex[:10]
    add_rule(llm, "hello-first", {"content": "hi"})
    turn(runtime, chat, "hello-first")
    assert not any("[Plan]" in json.dumps(b["messages"]) for b in bodies(llm, "hello-first"))  # no plan: no note
    add_rule(llm, "cmp-make", call("todo", action="create", title="Report",
                                    items=items("gather data", "write draft")),
             call("todo", action="update", item_id=1, status="done"), {"content": "started"})
    sid = turn(runtime, chat, "cmp-make a plan")
    for n in range(4):
        turn(runtime, chat, f"cmp-more {n}")
    assert compactor.compact_session(runtime, sid, force=True).status == "compacted"
    add_rule(llm, "cmp-after", {"content": "ok"})
    turn(runtime, chat, "cmp-after compaction")
    messages = bodies(llm, "cmp-after")[-1]["messages"]
    assert not any(m.get("tool_calls") for m in messages)  # the todo calls were folded away
    notes = [m["content"] for m in messages if m["role"] == "system" and "[Plan]" in m["content"]]
    assert notes == ["[Plan] Report (1/2 done; todo list shows it)\n2 pending: write draft"]
    assert len(notes[0]) <= plans.SUMMARY_CHARS


def test_task_with_plan_item_id_moves_the_item_with_the_run(runtime: Runtime, llm) -> None:  # type: ignore[no-untyped-def]
    chat = uuid.uuid4().hex[:10]
    add_rule(llm, "deleg-go",
             call("todo", action="create", title="Research", items=items("read papers", "run benchmark")),
             call("task", description="subA-read", prompt="read them", plan_item_id=1),
             call("task", description="subB-bench", prompt="run it", plan_item_id=2),
             call("task", description="subC-none", prompt="x", plan_item_id=7),
             {"content": "delegated"})
    add_rule(llm, "subA-read", {"content": "Three papers read."})
    add_rule(llm, "subB-bench", {"error": {"status": 400, "message": "the bench machine is down"}})
    add_rule(llm, "subC-none", {"content": "nothing to follow"})
    sid = turn(runtime, chat, "deleg-go")
    got = state(runtime, sid)
    assert got["items"][0] == {"id": 1, "text": "read papers", "status": "done",
                               "note": "sub-agent completed: Three papers read."}
    assert got["items"][1]["status"] == "blocked" and got["items"][1]["note"].startswith("sub-agent failed:")
    assert len(got["items"]) == 2  # an unknown item changes nothing
    sub = bodies(llm, "subA-read")[0]
    assert "todo" not in {t["function"]["name"] for t in sub["tools"]}  # sub-agents cannot edit the plan
    main = bodies(llm, "deleg-go")[0]
    assert "todo" in {t["function"]["name"] for t in main["tools"]}


def test_task_refuses_a_bad_plan_item_id(runtime: Runtime, tmp_path: Path) -> None:
    from picobot.subagents.tool import TaskTool

    task, ctx = TaskTool(runtime), ctx_for(dialog(runtime), tmp_path)

    @settings(max_examples=100, deadline=None, suppress_health_check=list(HealthCheck))
    @given(bad=_hostile.filter(lambda v: v is not None and not (
        type(v) in (int, float) and not isinstance(v, bool) and v == v and abs(v) != float("inf")
        and float(v).is_integer() and 1 <= v <= 10_000)))
    def check(bad: Any) -> None:
        with pytest.raises(ToolError, match="plan_item_id"):
            task.execute({"description": "d", "prompt": "p", "plan_item_id": bad}, ctx)

    check()
    with runtime.db.connect() as conn:  # refused before admission: no run was recorded
        assert conn.exec_driver_sql("SELECT count(*) FROM agent_runs").scalar() == 0


def test_tool_json_fits_its_budget(runtime: Runtime) -> None:
    tool = runtime.tools().get("todo")
    sent = {"type": "function", "function": {"name": tool.name, "description": tool.description,
                                             "parameters": tool.parameters}}
    assert len(json.dumps(sent, ensure_ascii=False)) <= 420


# ---------------------------------------------------------------- over the wire


@pytest.fixture(scope="module")
def plans_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    s = Stack(tmp_path_factory.mktemp("plans"), fake_llm.url)
    s.start(workers=1, beat=False)
    yield s
    s.stop()


def test_socket_frames_session_plan_and_plan_updated(plans_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    chat = f"plans-{uuid.uuid4().hex[:8]}"
    first = plans_stack.client(chat)
    dialog_a = first.session_id
    assert first.command("/plan")["text"] == "No plan in this dialog."
    assert not [f for f in first.frames if f["type"] == "session_plan"]  # no plan: no frame
    add_rule(llm, "wire-make", call("todo", action="create", title="Move", items=items("boxes")),
             call("todo", action="update", item_id=1, status="in_progress", note="half"), {"content": "ok"})
    first.ask("wire-make")
    updates = [f for f in first.frames if f["type"] == "plan_updated"]
    assert updates == [
        {"type": "plan_updated", "session_id": dialog_a, "plan": {"title": "Move", "items": [
            {"id": 1, "text": "boxes", "status": "pending", "note": ""}]}},
        {"type": "plan_updated", "session_id": dialog_a, "plan": {"title": "Move", "items": [
            {"id": 1, "text": "boxes", "status": "in_progress", "note": "half"}]}}]
    again = plans_stack.client(chat)  # a new socket gets the plan at once
    assert again.recv_until(lambda f: f["type"] == "session_plan")["plan"]["items"][0]["status"] == "in_progress"

    # a socket of the chat on another dialog hears of the change too (the web UI's unread mark)
    other = plans_stack.client(chat)
    assert other.recv_until(lambda f: f["type"] == "session_plan")["session_id"] == dialog_a
    assert other.command("/new")["data"]["session_id"] != dialog_a  # the chat's current dialog: a new one
    other.recv_until(lambda f: f["type"] == "session")
    assert other.command("/plan")["text"] == "No plan in this dialog."
    assert [f["type"] for f in other.frames].count("session_plan") == 1  # the new dialog has none
    assert first.command(f"/switch {first.ready['session']['dialog_id']}")["data"]["session_id"] == dialog_a
    add_rule(llm, "wire-clear", call("todo", action="clear"), {"content": "cleared"})
    first.ask("wire-clear")
    assert other.recv_until(lambda f: f["type"] == "plan_updated") == {
        "type": "plan_updated", "session_id": dialog_a, "plan": None}
    assert not [f for f in other.frames if f["type"] in ("turn_updated", "turn_completed")]  # only that one
    for c in (first, again, other):
        c.close()


def test_a_background_run_moves_its_item_when_it_ends(plans_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    client = plans_stack.client(f"plans-bg-{uuid.uuid4().hex[:8]}")
    add_rule(llm, "bg-go", call("todo", action="create", title="Survey", items=items("count birds")),
             call("task", description="bgsub-birds", prompt="count them", background=True, plan_item_id=1),
             {"content": "started"})
    add_rule(llm, "bgsub-birds", {"content": "Forty-two birds."})
    client.ask("bg-go")

    def ended(f: dict) -> bool:  # type: ignore[type-arg]
        return f["type"] == "plan_updated" and f["plan"]["items"][0]["status"] == "done"

    # the run can end before its parent turn does: its frame is then among those read while waiting for that
    done = next((f for f in client.frames if ended(f)), None) or client.recv_until(ended)
    assert done["plan"]["items"][0]["note"] == "sub-agent completed: Forty-two birds."
    seen = [f["plan"]["items"][0]["status"] for f in client.frames if f["type"] == "plan_updated"]
    assert seen == ["pending", "in_progress", "done"]
    client.close()
