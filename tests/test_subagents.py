"""Sub-agents: definitions and their files, the `task` tool's arguments, and runs through real worker
processes against the fake LLM — foreground and background, limits, /stop, a killed worker.

The fake LLM answers by the last user text, and a sub-agent's first (and only) user message is
"Task: <description>\\n\\n<prompt>", so each test scripts the parent and its children by distinct words.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import sqlalchemy
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.agent.snapshot import TurnController
from picobot.config.schema import Config
from picobot.domain.messages import ToolCall
from picobot.app import App as Runtime, build_plugins
from picobot.runtime.services import connect_redis
from picobot.storage.db import Database
from picobot.subagents.catalog import SubagentCatalog
from picobot.subagents.definitions import render
from picobot.subagents.tool import MAX_PROMPT_CHARS, TaskTool
from picobot.tools.base import ToolContext
from picobot.tools.registry import ToolRegistry
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for
from tests.http_client import HTTP

# --- definitions and the catalog (no processes) ----------------------------------------


def put(root: Path, folder: str, text: str) -> Path:
    path = root / folder / "SUBAGENT.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


GOOD = "---\ndescription: {d}\nprompt_template: 'Review: {{{{description}}}} / {{{{prompt}}}}'\n---\nBody {d}.\n"


def test_custom_definitions_load_in_source_order_and_bad_files_are_skipped_by_name(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home, ws = tmp_path / "home", tmp_path / "ws"
    put(home / "subagents", "reviewer", GOOD.format(d="user one"))
    put(ws / ".picobot" / "subagents", "reviewer", GOOD.format(d="project one"))
    put(home / "subagents", "solo", GOOD.format(d="solo"))
    bad = {
        "nodesc": "---\nprompt_template: x\n---\n",
        "notemplate": "---\ndescription: d\n---\n",
        "broken": "---\ndescription: [unclosed\n---\n",
        "unclosed": "---\ndescription: d\n",
        "general": GOOD.format(d="takes a built-in name"),
        "nan": "---\ndescription: d\nprompt_template: t\nmax_execution_secs: .nan\n---\n",
        "booltime": "---\ndescription: d\nprompt_template: t\nmax_execution_secs: true\n---\n",
        "badtools": "---\ndescription: d\nprompt_template: t\nallowed_tools: bash\n---\n",
        "deep": "---\ndescription: " + "[" * 5000 + "]" * 5000 + "\nprompt_template: t\n---\n",
        "huge": "---\ndescription: d\nprompt_template: t\n---\n" + "x" * 70_000,
    }
    for name, text in bad.items():
        put(home / "subagents", name, text)
    caplog.set_level(logging.WARNING, logger="picobot.subagents")
    catalog = SubagentCatalog(home, ws, ["user", "project"])
    defs = catalog.all()
    assert set(defs) == {"general", "explore", "reviewer", "solo"}
    assert defs["reviewer"].description == "project one" and defs["reviewer"].source == "project"
    assert defs["general"].source == "builtin"
    warned = [r.getMessage() for r in caplog.records]
    for name in bad:
        assert sum(f"/{name}/SUBAGENT.md" in m for m in warned) == 1, (name, warned)
    catalog.all()  # unchanged files: no new warnings
    assert len(caplog.records) == len(warned)
    assert SubagentCatalog(home, ws, ["project", "user"]).get("reviewer").description == "user one"  # type: ignore[union-attr]
    assert SubagentCatalog(home, ws, []).all().keys() == {"general", "explore"}


def test_template_is_filled_once_and_body_appended() -> None:
    assert render("a {{description}} b {{ prompt }}", "{{prompt}}", "P") == "a {{prompt}} b P"


# --- the tool's arguments (in process: no turn, no model) --------------------------------


@pytest.fixture
def runtime(tmp_path: Path) -> Iterator[Runtime]:
    class NoQueue:
        def enqueue_turn(self, session_id: str) -> None:
            pass

    cfg = Config.model_validate({"home": str(tmp_path / "home")})
    db = Database(f"sqlite:///{tmp_path / 'db.sqlite'}")
    rt = Runtime(config=cfg, plugins=build_plugins(cfg, discover=False), db=db, redis=connect_redis("redis://127.0.0.1:1/0"), queue=NoQueue())  # never used
    yield rt
    db.dispose()


def _ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(session_id="s", channel="c", chat_id="x", sender_id="u", turn_id="t", workspace=tmp_path)


def _call(registry: ToolRegistry, args: Any, ctx: ToolContext) -> Any:
    raw = args if isinstance(args, str) else json.dumps(args)
    return registry.execute(ToolCall("1", "task", raw), ctx, 20_000)


def test_hostile_arguments_get_errors_that_say_what_to_fix(runtime: Runtime, tmp_path: Path) -> None:
    registry = ToolRegistry()
    registry.register(TaskTool(runtime))
    ctx = _ctx(tmp_path)
    cases = {
        "empty prompt": ({"description": "d", "prompt": "   "}, "`prompt` is missing or empty"),
        "no description": ({"prompt": "p"}, "`description` is missing or empty"),
        "huge prompt": ({"description": "d", "prompt": "x" * (MAX_PROMPT_CHARS + 1)}, "the limit is 50000"),
        "wrong type": ({"description": "d", "prompt": ["p"]}, "$.prompt"),
        "bool as string": ({"description": "d", "prompt": "p", "background": "yes"}, "$.background"),
        "unknown key": ({"description": "d", "prompt": "p", "depth": 9}, "depth"),
        "bad action": ({"action": "explode"}, "$.action"),
        "bad run id": ({"action": "get", "run_id": "../../etc"}, "Give `run_id`"),
        "not an object": ("[1, 2]", "must be a JSON object"),
        "deep nesting": ('{"prompt": ' + "[" * 100_000 + "]" * 100_000 + "}", "not valid JSON"),
        "outside a turn": ({"description": "d\ud800", "prompt": "p\udfff"}, "only inside an agent's turn"),
    }
    for name, (args, expected) in cases.items():
        result = _call(registry, args, ctx)
        assert result.is_error and expected in result.content, (name, result.content)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["description", "prompt", "subagent_type", "background", "action", "run_id"]),
                       st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=50),
                                 st.lists(st.text(max_size=5), max_size=3))))
def test_any_arguments_give_a_result_never_an_exception(runtime: Runtime, tmp_path: Path, args: dict) -> None:
    registry = ToolRegistry()
    registry.register(TaskTool(runtime))
    if args.get("action") in ("get", "get_result", "cancel", "list"):
        args["action"] = "get"  # list would read the (empty) database; get stops at the run id check
    result = _call(registry, args, _ctx(tmp_path))
    assert result.is_error and result.content


def test_disabled_subagents_remove_the_tool(tmp_path: Path) -> None:
    for enabled in (True, False):
        cfg = Config.model_validate({"home": str(tmp_path / "home"), "subagents": {"enabled": enabled}})
        rt = Runtime(config=cfg, plugins=build_plugins(cfg, discover=False), db=Database(f"sqlite:///{tmp_path / 'db.sqlite'}"),
                     redis=connect_redis("redis://127.0.0.1:1/0"), queue=None)  # type: ignore[arg-type]
        try:
            assert ("task" in rt.tools()) is enabled
        finally:
            rt.close()


def test_limits_are_validated() -> None:
    for bad in ({"max_depth": 0}, {"max_depth": True}, {"timeout_secs": float("nan")}, {"max_iterations": "lots"},
                {"max_children_per_turn": 0}):
        with pytest.raises(ValueError):
            Config.model_validate({"subagents": bad})


def test_nested_block_follows_the_child() -> None:
    parent = TurnController("s", "t")
    parent.subagent_started("r1", {"status": "running", "subagent_type": "general"})
    rev = parent.revision
    parent.subagent_progress("r1", [{"type": "text", "text": "hi"}])
    parent.subagent_progress("nope", status="completed")  # another run's news changes nothing
    parent.subagent_progress("r1", status="completed")
    block = parent.snapshot()["blocks"][-1]
    assert block == {"type": "subagent", "run_id": "r1", "status": "completed", "subagent_type": "general",
                     "blocks": [{"type": "text", "text": "hi"}]}
    assert parent.revision == rev + 2


# --- through real processes --------------------------------------------------------------

POOL = 2  # worker pool threads: fewer than the sub-agents some tests run at once


@pytest.fixture(scope="module")
def sub_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("subagents")
    cfg = base_config(fake_llm.url, 0)
    cfg["subagents"] = {"max_iterations": 3, "max_children_per_turn": 4}
    s = Stack(tmp, fake_llm.url, config=cfg)
    cfg["gateway"]["port"] = s.port
    (s.home / "config.json").write_text(json.dumps(cfg))
    try:
        s.start_web(wait=False)  # started together, then waited for
        s.start_worker("w1", concurrency=POOL, wait=False)
        s.wait_web()
        s.wait_workers("w1")
        s.start_beat()
        yield s
    finally:
        s.stop()


def runs(stack: Stack, where: str = "1=1") -> list[dict[str, Any]]:
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            rows = c.exec_driver_sql(f"SELECT * FROM agent_runs WHERE {where} ORDER BY created_at").mappings().all()
            return [dict(r) for r in rows]
    finally:
        eng.dispose()


def sql(stack: Stack, query: str, *params: Any) -> list[Any]:
    eng = sqlalchemy.create_engine(stack.database_url)
    try:
        with eng.connect() as c:
            return list(c.exec_driver_sql(query, params).all())
    finally:
        eng.dispose()


def task(description: str, prompt: str, **more: Any) -> dict[str, Any]:
    return {"name": "task", "arguments": {"description": description, "prompt": prompt, **more}}


def _last_user(body: dict[str, Any]) -> int:
    return max(i for i, m in enumerate(body["messages"]) if m["role"] == "user")


def requests_matching(llm, text: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The requests whose last user message holds `text`, oldest first."""
    reqs = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    bodies = [r["body"] for r in reqs if r["path"].endswith("/chat/completions")]
    return [b for b in bodies if text in json.dumps(b["messages"][_last_user(b)]["content"])]


def tool_names(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def tool_results(llm, parent_word: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The tool results of the latest turn started by `parent_word`, as its model saw them last."""
    last = requests_matching(llm, parent_word)[-1]
    return [m["content"] for m in last["messages"][_last_user(last):] if m["role"] == "tool"]


def test_foreground_general_run_streams_a_nested_block_and_is_recorded(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "alpha-parent", {"tool_calls": [task("count files", "alpha-child: count them")]},
             {"content": "alpha final"})
    add_rule(llm, "alpha-child", {"content": "alpha child says 7", "chunk_delay_ms": 20})
    c = sub_stack.client()
    done = c.ask("alpha-parent please")
    assert done["status"] == "completed" and done["final_text"] == "alpha final", done
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["status"] == "completed" and run["result"] == "alpha child says 7" and run["depth"] == 1
    assert run["subagent_type"] == "general" and not run["background"] and run["turn_id"] == done["turn_id"]
    assert json.loads(run["definition"])["run"]["task_text"] == "Task: count files\n\nalpha-child: count them"
    assert "alpha child says 7" in tool_results(llm, "alpha-parent")[0]
    nested = [b for f in c.frames if f["type"] == "turn_updated" for b in f["blocks"] if b["type"] == "subagent"]
    assert nested and nested[-1]["run_id"] == run["id"] and nested[-1]["status"] == "completed"
    assert any(b["text"] == "alpha child says 7" for b in nested[-1]["blocks"] if b["type"] == "text")
    assert any(0 < len(n["blocks"]) and n["status"] == "running" for n in nested), "live progress was streamed"
    child = requests_matching(llm, "alpha-child")[0]
    assert "task" in tool_names(child) and "write" in tool_names(child)  # general: the parent's tools
    assert "alpha-parent" not in json.dumps(child["messages"]), "a sub-agent has its own history"


def test_api_lists_recent_runs_read_only(sub_stack: Stack) -> None:
    auth = {"Authorization": f"Bearer {sub_stack.token}"}
    listed = HTTP.get(sub_stack.http + "/api/subagents?limit=5", headers=auth).json()["runs"]
    assert listed and listed[0]["subagent_type"] and "result" not in listed[0] and "prompt" not in listed[0]
    assert listed == sorted(listed, key=lambda r: -r["created_at"])
    for bad in ("0", "201", "x", "-1", "1e3"):
        assert HTTP.get(sub_stack.http + f"/api/subagents?limit={bad}", headers=auth).status_code == 400
    assert HTTP.get(sub_stack.http + "/api/subagents").status_code == 401


def test_usage_of_runs_rolls_up_into_the_session(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "usage-parent", {"tool_calls": [task("u", "usage-child go")], "usage": {"input_tokens": 10, "output_tokens": 1}},
             {"content": "ok", "usage": {"input_tokens": 20, "output_tokens": 2}})
    add_rule(llm, "usage-child", {"content": "done", "usage": {"input_tokens": 5000, "output_tokens": 300}})
    c = sub_stack.client()
    assert c.ask("usage-parent")["status"] == "completed"
    [(inp, out)] = sql(sub_stack, "SELECT input_tokens, output_tokens FROM sessions WHERE id = ?", c.session_id)
    assert (inp, out) == (5030, 303)
    assert runs(sub_stack, f"session_id = '{c.session_id}'")[0]["input_tokens"] == 5000


def test_explore_has_only_read_only_tools(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "explore-parent", {"tool_calls": [task("look", "explore-child look around", subagent_type="explore")]},
             {"content": "explored"})
    add_rule(llm, "explore-child", {"tool_calls": [{"name": "write", "arguments": {"path": "x.txt", "content": "no"}}]},
             {"content": "could not write"})
    c = sub_stack.client()
    assert c.ask("explore-parent")["status"] == "completed"
    first, second = requests_matching(llm, "explore-child")[:2]
    names = tool_names(first)
    assert "read" in names and not names & {"write", "edit", "bash", "task", "http_request"}, names
    assert "Unknown tool 'write'" in [m for m in second["messages"] if m["role"] == "tool"][0]["content"]
    assert "read-only" in first["messages"][0]["content"]


def test_custom_subagent_fills_its_template_and_narrows_tools(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    put(sub_stack.home / "subagents", "auditor", (
        "---\nname: auditor\ndescription: audits things\n"
        "prompt_template: 'You audit. Subject: {{description}}. Orders: {{prompt}}'\n"
        "allowed_tools: [read, calculator, task, not_a_tool]\nmax_execution_secs: 30\n---\nCheck SQL injection.\n"))
    add_rule(llm, "custom-parent", {"tool_calls": [task("the login", "custom-child audit it", subagent_type="auditor")]},
             {"content": "audited"})
    add_rule(llm, "custom-child", {"content": "no findings"})
    c = sub_stack.client()
    assert c.ask("custom-parent")["status"] == "completed"
    child = requests_matching(llm, "custom-child")[0]
    system = child["messages"][0]["content"]
    assert "You audit. Subject: the login. Orders: custom-child audit it" in system
    assert system.rstrip().endswith("Check SQL injection.")
    assert tool_names(child) == {"read", "calculator", "task"}
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    snapshot = json.loads(run["definition"])
    assert run["subagent_type"] == "auditor" and snapshot["source"] == "user" and snapshot["run"]["timeout_secs"] == 30


def test_unknown_type_falls_back_to_general_and_says_so(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "fallback-parent", {"tool_calls": [task("x", "fallback-child go", subagent_type="wizard")]},
             {"content": "ok"})
    add_rule(llm, "fallback-child", {"content": "did it"})
    c = sub_stack.client()
    assert c.ask("fallback-parent")["status"] == "completed"
    [result] = tool_results(llm, "fallback-parent")
    assert "did it" in result and "no sub-agent type 'wizard'" in result and "general" in result
    assert runs(sub_stack, f"session_id = '{c.session_id}'")[0]["subagent_type"] == "general"


def test_parallel_calls_run_at_once_and_return_in_request_order(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "pair-parent", {"tool_calls": [task("slow", "pair-slow go"), task("fast", "pair-fast go")]},
             {"content": "both"})
    add_rule(llm, "pair-slow", {"content": "SLOW RESULT", "delay_ms": 1500})
    add_rule(llm, "pair-fast", {"content": "FAST RESULT"})
    c = sub_stack.client()
    assert c.ask("pair-parent")["status"] == "completed"
    slow, fast = tool_results(llm, "pair-parent")
    assert "SLOW RESULT" in slow and "FAST RESULT" in fast
    by_desc = {r["description"]: r for r in runs(sub_stack, f"session_id = '{c.session_id}'")}
    assert by_desc["fast"]["finished_at"] < by_desc["slow"]["finished_at"], "they ran at once, not one by one"


def test_more_foreground_children_than_pool_threads_all_finish(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    # two dialogs hold both pool threads with their turns; each turn waits for three children at once
    for who in ("pool-a", "pool-b"):
        add_rule(llm, f"{who}-parent", {"tool_calls": [task(f"{who} {i}", f"{who}-child-{i}") for i in range(3)]},
                 {"content": f"{who} all done"})
        for i in range(3):
            add_rule(llm, f"{who}-child-{i}", {"content": f"{who} part {i}", "delay_ms": 800})
    clients = [sub_stack.client(), sub_stack.client()]
    accepted = [cl.say(f"{who}-parent") for cl, who in zip(clients, ("pool-a", "pool-b"))]
    finals = [cl.wait_completed(acc["seq"], timeout=60) for cl, acc in zip(clients, accepted)]
    assert [f["final_text"] for f in finals] == ["pool-a all done", "pool-b all done"], finals
    for cl in clients:
        assert [r["status"] for r in runs(sub_stack, f"session_id = '{cl.session_id}'")] == ["completed"] * 3


def test_children_per_turn_are_limited(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "many-parent", {"tool_calls": [task(f"m{i}", f"many-child {i}") for i in range(5)]},
             {"content": "many done"})
    add_rule(llm, "many-child", {"content": "ok"}, repeat=True)
    c = sub_stack.client()
    assert c.ask("many-parent")["status"] == "completed"
    results = tool_results(llm, "many-parent")
    refused = [r for r in results if "max_children_per_turn = 4" in r]
    assert len(results) == 5 and len(refused) == 1, results
    assert len(runs(sub_stack, f"session_id = '{c.session_id}'")) == 4


def test_a_looping_child_stops_at_max_iterations_and_the_parent_is_told(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "loop-parent", {"tool_calls": [task("loop", "loop-child spin")]}, {"content": "gave up"})
    add_rule(llm, "loop-child", {"tool_calls": [{"name": "calculator", "arguments": {"expression": "1+1"}}]},
             repeat=True)
    c = sub_stack.client()
    assert c.ask("loop-parent")["final_text"] == "gave up"
    [result] = tool_results(llm, "loop-parent")
    assert "failed" in result and "subagents.max_iterations" in result and "3 rounds" in result, result
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["status"] == "failed" and "max_iterations" in run["error"]


def test_depth_limit_removes_task_from_the_deepest_runs(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "deep-parent", {"tool_calls": [task("d1", "deep-one go deeper")]}, {"content": "deep done"})
    add_rule(llm, "deep-one", {"tool_calls": [task("d2", "deep-two bottom")]}, {"content": "level one done"})
    add_rule(llm, "deep-two", {"content": "bottom reached"})
    c = sub_stack.client()
    assert c.ask("deep-parent")["final_text"] == "deep done"
    bottom = requests_matching(llm, "deep-two")[0]
    assert "task" not in tool_names(bottom)
    assert "depth limit (subagents.max_depth = 2)" in bottom["messages"][0]["content"]
    one, two = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert (one["depth"], two["depth"], two["parent_run_id"]) == (1, 2, one["id"])
    assert one["status"] == two["status"] == "completed"


def test_hostile_text_in_a_real_run_is_stored_repaired(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    raw = '{"description": "bad \\ud800 title", "prompt": "hostile-child \\udfff\\u0000 go"}'
    add_rule(llm, "hostile-parent", {"tool_calls": [{"name": "task", "arguments": raw}]}, {"content": "fine"})
    add_rule(llm, "hostile-child", {"content": "survived"})
    c = sub_stack.client()
    assert c.ask("hostile-parent")["final_text"] == "fine"
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["status"] == "completed" and run["description"] == "bad \ufffd title"
    assert run["prompt"] == "hostile-child \ufffd\ufffd go"


def _continuation(c, word: str, timeout: float = 60) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return c.recv_until(lambda f: f["type"] == "turn_completed" and word in f.get("final_text", ""), timeout)


def test_background_returns_a_run_id_then_a_continuation_turn_reports(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "bg-parent", {"tool_calls": [task("research", "bg-child dig", background=True)]},
             {"content": "started it"})
    add_rule(llm, "bg-child", {"content": "bg-found treasure", "delay_ms": 500})
    add_rule(llm, "bg-found treasure", {"content": "REPORTED: treasure"})
    c = sub_stack.client()
    first = c.ask("bg-parent")
    assert first["final_text"] == "started it"
    [started] = tool_results(llm, "bg-parent")
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["id"] in started and "Started background run" in started and run["background"]
    report = _continuation(c, "REPORTED: treasure")
    assert report["status"] == "completed"
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["status"] == "completed" and run["result"] == "bg-found treasure"
    [(sender, pmid, mode, content)] = sql(
        sub_stack, "SELECT sender_id, platform_message_id, mode, content FROM inbound WHERE session_id = ? "
        "AND platform_message_id IS NOT NULL", c.session_id)
    assert pmid == f"subagent:{run['id']}" and mode == "steer"
    assert json.loads(content).startswith("[Sub-agent result: delivered by PicoBot, not written by the user]")


def test_manage_actions_get_list_get_result_cancel(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "mg-start", {"tool_calls": [task("long one", "mg-long wait", background=True),
                                              task("short one", "mg-short quick", background=True)]},
             {"content": "two started"})
    add_rule(llm, "mg-long", {"content": "never", "delay_ms": 30_000})
    # the short run answers after the parent's turn has ended: a result that arrives while that turn still
    # runs steers into it (its answer would be "short reported"), which a loaded machine made happen
    add_rule(llm, "mg-short", {"content": "mg-short result", "delay_ms": 2000})
    add_rule(llm, "mg-short result", {"content": "short reported"})
    c = sub_stack.client()
    assert c.ask("mg-start")["final_text"] == "two started"
    _continuation(c, "short reported")
    by_desc = {r["description"]: r for r in runs(sub_stack, f"session_id = '{c.session_id}'")}
    long_id, short_id = by_desc["long one"]["id"], by_desc["short one"]["id"]
    wait_for(lambda: runs(sub_stack, f"id = '{long_id}'")[0]["status"] == "running", 20, "long run started")
    calls = [{"name": "task", "arguments": {"action": "list"}},
             {"name": "task", "arguments": {"action": "get", "run_id": long_id}},
             {"name": "task", "arguments": {"action": "get_result", "run_id": short_id}},
             {"name": "task", "arguments": {"action": "get_result", "run_id": long_id}},
             {"name": "task", "arguments": {"action": "cancel", "run_id": long_id}},
             {"name": "task", "arguments": {"action": "get", "run_id": "0" * 32}}]
    add_rule(llm, "mg-manage", {"tool_calls": calls}, {"content": "managed"})
    assert c.ask("mg-manage")["final_text"] == "managed"
    listed, got, result, pending, cancelled, missing = tool_results(llm, "mg-manage")
    assert long_id in listed and short_id in listed and "background" in listed
    assert "running" in got and "long one" in got
    assert result == "mg-short result"
    assert "has no result yet" in pending
    assert "being cancelled" in cancelled
    assert "no run" in missing
    wait_for(lambda: runs(sub_stack, f"id = '{long_id}'")[0]["status"] == "cancelled", 10, "the run was cancelled")
    time.sleep(1.5)  # a cancelled run reports nothing: no continuation turn for it
    assert sql(sub_stack, "SELECT count(*) FROM inbound WHERE platform_message_id = ?", f"subagent:{long_id}") == [(0,)]


def test_stop_cancels_the_whole_tree(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "tree-root-bg", {"tool_calls": [task("bg", "tree-slowbg wait", background=True)]}, {"content": "bg on"})
    add_rule(llm, "tree-slowbg", {"content": "late", "delay_ms": 30_000})
    add_rule(llm, "tree-root-fg", {"tool_calls": [task("fg", "tree-kid go")]}, {"content": "never"})
    add_rule(llm, "tree-kid", {"tool_calls": [task("grand", "tree-grand go")]}, {"content": "never"})
    add_rule(llm, "tree-grand", {"content": "late", "delay_ms": 30_000})
    c = sub_stack.client()
    assert c.ask("tree-root-bg")["final_text"] == "bg on"
    acc = c.say("tree-root-fg")
    wait_for(lambda: len(runs(sub_stack, f"session_id = '{c.session_id}' AND status = 'running'")) == 3, 20,
             "the background run, the child and the grandchild all run")
    stopped_at = time.monotonic()
    assert c.command("/stop")["type"] == "command"
    done = c.wait_completed(acc["seq"], timeout=20)
    assert done["status"] == "cancelled"
    wait_for(lambda: all(r["status"] == "cancelled" for r in runs(sub_stack, f"session_id = '{c.session_id}'")),
             10, "every run of the tree was cancelled")
    assert time.monotonic() - stopped_at < 8
    time.sleep(1.5)
    assert sql(sub_stack, "SELECT count(*) FROM inbound WHERE session_id = ? AND platform_message_id LIKE 'subagent:%'",
               c.session_id) == [(0,)]


def test_worker_killed_during_a_background_run_interrupts_it_and_tells_the_parent(sub_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "kill-parent", {"tool_calls": [task("doomed", "kill-child wait", background=True)]},
             {"content": "kill started"})
    add_rule(llm, "kill-child", {"content": "never", "delay_ms": 60_000})
    add_rule(llm, "(general: doomed) interrupted", {"content": "REPORTED: the run was interrupted"})
    c = sub_stack.client()
    assert c.ask("kill-parent")["final_text"] == "kill started"
    wait_for(lambda: runs(sub_stack, f"session_id = '{c.session_id}'")[0]["status"] == "running", 20, "run started")
    sub_stack.kill("w1")
    sub_stack.start_worker("w1", concurrency=POOL)
    report = _continuation(c, "REPORTED: the run was interrupted", timeout=90)
    assert report["status"] == "completed"
    [run] = runs(sub_stack, f"session_id = '{c.session_id}'")
    assert run["status"] == "interrupted" and "worker" in run["error"]
