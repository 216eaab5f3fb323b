"""`delegate_to_cli` and the `delegates` config: a fake CLI (a Python script) run for real.

Config errors name their key path; the tool runs the CLI in a fresh tasks/ folder or a confined cwd,
caps its output (head and tail) and saves all of it under the home with secrets redacted; a timeout
and /stop end the whole process group, even a CLI that forks and ignores SIGTERM; the tool is not
offered without `delegates`; and one real turn calls it.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.config.delegates import DelegateConfig
from picobot.config.loader import load_config
from picobot.errors import ConfigError, ToolError, TurnCancelled
from picobot.security.sandbox import sandbox_status
from picobot.tools.base import ToolContext
from picobot.delegates.tool import DelegateTool
from tests.conftest import add_rule
from tests.stack import base_config

SECRET = "sk-delegate-" + "Q9" * 12
FAKE_CLI = r'''
import os, signal, sys, time
mode, prompt = sys.argv[1], sys.argv[2]
print("cwd=" + os.getcwd())
print("prompt=" + prompt)
print("key=" + os.environ.get("FAKE_API_KEY", "-"))
print("leak=" + os.environ.get("PICOBOT_TEST_LEAK", "-"))
sys.stdout.flush()
if mode == "big":
    print("HEAD" + "x" * 5000 + "TAIL")
elif mode == "sleep":
    time.sleep(60)
elif mode == "stubborn":
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    pid = os.fork()
    if pid == 0:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        open("child.pid", "w").write(str(os.getpid()))
        while True:
            time.sleep(0.1)
    open("parent.pid", "w").write(str(os.getpid()))
    while True:
        time.sleep(0.1)
'''


@pytest.fixture
def cli(tmp_path: Path) -> Path:
    path = tmp_path / "fake_cli.py"
    path.write_text(FAKE_CLI)
    return path


def delegate(cli: Path, mode: str = "plain", **more: Any) -> DelegateConfig:
    return DelegateConfig(command=sys.executable, args=[str(cli), mode, "{prompt}"],
                          env={"FAKE_API_KEY": SECRET}, **more)


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir()
    # Plain processes: these tests watch host pids; the sandbox is tests/test_sandbox.py's.
    return ToolContext(session_id="s1", channel="test", chat_id="c1", sender_id="u1", turn_id="t1", workspace=ws,
                       settings={"bash": {"sandbox": "none"}})


def tool(tmp_path: Path, **delegates: DelegateConfig) -> DelegateTool:
    return DelegateTool(delegates, tmp_path / "home")


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def _pid(path: Path, within: float = 10) -> int:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return int(path.read_text())
        time.sleep(0.02)
    raise AssertionError(f"{path} was never written")


# --- config --------------------------------------------------------------------------------------


@pytest.mark.parametrize("entry, key, why", [
    ({"command": "claude", "args": ["-p"]}, "delegates.claude.args", "{prompt}"),
    ({"args": ["{prompt}"]}, "delegates.claude.command", "required key is missing"),
    ({"command": "claude", "timeout_secs": 0}, "delegates.claude.timeout_secs", "greater than 0"),
    ({"command": "claude", "timeout_secs": True}, "delegates.claude.timeout_secs", "true/false"),
    ({"command": "claude", "max_output_chars": "big"}, "delegates.claude.max_output_chars", "integer"),
    ({"command": "claude", "env": {"1BAD": "x"}}, "delegates.claude.env", "not a variable name"),
    ({"command": "claude", "shell": True}, "delegates.claude.shell", "unknown key"),
    ({"command": "claude", "args": ["{prompt}", 5]}, "delegates.claude.args[1]", "string"),
])
def test_config_errors_name_the_key_path(tmp_path: Path, entry: dict[str, Any], key: str, why: str) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"delegates": {"claude": entry}}))
    with pytest.raises(ConfigError) as e:
        load_config(home=tmp_path, environ={})
    assert key in str(e.value) and why in str(e.value)


def test_config_refuses_bad_names_and_keeps_defaults(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"delegates": {"../x": {"command": "c"}}}))
    with pytest.raises(ConfigError, match="not a delegate name"):
        load_config(home=tmp_path, environ={})
    (tmp_path / "config.json").write_text(json.dumps({"delegates": {"codex": {"command": "codex",
                                                                              "args": ["exec", "{prompt}"]}}}))
    spec = load_config(home=tmp_path, environ={}).delegates["codex"]
    assert (spec.timeout_secs, spec.max_output_chars, spec.cwd, spec.env) == (600, 50_000, None, {})


# --- running the CLI -----------------------------------------------------------------------------


def test_runs_the_cli_in_a_fresh_tasks_folder_with_the_prompt_as_one_argument(
        tmp_path: Path, ctx: ToolContext, cli: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PICOBOT_TEST_LEAK", "picobot-own-secret-value")
    prompt = "fix it; rm -rf / $(whoami) `id` 'quoted' \"double\"\nsecond line"
    out = tool(tmp_path, fake=delegate(cli)).execute({"cli": "fake", "prompt": prompt}, ctx)
    assert out.startswith("fake exited with code 0 after ")
    (folder,) = (ctx.workspace / "tasks").iterdir()
    assert f"Folder: tasks/{folder.name}." in out and f"cwd={folder}\n" in out and folder.name.endswith(
        [n for n in folder.name.split("-") if n][-1])
    assert "prompt=fix it; rm -rf / $(whoami) `id` 'quoted' \"double\"\nsecond line" in out
    assert SECRET not in out and "key=********" in out  # the CLI got it; the model does not see it
    assert "leak=-" in out  # PicoBot's own environment never reaches the CLI
    log = Path(out.split("Full output: ")[1].split("\n")[0])
    assert log.parent == tmp_path / "home" / "cli_outputs" and log.name.endswith("-fake.log")
    saved = log.read_text()
    assert "prompt=fix it" in saved and SECRET not in saved
    assert log.stat().st_mode & 0o077 == 0  # the user's alone
    assert not list(log.parent.glob(".*.raw"))


def test_caps_output_keeping_head_and_tail_and_saves_all(tmp_path: Path, ctx: ToolContext, cli: Path) -> None:
    out = tool(tmp_path, fake=delegate(cli, "big", max_output_chars=400)).execute({"cli": "fake", "prompt": "p"}, ctx)
    assert "characters of output omitted" in out and "TAIL" in out and "cwd=" in out
    assert "x" * 1000 not in out
    log = Path(out.split("Full output: ")[1].split("\n")[0])
    assert "HEAD" + "x" * 5000 + "TAIL" in log.read_text()


def test_cwd_is_confined_to_the_workspace(tmp_path: Path, ctx: ToolContext, cli: Path) -> None:
    (ctx.workspace / "proj").mkdir()
    t = tool(tmp_path, fake=delegate(cli))
    out = t.execute({"cli": "fake", "prompt": "p", "cwd": "proj"}, ctx)
    assert f"cwd={ctx.workspace}/proj\n" in out
    for bad in ("..", "/tmp", "../..", str(tmp_path)):
        with pytest.raises(ToolError, match="outside the workspace"):
            t.execute({"cli": "fake", "prompt": "p", "cwd": bad}, ctx)
    os.symlink(tmp_path, ctx.workspace / "out")
    with pytest.raises(ToolError, match="outside the workspace"):
        t.execute({"cli": "fake", "prompt": "p", "cwd": "out"}, ctx)
    with pytest.raises(ToolError, match="not a folder"):
        t.execute({"cli": "fake", "prompt": "p", "cwd": "missing"}, ctx)
    with pytest.raises(ToolError, match="Unknown CLI"):
        t.execute({"cli": "other", "prompt": "p"}, ctx)


def test_a_timeout_stops_the_whole_group(tmp_path: Path, ctx: ToolContext, cli: Path) -> None:
    (ctx.workspace / "run").mkdir()
    t = tool(tmp_path, fake=delegate(cli, "stubborn", timeout_secs=6))
    with pytest.raises(ToolError, match="timed out after 6 s") as e:
        t.execute({"cli": "fake", "prompt": "p", "cwd": "run"}, ctx)
    assert "prompt=p" in str(e.value)
    for name in ("parent.pid", "child.pid"):
        assert not _alive(_pid(ctx.workspace / "run" / name)), name


def test_stop_kills_a_forking_cli_that_ignores_sigterm(tmp_path: Path, ctx: ToolContext, cli: Path) -> None:
    (ctx.workspace / "run").mkdir()
    t = tool(tmp_path, fake=delegate(cli, "stubborn"))
    box: dict[str, BaseException] = {}

    def run() -> None:
        try:
            t.execute({"cli": "fake", "prompt": "p", "cwd": "run"}, ctx)
        except BaseException as exc:  # noqa: BLE001 - checked below
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    child = _pid(ctx.workspace / "run" / "child.pid")
    parent = _pid(ctx.workspace / "run" / "parent.pid")
    assert _alive(child) and _alive(parent)
    ctx.cancel.cancel("stopped by the user")
    worker.join(30)
    assert not worker.is_alive()
    assert isinstance(box.get("error"), TurnCancelled)
    assert not _alive(parent) and not _alive(child)


def test_a_missing_program_is_a_clear_error(tmp_path: Path, ctx: ToolContext) -> None:
    t = tool(tmp_path, ghost=DelegateConfig(command="no-such-cli-anywhere", args=["{prompt}"]))
    with pytest.raises(ToolError, match="Could not start no-such-cli-anywhere"):
        t.execute({"cli": "ghost", "prompt": "p"}, ctx)
    assert not any((tmp_path / "home" / "cli_outputs").iterdir())  # no log of a run that never was


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.dictionaries(st.sampled_from(["cli", "prompt", "cwd", "x"]),
                            st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True),
                                      st.text(max_size=20), st.just("\ud800"), st.just("a\x00b"),
                                      st.just("x" * 200_000), st.lists(st.integers(), max_size=3),
                                      st.recursive(st.just({}), lambda i: st.dictionaries(st.just("k"), i), max_leaves=20)),
                            max_size=3))
def test_hostile_arguments_are_tool_errors(tmp_path: Path, ctx: ToolContext, args: dict[str, Any]) -> None:
    t = tool(tmp_path, fake=DelegateConfig(command="true", args=["{prompt}"]))
    if args.get("cli") == "fake" and isinstance(args.get("prompt"), str):
        args["cli"] = "not-fake"  # hostile, not a real run
    with pytest.raises(ToolError):
        t.execute(dict(args), ctx)


# --- registration and a real turn -----------------------------------------------------------------


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:  # the test drains by itself
        pass


def _runtime(tmp_path: Path, llm_url: str, redis_url: str, monkeypatch: pytest.MonkeyPatch,
             delegates: dict[str, Any]) -> Any:
    from picobot.app import build_runtime

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = base_config(llm_url, 1)
    cfg["tools"] = {"bash": {"sandbox": "none"}}
    if delegates:
        cfg["delegates"] = delegates
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-delegates-" + "K" * 20)
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PICOBOT_WORKSPACE", str(tmp_path / "turn-ws"))
    return build_runtime(load_config(), _NoQueue(), migrate=True)


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, cli: Path) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    rt = _runtime(tmp_path, llm.url, redis_url, monkeypatch,
                  {"fake": {"command": sys.executable, "args": [str(cli), "plain", "{prompt}"],
                            "env": {"FAKE_API_KEY": SECRET}}})
    yield rt
    rt.close()


def test_the_tool_is_offered_only_when_delegates_are_configured(tmp_path: Path, llm, redis_url: str,  # type: ignore[no-untyped-def]
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    rt = _runtime(tmp_path, llm.url, redis_url, monkeypatch, {})
    try:
        assert "delegate_to_cli" not in rt.tools()
    finally:
        rt.close()


def test_a_real_turn_delegates_to_the_cli(runtime: Any, llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.runtime.turn_runner import drain_session

    assert "delegate_to_cli" in runtime.tools()
    call = {"name": "delegate_to_cli", "arguments": {"cli": "fake", "prompt": "write hello.py"}}
    add_rule(llm, "delegate-it", {"tool_calls": [call]}, {"content": "done"})
    reply = Gateway(runtime).submit(InboundMessage("cli_chat", "deleg", "u1", "delegate-it"))
    assert drain_session(runtime, reply.session_id) == 1
    last = [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")][-1]
    result = [m["content"] for m in last["messages"] if m["role"] == "tool"][0]
    assert result.startswith("fake exited with code 0") and "prompt=write hello.py" in result
    assert SECRET not in result and f"cwd={tmp_path / 'turn-ws'}/tasks/" in result
    spec = [t for t in last["tools"] if t["function"]["name"] == "delegate_to_cli"][0]
    assert spec["function"]["parameters"]["properties"]["cli"]["enum"] == ["fake"]


# --- in the bash sandbox ----------------------------------------------------------------------------

SANDBOX_CLI = r'''
import os, sys, time
print("home=" + os.environ.get("HOME", "-"))
for path in sys.argv[2:]:
    try:
        print("read " + path + ": " + open(path).read()[:40])
    except OSError as exc:
        print("refused " + path + ": " + type(exc).__name__)
sys.stdout.flush()
if sys.argv[1] == "sleep":
    time.sleep(60)
'''


@pytest.mark.skipif(not shutil.which("bwrap") or not sandbox_status("auto").active, reason="bubblewrap not usable")
def test_the_cli_runs_in_the_bash_sandbox_and_cannot_read_the_home(tmp_path: Path, ctx: ToolContext) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text('{"api_key": "canary-home-77"}')
    (ctx.workspace / "cli.py").write_text(SANDBOX_CLI)
    ctx.settings["bash"] = {"sandbox": "bwrap"}
    python = shutil.which("python3", path="/usr/bin:/bin") or "/usr/bin/python3"
    t = DelegateTool({"box": DelegateConfig(command=python, args=[str(ctx.workspace / "cli.py"), "{prompt}",
                                                                  str(home / "config.json")])}, home)
    out = t.execute({"cli": "box", "prompt": "plain"}, ctx)
    assert "exited with code 0" in out and f"home={ctx.workspace}" in out
    assert "refused" in out and "canary-home-77" not in out
    slow = DelegateTool({"box": DelegateConfig(command=python, args=[str(ctx.workspace / "cli.py"), "{prompt}"])}, home)
    threading.Timer(1.0, ctx.cancel.cancel).start()
    with pytest.raises(TurnCancelled):
        slow.execute({"cli": "box", "prompt": "sleep"}, ctx)


def test_the_schema_as_sent_fits_its_budget_with_both_presets(tmp_path: Path) -> None:
    t = tool(tmp_path, claude=DelegateConfig(command="claude", args=["-p", "{prompt}", "--output-format", "text"]),
             codex=DelegateConfig(command="codex", args=["exec", "{prompt}"]))
    sent = {"type": "function", "function": {"name": t.name, "description": t.description, "parameters": t.parameters}}
    assert len(json.dumps(sent, ensure_ascii=False)) <= 350
