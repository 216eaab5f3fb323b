"""MCP servers: real servers (our demo server over stdio and streamable HTTP, the published
mcp-server-time), real processes killed and hung, and a real worker calling an MCP tool for the
fake model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.cli.embedded_redis import free_port
from picobot.config.schema import McpServerConfig
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ToolCall
from picobot.errors import ToolArgumentsError, TurnCancelled
from picobot.mcp import McpManager
from picobot.mcp.arguments import MAX_DEPTH, check_arguments
from picobot.mcp.names import MAX_NAME_CHARS, exposed_name, trim_description
from picobot.tools.base import ToolContext
from picobot.tools.registry import ToolRegistry
from scripts.mcp_demo import DOTTED_TOOL_NAME, LONG_TOOL_NAME
from tests.conftest import add_rule
from tests.stack import ROOT, Stack, base_config, wait_for
from tests.http_client import HTTP

DEMO = str(ROOT / "scripts" / "mcp_demo.py")
SETTLE_SECS = 60  # several Python servers start at once on a small machine


def demo(*flags: str, **extra: Any) -> dict[str, Any]:
    return {"command": sys.executable, "args": [DEMO, *flags], **extra}


def manager(servers: dict[str, dict[str, Any]], tmp: Path,
            secrets: frozenset[str] = frozenset()) -> tuple[McpManager, ToolRegistry]:
    registry = ToolRegistry()
    cfgs = {key: McpServerConfig.model_validate(raw) for key, raw in servers.items()}
    return McpManager(cfgs, registry, tmp, secrets).start(), registry


def settled(m: McpManager, key: str, states: tuple[str, ...] = ("connected",)) -> dict[str, Any]:
    def check() -> dict[str, Any] | None:
        s = m.servers[key].status()
        return s if s["state"] in states else None

    return wait_for(check, SETTLE_SECS, f"MCP server {key} never reached {states}: {m.servers[key].status()}")


def ctx(tmp: Path, cancel: CancelToken | None = None, secrets: frozenset[str] = frozenset()) -> ToolContext:
    return ToolContext("s", "web", "c", "u", "t", tmp, cancel=cancel or CancelToken(), secrets=secrets)


def run(registry: ToolRegistry, name: str, args: Any, context: ToolContext, max_chars: int = 20000):  # type: ignore[no-untyped-def]
    raw = args if isinstance(args, str) else json.dumps(args)
    return registry.execute(ToolCall("c1", name, raw), context, max_chars)


# --- names and arguments: pure rules -----------------------------------------------------


def test_names_are_prefixed_and_sanitised() -> None:
    assert exposed_name("filesystem", "read_file") == "mcp_filesystem_read_file"
    assert exposed_name("Web Search", "files.read/v2") == "mcp_Web_Search_files_read_v2"
    assert exposed_name("服务", "工具") == "mcp_" + "__" + "_" + "__"


def test_long_names_are_cut_with_a_stable_hash() -> None:
    long_a, long_b = "x" * 80 + "a", "x" * 80 + "b"
    a, b = exposed_name("srv", long_a), exposed_name("srv", long_b)
    assert len(a) == len(b) == MAX_NAME_CHARS
    assert a != b and a == exposed_name("srv", long_a)
    assert a[:-9] == b[:-9] and a[-9] == "_"
    assert len(exposed_name("srv", "y" * (MAX_NAME_CHARS - 8))) == MAX_NAME_CHARS  # exactly 64: kept as is
    assert exposed_name("srv", "y" * (MAX_NAME_CHARS - 8)).endswith("y")


@given(st.text(max_size=30), st.text(max_size=120))
@settings(max_examples=200, deadline=None)
def test_any_name_becomes_a_valid_function_name(key: str, tool: str) -> None:
    import re

    name = exposed_name(key, tool)
    assert re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", name)
    assert name == exposed_name(key, tool)


def test_descriptions_are_trimmed_to_the_budget() -> None:
    text = trim_description("word " * 1000, "demo", limit=200)
    assert len(text) == 200 and text.startswith("[MCP demo] word") and text.endswith("…")
    assert trim_description(None, "demo") == "[MCP demo] (no description)"


@pytest.mark.parametrize("args, expected", [
    ({"text": "a\ud800b"}, "unpaired UTF-16 surrogate (\\ud800) at $.text"),
    ({"bad\udfffkey": 1}, "unpaired UTF-16 surrogate (\\udfff)"),
    ({"n": float("nan")}, "nan at $.n"),
    ({"n": [float("inf")]}, "inf at $.n[0]"),
    ({"text": "x" * 1_000_001}, "larger than 1000000 characters"),
])
def test_hostile_arguments_get_a_clear_error(args: dict[str, Any], expected: str) -> None:
    with pytest.raises(ToolArgumentsError) as err:
        check_arguments("mcp_demo_echo", args)
    assert expected in str(err.value)
    str(err.value).encode("utf-8")  # the message itself is valid text for the model


def test_deep_nesting_is_refused_without_recursion() -> None:
    deep: Any = "leaf"
    for _ in range(10_000):
        deep = {"a": deep}
    with pytest.raises(ToolArgumentsError, match=f"more than {MAX_DEPTH} levels"):
        check_arguments("t", {"x": deep})
    shallow: Any = "leaf"
    for _ in range(MAX_DEPTH - 2):
        shallow = [shallow]
    check_arguments("t", {"x": shallow})


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)


@given(st.dictionaries(st.text(max_size=8), json_values, max_size=5))
@settings(max_examples=300, deadline=None)
def test_argument_check_accepts_or_explains_never_crashes(args: dict[str, Any]) -> None:
    try:
        check_arguments("t", args)
    except ToolArgumentsError as exc:
        str(exc).encode("utf-8")
        return
    json.dumps(args, allow_nan=False).encode("utf-8")  # what passed can go on the wire


def test_registry_takes_tools_while_turns_read_it() -> None:
    from picobot.tools.base import Tool

    class Named(Tool):
        def __init__(self, name: str) -> None:
            self.name = name

    registry = ToolRegistry()
    for i in range(100):
        registry.register(Named(f"t{i}"))
    errors: list[BaseException] = []

    def churn() -> None:
        try:
            for i in range(1000):
                registry.register(Named(f"late{i}"))
                registry.unregister(f"late{i - 1}")
        except BaseException as exc:
            errors.append(exc)

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads often, so an unsafe registry fails at once
    try:
        writer = threading.Thread(target=churn)
        writer.start()
        while writer.is_alive():
            try:
                assert len(registry.specs()) >= 100 and len(registry.names()) >= 100
            except RuntimeError as exc:  # "dictionary changed size during iteration"
                errors.append(exc)
                break
        writer.join()
    finally:
        sys.setswitchinterval(old)
    assert errors == []
    assert "late999" in registry and "late998" not in registry


# --- real servers in this process ----------------------------------------------------------


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[McpManager, ToolRegistry]]:
    """Good and bad servers side by side, as one worker would run them."""
    tmp = tmp_path_factory.mktemp("mcp")
    m, registry = manager({
        "demo": demo("--odd-names", "--bad-schema"),
        "garbage": demo("--garbage"),
        "crashy": demo("--crash-at-start"),
        "mute": demo("--hang", connectTimeout=3),
        "off": demo(isActive=False),
        "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
    }, tmp)
    try:
        yield m, registry
    finally:
        m.close()


def test_tools_are_registered_with_names_schemas_and_descriptions(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    status = settled(m, "demo")
    names = set(registry.names())
    assert {"mcp_demo_echo", "mcp_demo_add", "mcp_demo_slow", "mcp_demo_files_read_v2"} <= names
    long_name = exposed_name("demo", LONG_TOOL_NAME)
    assert len(long_name) == 64 and long_name in names
    assert exposed_name("demo", DOTTED_TOOL_NAME) == "mcp_demo_files_read_v2"
    spec = next(s for s in registry.specs() if s.name == "mcp_demo_add")
    assert spec.description == "[MCP demo] Add two numbers."
    assert spec.parameters["properties"]["a"]["type"] == "number" and spec.parameters["type"] == "object"
    assert status["tools"] == len([n for n in names if n.startswith("mcp_demo_")])
    assert run(registry, "mcp_demo_add", {"a": 2, "b": 40}, ctx(tmp_path)).content == "42.0"


def test_invalid_schema_fails_that_tool_only(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    status = settled(m, "demo")
    assert "mcp_demo_broken" not in registry.names()
    assert "not valid JSON Schema" in status["failed_tools"]["broken"]
    assert run(registry, "mcp_demo_echo", {"text": "still fine"}, ctx(tmp_path)).content == "still fine"


@pytest.mark.parametrize("key, error", [
    ("garbage", "not MCP JSON-RPC on its stdout"),
    ("crashy", "the server process exited"),
    ("mute", "did not finish connecting within 3 s"),
])
def test_broken_servers_are_failed_and_the_rest_work(fleet, tmp_path: Path, key: str, error: str) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    wait_for(lambda: m.servers[key].status()["last_error"], SETTLE_SECS, f"{key} never failed")
    status = m.servers[key].status()
    assert error in status["last_error"]
    assert status["state"] in ("failed", "connecting") and status["tools"] == 0
    assert not [n for n in registry.names() if n.startswith(f"mcp_{key}_")]
    if status["state"] == "failed":
        assert status["retry_at"] > time.time() - 1  # a retry is scheduled, with backoff
    settled(m, "demo")
    assert run(registry, "mcp_demo_echo", {"text": "ok"}, ctx(tmp_path)).content == "ok"


def test_failed_server_is_retried_with_growing_backoff(fleet) -> None:  # type: ignore[no-untyped-def]
    m, _ = fleet
    server = m.servers["crashy"]
    wait_for(lambda: server.failures >= 2, SETTLE_SECS, "crashy was not retried")
    assert server.status()["state"] in ("failed", "connecting")


def test_disabled_server_is_listed_but_never_started(fleet) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    assert m.servers["off"].status()["state"] == "disabled"
    assert not [n for n in registry.names() if n.startswith("mcp_off_")]


def test_published_time_server_over_stdio(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    settled(m, "time")
    result = run(registry, "mcp_time_get_current_time", {"timezone": "Asia/Tokyo"}, ctx(tmp_path))
    assert not result.is_error, result.content
    assert json.loads(result.content)["timezone"] == "Asia/Tokyo"
    bad = run(registry, "mcp_time_get_current_time", {"timezone": "Not/AZone"}, ctx(tmp_path))
    assert bad.is_error and "returned an error" in bad.content


def test_hostile_arguments_never_reach_the_server(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    settled(m, "demo")
    surrogate = run(registry, "mcp_demo_echo", '{"text": "a\\ud800b"}', ctx(tmp_path))
    assert surrogate.is_error and "unpaired UTF-16 surrogate" in surrogate.content
    nan = run(registry, "mcp_demo_add", '{"a": NaN, "b": 1}', ctx(tmp_path))
    assert nan.is_error
    deep = run(registry, "mcp_demo_echo", '{"text": "x", "extra": ' + "[" * 200 + "]" * 200 + "}", ctx(tmp_path))
    assert deep.is_error and "levels deep" in deep.content
    assert m.servers["demo"].status()["state"] == "connected"  # the connection survived all of it
    assert run(registry, "mcp_demo_echo", {"text": "after"}, ctx(tmp_path)).content == "after"


def test_results_pass_the_registry_redaction_and_truncation(fleet, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    settled(m, "demo")
    secret = "hunter2-very-secret"
    result = run(registry, "mcp_demo_echo", {"text": f"key={secret} " + "y" * 500}, ctx(tmp_path, secrets=frozenset({secret})),
                 max_chars=100)
    assert secret not in result.content and "truncated" in result.content


def test_server_stderr_goes_to_the_log_not_the_model(fleet, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:  # type: ignore[no-untyped-def]
    m, registry = fleet
    settled(m, "demo")
    with caplog.at_level("INFO", logger="picobot.mcp.stderr"):
        result = run(registry, "mcp_demo_shout", {"text": "psst-from-stderr"}, ctx(tmp_path))
        wait_for(lambda: "psst-from-stderr" in caplog.text, 10, "stderr line never logged")
    assert result.content == "ok" and "psst" not in result.content


@pytest.fixture
def victim(tmp_path: Path) -> Iterator[tuple[McpManager, ToolRegistry]]:
    m, registry = manager({"v": demo(timeout=2)}, tmp_path)
    try:
        settled(m, "v")
        yield m, registry
    finally:
        m.close()


def server_pid(registry: ToolRegistry, tmp: Path) -> int:
    result = run(registry, "mcp_v_pid", {}, ctx(tmp))
    assert not result.is_error, result.content
    return int(result.content)


def test_server_killed_mid_call_errors_then_reconnects(victim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = victim
    pid = server_pid(registry, tmp_path)
    out: dict[str, Any] = {}
    t = threading.Thread(target=lambda: out.update(r=run(registry, "mcp_v_slow", {"seconds": 1.5}, ctx(tmp_path))))
    t.start()
    time.sleep(0.5)
    os.kill(pid, signal.SIGKILL)
    t.join(10)
    assert out["r"].is_error and "connection broke during the call" in out["r"].content
    assert "A new call reconnects" in out["r"].content
    wait_for(lambda: m.servers["v"].status()["state"] == "disconnected", 10, "the drop was not noticed")
    assert server_pid(registry, tmp_path) != pid  # the next call started a new server
    assert m.servers["v"].status()["state"] == "connected"


def test_server_that_died_while_idle_is_reconnected_transparently(victim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = victim
    pid = server_pid(registry, tmp_path)
    os.kill(pid, signal.SIGKILL)
    # noticed by itself (the server's stdout ended), before anyone calls
    wait_for(lambda: m.servers["v"].status()["state"] == "disconnected", 10, "the death was not noticed")
    assert "process exited" in m.servers["v"].status()["last_error"]
    result = run(registry, "mcp_v_echo", {"text": "hello again"}, ctx(tmp_path))
    assert result.content == "hello again" and not result.is_error


def test_a_server_that_stops_starting_is_not_respawned_by_every_call(victim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = victim
    server = m.servers["v"]
    server.cfg.command = str(tmp_path / "no-such-command")
    os.kill(server_pid(registry, tmp_path), signal.SIGKILL)
    wait_for(lambda: server.status()["state"] == "disconnected", 10, "the death was not noticed")
    first = run(registry, "mcp_v_echo", {"text": "x"}, ctx(tmp_path))
    assert first.is_error and "no-such-command" in first.content
    assert server.status()["state"] == "failed" and server.failures == 1
    second = run(registry, "mcp_v_echo", {"text": "x"}, ctx(tmp_path))
    assert second.is_error and "next connection attempt is in" in second.content
    assert server.failures == 1  # refused while backing off: nothing was spawned


def test_hung_call_is_cut_at_the_timeout(victim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = victim
    started = time.monotonic()
    result = run(registry, "mcp_v_slow", {"seconds": 30}, ctx(tmp_path))
    assert result.is_error and "did not answer slow within 2 s" in result.content
    assert time.monotonic() - started < 25  # cut, not waited out (a bound, not a speed claim)
    assert run(registry, "mcp_v_echo", {"text": "next"}, ctx(tmp_path)).content == "next"


def test_stop_cancels_a_running_call(victim, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    m, registry = victim
    m.servers["v"].cfg.timeout = 60
    cancel = CancelToken()
    threading.Timer(0.5, cancel.cancel).start()
    started = time.monotonic()
    with pytest.raises(TurnCancelled):
        run(registry, "mcp_v_slow", {"seconds": 30}, ctx(tmp_path, cancel=cancel))
    assert time.monotonic() - started < 25
    assert run(registry, "mcp_v_echo", {"text": "still here"}, ctx(tmp_path)).content == "still here"


def test_streamable_http_server(tmp_path: Path) -> None:
    port = free_port()
    proc = subprocess.Popen([sys.executable, DEMO, "--http", str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        wait_for(lambda: _listening(port), 30, "the HTTP demo server did not start")
        m, registry = manager({
            "web": {"type": "streamableHttp", "url": f"http://127.0.0.1:{port}/mcp",
                    "headers": {"Authorization": "Bearer test-token-123"}},
            "wrong": {"type": "http", "url": f"http://127.0.0.1:{port}/nope", "connectTimeout": 5},
        }, tmp_path)
        try:
            settled(m, "web")
            assert run(registry, "mcp_web_add", {"a": 1, "b": 2}, ctx(tmp_path)).content == "3.0"
            wrong = settled(m, "wrong", ("failed",))
            assert "Not Found" in wrong["last_error"]  # the server's own answer, not a teardown artifact
        finally:
            m.close()
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)


def _listening(port: int) -> bool:
    try:
        HTTP.get(f"http://127.0.0.1:{port}/mcp", timeout=1)
        return True
    except httpx.HTTPError:
        return False


def test_errors_shown_for_a_server_never_carry_config_secrets(tmp_path: Path) -> None:
    secret = "cmdsecret-0123456789"
    m, _ = manager({"leaky": {"command": str(tmp_path / secret)}}, tmp_path, secrets=frozenset({secret}))
    try:
        status = settled(m, "leaky", ("failed",))
        assert "command not found" in status["last_error"] and secret not in json.dumps(status)
    finally:
        m.close()


def test_config_placeholders_and_new_keys(tmp_path: Path) -> None:
    from picobot.config.loader import load_config

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"mcpServers": {
        "remote": {"type": "http", "baseUrl": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ${MCP_TOKEN}"},
                   "timeout": 5},
        "local": {"command": "${MCP_CMD}", "cwd": "tools", "connectTimeout": 7},
    }}))
    cfg = load_config(home=home, cwd=tmp_path, environ={"MCP_TOKEN": "tok-123456", "MCP_CMD": "npx"})
    remote, local = cfg.mcp_servers["remote"], cfg.mcp_servers["local"]
    assert remote.headers["Authorization"] == "Bearer tok-123456" and remote.timeout == 5
    assert local.command == "npx" and local.cwd == "tools" and local.connect_timeout == 7
    assert "tok-123456" in cfg.model_dump_json(by_alias=True)  # sanity: it is there to be masked
    from picobot.config.secrets import masked

    assert "tok-123456" not in json.dumps(masked(cfg))


# --- status across processes ---------------------------------------------------------------


def test_status_is_published_per_worker_and_summarised(redis_url: str) -> None:
    import redis as redis_lib

    from picobot.config.schema import Config
    from picobot.mcp import status
    from picobot.runtime.heartbeat import start_heartbeat

    r = redis_lib.Redis.from_url(redis_url, decode_responses=True)
    cfg = Config.model_validate({"mcpServers": {"a": demo(), "b": demo(isActive=False), "c": demo()}})
    views = [{"key": "a", "state": "connected", "tools": 3, "tool_names": ["x"], "failed_tools": {}, "last_error": None,
              "since": time.time(), "retry_at": None}]
    stop = start_heartbeat(r, "w9@test", lambda: [], on_beat=lambda: status.publish(r, "w9@test", views))
    try:
        wait_for(lambda: status.read(r).get("w9@test"), 10, "nothing published")
        servers = {s["key"]: s for s in status.summary(cfg, status.read(r))}
        assert servers["a"]["state"] == "connected" and servers["a"]["tools"] == 3
        assert servers["b"]["state"] == "disabled"
        assert servers["c"]["state"] == "unknown"
        text = status.text(list(servers.values()))
        assert "- a (stdio): connected, 3 tool(s)" in text and "no running worker" in text
        assert r.ttl("picobot:mcp:w9@test") > 0  # a dead worker's view expires
    finally:
        stop.set()


# --- end to end: the model calls an MCP tool through a real worker ---------------------------


@pytest.fixture(scope="module")
def mcp_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("mcpstack")
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["mcpServers"] = {"demo": demo(timeout=10), "broken": demo("--crash-at-start")}
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def _mcp_check(stack: Stack) -> dict[str, Any]:
    return {srv["key"]: srv for srv in stack.health()["checks"]["mcp"]["servers"]}


def test_model_calls_an_mcp_tool_through_a_worker(mcp_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    wait_for(lambda: _mcp_check(mcp_stack)["demo"]["state"] == "connected", SETTLE_SECS, "demo never connected")
    add_rule(llm, "mcp-add", {"tool_calls": [{"name": "mcp_demo_add", "arguments": {"a": 20, "b": 22}}]},
             {"content": "the sum is 42"})
    c = mcp_stack.client()
    done = c.ask("mcp-add please")
    assert done["status"] == "completed", done
    body = json.dumps(llm.requests()[-1]["body"])
    assert "mcp_demo_add" in body and "42.0" in body  # the tool was offered and its result came back
    health = mcp_stack.health()["checks"]["mcp"]
    assert health["ok"] and "1 of 2 connected" in health["detail"]
    broken = _mcp_check(mcp_stack)["broken"]
    assert broken["state"] in ("failed", "connecting") and "exited" in broken["last_error"]


def test_killed_server_is_an_error_for_the_model_and_the_next_call_reconnects(mcp_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    wait_for(lambda: _mcp_check(mcp_stack)["demo"]["state"] == "connected", SETTLE_SECS, "demo never connected")
    add_rule(llm, "mcp-crash", {"tool_calls": [{"name": "mcp_demo_crash", "arguments": {}}]},
             {"tool_calls": [{"name": "mcp_demo_echo", "arguments": {"text": "back again"}}]}, {"content": "done"})
    c = mcp_stack.client()
    assert c.ask("mcp-crash now")["status"] == "completed"
    requests = llm.requests()
    after_crash, after_echo = json.dumps(requests[-2]["body"]), json.dumps(requests[-1]["body"])
    assert "connection broke during the call" in after_crash
    assert "back again" in after_echo and "demo server: crashing" not in after_echo  # stderr stays in the log
    assert "demo server: crashing on purpose" in mcp_stack.all_logs()


def test_mcp_command_and_api_show_each_server(mcp_stack: Stack) -> None:
    wait_for(lambda: _mcp_check(mcp_stack)["demo"]["state"] == "connected", SETTLE_SECS, "demo never connected")
    c = mcp_stack.client()
    reply = c.command("/mcp")
    assert "- demo (stdio): connected" in reply["text"] and "- broken (stdio)" in reply["text"]
    api = HTTP.get(mcp_stack.http + "/api/mcp", headers={"Authorization": f"Bearer {mcp_stack.token}"}).json()
    servers = {s["key"]: s for s in api["servers"]}
    assert servers["demo"]["tools"] >= 6 and servers["broken"]["last_error"]
    assert HTTP.get(mcp_stack.http + "/api/mcp").status_code == 401
