"""The workspace apart from PicoBot's secrets, bash's environment allowlist, the bubblewrap sandbox.

Real bwrap, real processes and real files; the end-to-end tests drive the agent through the
fake LLM. Nothing here sends a packet anywhere but 127.0.0.1.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.config.loader import load_config
from picobot.config.workspace import (
    ENV_VAR, LEGACY_NOTE_MARKER, chat_workspace, choose_workspace, overlaps_home, safe_name, warn_if_unsafe,
)
from picobot.errors import ConfigError, ToolError, TurnCancelled
from picobot.runtime.tool_safety import sandbox_check
from picobot.security.sandbox import bwrap_argv, sandbox_status
from picobot.tools.base import ToolContext
from picobot.tools.files import EditFileTool, ReadFileTool
from picobot.tools.shell import ShellTool
from picobot.tools.shell_env import command_env
from tests.conftest import add_rule
from tests.stack import API_KEY, Stack, base_config

SANDBOX = sandbox_status("auto")
needs_bwrap = pytest.mark.skipif(not SANDBOX.active, reason=f"bubblewrap is not usable here: {SANDBOX.detail}")
posix_only = pytest.mark.skipif(os.name == "nt", reason="POSIX shell")

CANARY_ENV = "canary-env-5d1f"
CANARY_DOTENV = "canary-dotenv-8a2c"
CANARY_CONFIG = "canary-config-3e7b"


# --- fixtures -----------------------------------------------------------------------


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A PicoBot home with secrets in every place the agent must not reach."""
    path = tmp_path / "home"
    (path / "data").mkdir(parents=True)
    (path / ".env").write_text(f"SOME_TOKEN={CANARY_DOTENV}\n")
    (path / "config.json").write_text(json.dumps({"agents": {"default": {"system_prompt": CANARY_CONFIG}}}))
    (path / "data" / "picobot.db").write_bytes(b"SQLite format 3\x00" + CANARY_CONFIG.encode())
    monkeypatch.setenv("PICOBOT_HOME", str(path))
    monkeypatch.setenv("PICOBOT_TEST_KEY", CANARY_ENV)
    monkeypatch.setenv("REDIS_URL", "redis://127.0.0.1:1/0")
    monkeypatch.setenv("DATABASE_URL", f"sqlite:///{path}/data/picobot.db")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + CANARY_ENV)
    return path


def make_ctx(workspace: Path, sandbox: str = "bwrap", **settings: Any) -> ToolContext:
    return ToolContext(session_id="s1", channel="test", chat_id="c1", sender_id="u1", turn_id="t1",
                       workspace=workspace, settings={"bash": {"sandbox": sandbox}, **settings})


def run(ctx: ToolContext, command: str, **args: Any) -> str:
    return ShellTool().execute({"command": command, **args}, ctx)


def assert_no_secret(text: str) -> None:
    for secret in (CANARY_ENV, CANARY_DOTENV, CANARY_CONFIG, "SQLite format 3", "REDIS_URL", "DATABASE_URL",
                   "redis://", "PICOBOT_HOME"):
        assert secret not in text, f"{secret!r} leaked:\n{text}"


# --- the sandbox, in process -----------------------------------------------------------


@needs_bwrap
def test_sandbox_hides_home_even_from_a_workspace_inside_it(home: Path) -> None:
    ctx = make_ctx(home / "workspace")  # the old layout, the worst case
    out = run(ctx, f"cat ../.env; cat {home}/config.json; cat {home}/data/picobot.db; ls {home}; "
                   "ls /root /home; env; printenv; echo end")
    assert "No such file or directory" in out and out.rstrip().endswith("end")
    assert_no_secret(out)


@needs_bwrap
def test_sandbox_hides_a_home_that_lies_inside_the_workspace(tmp_path: Path, home: Path) -> None:
    ctx = make_ctx(tmp_path)  # the workspace holds the home
    out = run(ctx, "ls home; cat home/.env home/config.json; echo end")
    assert_no_secret(out)
    assert (home / ".env").read_text().strip().endswith(CANARY_DOTENV), "the host copy is untouched"


def _sandboxed(workspace: Path, home: Path, shared: Path, command: str) -> str:
    """Run `command` in the sandbox with `shared` bound read-only, as /opt or /etc are."""
    argv = bwrap_argv(SANDBOX.bwrap or "bwrap", workspace, homes=(home,), command=["bash", "-c", command],
                      extra_ro=[shared])
    done = subprocess.run(argv, capture_output=True, text=True, timeout=30, env={"PATH": "/usr/bin:/bin"})
    return done.stdout + done.stderr


@needs_bwrap
def test_sandbox_hides_a_home_inside_a_folder_it_shows(tmp_path: Path, home: Path) -> None:
    # A system-wide install keeps its home under /opt or /etc, which the sandbox shows read-only.
    shared = tmp_path
    workspace = tmp_path.parent / (tmp_path.name + "-ws")
    workspace.mkdir()
    out = _sandboxed(workspace, home, shared, f"ls {home}; cat {home}/.env {home}/config.json; echo end")
    assert "end" in out and "No such file or directory" in out
    assert_no_secret(out)


@needs_bwrap
def test_sandbox_keeps_a_workspace_inside_a_hidden_home(tmp_path: Path, home: Path) -> None:
    workspace = home / "workspace"  # the old layout, under a folder the sandbox shows
    workspace.mkdir()
    out = _sandboxed(workspace, home, tmp_path, f"echo kept > note.txt && cat ../.env {home}/config.json; ls ..")
    assert_no_secret(out)
    assert (workspace / "note.txt").read_text() == "kept\n"


@needs_bwrap
def test_workspace_is_writable_and_the_system_is_not(tmp_path: Path, home: Path) -> None:
    ws = tmp_path / "ws"
    (tmp_path / "outside.txt").write_text("host file")
    ctx = make_ctx(ws)
    private = f"/tmp/picobot-sandbox-{uuid.uuid4().hex}"
    out = run(ctx, f"echo hi > note.txt && cat note.txt; echo $HOME; pwd; touch /usr/x /etc/x; "
                   f"cat {tmp_path}/outside.txt; echo tmp > {private} && cat {private}")
    assert (ws / "note.txt").read_text() == "hi\n"
    lines = out.splitlines()
    assert lines[:4] == ["Exit code: 0", "hi", str(ws.resolve()), str(ws.resolve())]
    assert "touch: cannot touch '/usr/x': Read-only file system" in out
    assert "outside.txt: No such file or directory" in out
    assert out.rstrip().endswith("tmp")
    assert not Path(private).exists(), "/tmp inside is not the host's"


@needs_bwrap
def test_host_loopback_is_unreachable_without_the_proxy(tmp_path: Path, home: Path) -> None:
    server = _serve_text("host-only")
    try:
        ctx = make_ctx(tmp_path / "ws")
        out = run(ctx, f"(exec 3<>/dev/tcp/127.0.0.1/{server.server_address[1]}) 2>&1 || echo unreachable")
        assert "unreachable" in out
    finally:
        server.shutdown()


@needs_bwrap
@pytest.mark.skipif(not os.access("/usr/bin/curl", os.X_OK), reason="curl is not installed")
def test_http_egress_follows_the_network_policy(tmp_path: Path, home: Path) -> None:
    server = _serve_text("hello-from-host")
    url = f"http://127.0.0.1:{server.server_address[1]}/"
    tool = ShellTool()
    try:
        refused = tool.execute({"command": f"curl -sS -m 10 {url}"}, make_ctx(tmp_path / "ws"))
        assert "loopback" in refused and "tools.network.allow" in refused and "hello-from-host" not in refused
        allowed = make_ctx(tmp_path / "ws", network={"allow": ["127.0.0.1"]})
        assert "hello-from-host" in tool.execute({"command": f"curl -sS -m 10 {url}"}, allowed)
    finally:
        tool._egress.close()
        server.shutdown()


@needs_bwrap
def test_timeout_kills_the_command_and_all_its_children(tmp_path: Path, home: Path) -> None:
    with pytest.raises(ToolError, match="timed out after 1 s"):
        run(make_ctx(tmp_path / "ws"), "sleep 3071.25 & (sleep 3071.25 &); sleep 3071.25", timeout_secs=1)
    assert _wait_gone("3071.25")


@needs_bwrap
def test_stop_kills_the_sandboxed_command(tmp_path: Path, home: Path) -> None:
    ctx = make_ctx(tmp_path / "ws")
    timer = threading.Timer(0.5, ctx.cancel.cancel, args=("stopped by user",))
    timer.start()
    try:
        with pytest.raises(TurnCancelled):
            run(ctx, "sleep 3072.5 & sleep 3072.5")
    finally:
        timer.cancel()
    assert _wait_gone("3072.5")


# --- no sandbox, and bwrap required but missing -------------------------------------------


@posix_only
def test_sandbox_none_still_strips_the_environment(tmp_path: Path, home: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada")
    ctx = make_ctx(tmp_path / "ws", sandbox="none")
    ctx.settings["bash"]["env"] = {"GIT_AUTHOR_NAME": None, "GREETING": "hello"}
    out = run(ctx, "env; printenv")
    assert_no_secret(out)
    assert "LANG=C.UTF-8" in out and "GIT_AUTHOR_NAME=Ada" in out and "GREETING=hello" in out


def test_command_env_is_an_allowlist() -> None:
    environ = {"PATH": "/bin", "LC_ALL": "C", "TZ": "UTC", "REDIS_URL": "redis://x", "AWS_SECRET": "s",
               "FOO": "bar", "MY_TOKEN": "t", "PICOBOT_HOME": "/h", "BAD": "a\ud800"}
    assert command_env(None, environ) == {"PATH": "/bin", "LC_ALL": "C", "TZ": "UTC"}
    named = command_env({"FOO": None, "MISSING": None, "BAD": None, "SET": "v"}, environ)
    assert named == {"PATH": "/bin", "LC_ALL": "C", "TZ": "UTC", "FOO": "bar", "SET": "v"}
    assert command_env(None, {})["PATH"]  # programs still resolve without a PATH of our own


@posix_only
def test_required_sandbox_without_bwrap_is_a_clear_error(tmp_path: Path, home: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(ToolError) as info:
        run(make_ctx(tmp_path / "ws", sandbox="bwrap"), "touch ran")
    message = str(info.value)
    assert "tools.bash.sandbox" in message and "bubblewrap" in message and "apt-get install bubblewrap" in message
    assert not (tmp_path / "ws" / "ran").exists()
    status = sandbox_status("auto")
    assert not status.active and status.ok and "not installed" in status.detail
    required = sandbox_status("bwrap")
    assert not required.ok and required.as_check()["ok"] is False


def test_health_entry_sums_up_what_workers_reported() -> None:
    local = sandbox_status("none")
    assert sandbox_check({}, local)["detail"].endswith("checked here)")
    on = {"ok": True, "active": True, "detail": "bubblewrap (/usr/bin/bwrap)"}
    off = {"ok": False, "active": False, "detail": "required but unavailable: missing"}
    assert sandbox_check({"w1": on, "w2": on}, None) == {"ok": True, "active": True, "detail": on["detail"]}
    mixed = sandbox_check({"w1": on, "w2": off}, None)
    assert not mixed["ok"] and "w2: required but unavailable" in mixed["detail"]


# --- file tools ---------------------------------------------------------------------------


def test_file_tools_refuse_the_home_next_to_the_workspace(home: Path) -> None:
    ctx = make_ctx(home / "workspace")
    for tool, args in ((ReadFileTool(), {"path": "../config.json"}),
                       (EditFileTool(), {"path": "../config.json", "old_text": "a", "new_text": "b"}),
                       (ReadFileTool(), {"path": str(home / ".env")})):
        with pytest.raises(ToolError, match="outside the workspace"):
            tool.execute(args, ctx)


# --- where the workspace is -----------------------------------------------------------------


def test_default_workspace_is_beside_the_home(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    assert choose_workspace(home, None, {}).path == tmp_path / "home-workspace"
    assert choose_workspace(home, None, {ENV_VAR: str(tmp_path / "w")}).path == tmp_path / "w"
    assert choose_workspace(home, "  ", {ENV_VAR: " "}).source == "default"
    assert choose_workspace(home, "ws", {ENV_VAR: "/elsewhere"}).path == home / "ws"  # config wins
    (home / "workspace").mkdir()
    assert choose_workspace(home, None, {}).source == "default"  # an empty old folder is not kept
    (home / "workspace" / "notes.md").write_text("mine")
    assert choose_workspace(home, None, {}).path == home / "workspace"


def test_old_workspace_note_is_logged_once_per_home(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    home = tmp_path / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "notes.md").write_text("mine")
    choice = choose_workspace(home, None, {})
    with caplog.at_level(logging.WARNING, logger="picobot.workspace"):
        first = warn_if_unsafe(choice, home)
        second = warn_if_unsafe(choice, home)
    assert first and "mv " in first and "tools.workspace" in first and ".env" in first
    assert second is None and (home / LEGACY_NOTE_MARKER).exists()
    assert [r.getMessage() for r in caplog.records] == [first]


def test_configured_workspace_overlapping_the_home_is_warned(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for configured in (str(tmp_path), str(home), "ws"):
        message = warn_if_unsafe(choose_workspace(home, configured, {}), home)
        assert message and "overlaps the PicoBot home" in message
    assert warn_if_unsafe(choose_workspace(home, str(tmp_path / "apart"), {}), home) is None
    assert not overlaps_home(tmp_path / "home-workspace", home)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_chat_folders_are_one_safe_level_and_distinct(a: str, b: str) -> None:
    root = Path("/ws")
    for raw in (a, b):
        name = safe_name(raw)
        assert name and "/" not in name and "\\" not in name and not name.startswith(".")
        assert len(name) <= 80 and name.isascii()
        assert chat_workspace(root, raw, raw).parent.parent == root
    if a != b:
        assert safe_name(a) != safe_name(b)


def test_chat_folder_names_cannot_pose_as_another_chat() -> None:
    hashed = safe_name("a b")
    assert hashed.startswith("a_b-") and safe_name(hashed) != hashed
    assert safe_name("..") != safe_name("") != safe_name(".")
    assert safe_name("oc_123-abc") == "oc_123-abc"  # ordinary ids stay readable


# --- config --------------------------------------------------------------------------------


def test_bash_config_accepts_names_or_mapping(tmp_path: Path) -> None:
    cfg = _load(tmp_path, {"workspace_per_chat": True, "bash": {"sandbox": "none", "env": ["GIT_AUTHOR_NAME"]}})
    assert cfg.tools.bash.env == {"GIT_AUTHOR_NAME": None} and cfg.tools.workspace_per_chat
    cfg = _load(tmp_path, {"bash": {"env": {"A": "1", "B": None}}, "bash_timeout_secs": 5})
    assert cfg.tools.bash.env == {"A": "1", "B": None} and cfg.tools.bash.sandbox == "auto"


@pytest.mark.parametrize("tools, key", [
    ({"bash": {"sandbox": "docker"}}, "tools.bash.sandbox"),
    ({"bash": {"sandbox": True}}, "tools.bash.sandbox"),
    ({"bash": {"env": ["1BAD"]}}, "tools.bash.env"),
    ({"bash": {"env": ["A=B"]}}, "tools.bash.env"),
    ({"bash": {"env": [3]}}, "tools.bash.env"),
    ({"bash": {"env": {"A": "x\u0000y"}}}, "tools.bash.env"),
    ({"bash": {"env": {"A": 5}}}, "tools.bash.env"),
    ({"bash": {"env": "PATH"}}, "tools.bash.env"),
    ({"bash": {"unknown": 1}}, "tools.bash"),
    ({"workspace_per_chat": "maybe"}, "tools.workspace_per_chat"),
])
def test_bad_bash_config_names_the_key(tmp_path: Path, tools: dict[str, Any], key: str) -> None:
    with pytest.raises(ConfigError) as info:
        _load(tmp_path, tools)
    assert info.value.key_path.startswith(key), info.value


def _load(tmp_path: Path, tools: dict[str, Any]):  # type: ignore[no-untyped-def]
    home = tmp_path / "cfg-home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps({"tools": tools}))
    return load_config(home=home, cwd=tmp_path, environ={})


# --- end to end: the agent, the fake LLM, a real worker ----------------------------------------


@pytest.fixture(scope="module")
def guarded(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    """A stack in the old layout (workspace inside the home), per-chat workspaces, secrets everywhere."""
    tmp = tmp_path_factory.mktemp("sandbox")
    home = tmp / "home"
    (home / "workspace").mkdir(parents=True)
    (home / "workspace" / "old-notes.md").write_text("kept from an older install")
    (home / ".env").write_text(f"SOME_TOKEN={CANARY_DOTENV}\n")
    from picobot.cli.embedded_redis import free_port

    cfg = base_config(fake_llm.url, free_port())
    cfg["providers"]["default"]["api_key"] = API_KEY  # in config.json itself, as many users keep it
    cfg["agents"]["default"]["system_prompt"] = CANARY_CONFIG
    cfg["tools"] = {"workspace_per_chat": True}
    stack = Stack(tmp, fake_llm.url, config=cfg, database_url=f"sqlite:///{home}/data/picobot.db")
    stack.port = cfg["gateway"]["port"]
    stack.env["PICOBOT_CANARY"] = CANARY_ENV
    try:
        stack.start(beat=False)
        yield stack
    finally:
        stack.stop()


def _tool_results(llm) -> str:  # type: ignore[no-untyped-def]
    messages = llm.requests()[-1]["body"]["messages"]
    return "\n".join(str(m.get("content")) for m in messages if m.get("role") == "tool")


def _ask_bash(stack: Stack, llm, tag: str, command: str, chat: str | None = None) -> str:  # type: ignore[no-untyped-def]
    add_rule(llm, tag, {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}, {"content": "done"})
    client = stack.client(chat)
    try:
        assert client.ask(tag)["status"] == "completed"
    finally:
        client.close()
    return _tool_results(llm)


@needs_bwrap
def test_agent_cannot_read_secrets_with_bash(guarded: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    home = guarded.home
    out = _ask_bash(guarded, llm, "leak-bash", f"cat ../../../.env ../.env; cat {home}/config.json; "
                    f"cat {home}/data/picobot.db | head -c 64; env; printenv; echo finished")
    assert "finished" in out and "No such file or directory" in out
    assert_no_secret(out)
    for secret in (API_KEY, CANARY_ENV, CANARY_DOTENV, guarded.redis_url):
        assert secret not in out
    assert "PICOBOT_CANARY" not in out


@needs_bwrap
def test_agent_file_tools_refuse_the_home(guarded: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    calls = [{"name": "read", "arguments": {"path": "../../../config.json"}},
             {"name": "edit", "arguments": {"path": "../../../config.json", "old_text": "openai", "new_text": "x"}},
             {"name": "read", "arguments": {"path": str(guarded.home / ".env")}}]
    add_rule(llm, "leak-files", {"tool_calls": calls}, {"content": "done"})
    client = guarded.client()
    assert client.ask("leak-files")["status"] == "completed"
    client.close()
    out = _tool_results(llm)
    assert out.count("outside the workspace") == 3
    assert API_KEY not in out and CANARY_DOTENV not in out and CANARY_CONFIG not in out
    assert '"openai"' in (guarded.home / "config.json").read_text()


@needs_bwrap
def test_each_chat_has_its_own_workspace(guarded: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    _ask_bash(guarded, llm, "chat-a-writes", "echo from-a > mine.txt; pwd", chat="chat-a")
    # ".." is a valid chat id: as a folder name it would be the whole workspace
    out = _ask_bash(guarded, llm, "chat-b-looks", "ls; cat ../chat-a/mine.txt; pwd", chat="..")
    assert "from-a" not in out and "mine.txt" not in out.split("cat")[0]
    root = guarded.home / "workspace" / "cli_chat"
    assert (root / "chat-a" / "mine.txt").read_text() == "from-a\n"
    assert str(root / safe_name("..")) in out and safe_name("..") != ".."


@needs_bwrap
def test_worker_says_once_what_it_runs_with(guarded: Stack) -> None:
    check = guarded.health()["checks"]["sandbox"]
    assert check["ok"] and check["active"] and "bubblewrap" in check["detail"]
    assert "checked here" not in check["detail"], "the worker's own report, from its heartbeat"
    logs = guarded.all_logs()
    assert logs.count("bash sandbox: bubblewrap") == 1
    assert logs.count("Using the old workspace") == 1
    assert (guarded.home / LEGACY_NOTE_MARKER).exists()


# --- helpers -------------------------------------------------------------------------------


def _serve_text(text: str) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802
            self.send_response(200)
            self.end_headers()
            self.wfile.write(text.encode())

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _wait_gone(marker: str, within: float = 3.0) -> bool:
    """True once no process on this host has `marker` in its command line."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not any(marker.encode() in _cmdline(p) for p in Path("/proc").iterdir() if p.name.isdigit()):
            return True
        time.sleep(0.05)
    return False


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""

