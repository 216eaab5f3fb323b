"""Plugins end to end through real processes: the example package installed with pip and found by its
entry point, plus home plugin files that break on import, in before_output and in before_toolcall;
/ws -> web -> Celery worker -> fake LLM, and what the plugins did is seen on the wire, in the
stored history, in the example's log file, in /health and in /api/plugins.

One stack for the module: each start costs seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest

from scripts.fake_llm import FakeLLM
from tests.conftest import add_rule
from tests.stack import ROOT, Stack, WsClient, wait_for
from tests.http_client import HTTP

EXAMPLE = ROOT / "examples" / "plugins" / "picobot-example-plugin"
BUILD_LEFTOVERS = ("build", "__pycache__")
STAGE_HOOKS = ("on_input", "pre_action", "post_action", "before_toolcall", "after_toolcall", "before_output",
               "after_output")

HOME_PLUGINS = {
    "broken_import": 'raise RuntimeError("e2e: broken at import")\n',
    "bad_output": (
        "from picobot.plugins import hookimpl\n\n\n"
        "@hookimpl\n"
        "def before_output(ctx, text):\n"
        '    raise ValueError("e2e: before_output blew up")\n'
    ),
    "bad_check": (
        "import json\n\n"
        "from picobot.plugins import hookimpl\n\n\n"
        "@hookimpl\n"
        "def before_toolcall(ctx, call):\n"
        '    if "explode-in-check" in json.dumps(call.arguments):\n'
        '        raise RuntimeError("e2e: the checker crashed")\n'
    ),
}


# --- the installed example package and the stack ------------------------------------------


def _package_files() -> list[Path]:
    def leftover(path: Path) -> bool:
        parts = path.relative_to(EXAMPLE).parts
        return any(p in BUILD_LEFTOVERS or p.endswith(".egg-info") for p in parts)

    return sorted(p for p in EXAMPLE.rglob("*") if p.is_file() and not leftover(p))


@pytest.fixture(scope="session")
def example_site() -> Path:
    """A folder holding the example package as pip installs it (its dist-info names the entry point).

    Installed with pip into a folder of its own, put on the stack's PYTHONPATH: the shared venv (and
    every other test's stack) never sees the plugin. The folder is named by a hash of the package's
    files, so a later session reuses it and an edited package is installed afresh.
    """
    digest = hashlib.sha256()
    for path in _package_files():
        digest.update(path.relative_to(EXAMPLE).as_posix().encode() + b"\0" + path.read_bytes())
    site = Path(tempfile.gettempdir()) / f"picobot-example-plugin-{digest.hexdigest()[:16]}"
    if site.is_dir():
        return site
    work = Path(tempfile.mkdtemp(prefix="picobot-example-build-"))
    try:
        source = work / "src"  # a copy: the build leaves build/ and *.egg-info beside the sources
        shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS, "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
                            str(work / "site"), str(source)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"pip install of the example plugin failed:\n{r.stdout}\n{r.stderr}"
        try:
            os.rename(work / "site", site)  # atomic: a folder that exists is complete
        except OSError:
            assert site.is_dir()  # another session installed it first
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return site


@pytest.fixture(scope="module")
def pstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM, example_site: Path) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("plugins"), fake_llm.url)
    try:
        folder = s.home / "plugins"
        folder.mkdir()
        for name, text in HOME_PLUGINS.items():
            (folder / f"{name}.py").write_text(text)
        s.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(example_site), s.env.get("PYTHONPATH")]))
        s.env["PICOBOT_EXAMPLE_PLUGIN_LOG"] = str(s.cwd / "example-plugin.jsonl")
        s.start(beat=False)
        yield s
    finally:
        s.stop()


# --- helpers ------------------------------------------------------------------------------


def by_name(plugins: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in plugins}


def chat_bodies(llm: FakeLLM, marker: str) -> list[dict[str, Any]]:
    """The chat requests the fake LLM got whose messages mention `marker`."""
    return [r["body"] for r in llm.requests()
            if r["path"].endswith("/chat/completions") and marker in json.dumps(r["body"].get("messages"))]


def history(client: WsClient) -> list[dict[str, Any]]:
    client.send({"type": "history", "id": "h"})
    return client.recv_until(lambda f: f.get("id") == "h")["messages"]


def plugin_log(stack: Stack) -> list[dict[str, Any]]:
    path = Path(stack.env["PICOBOT_EXAMPLE_PLUGIN_LOG"])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def worker_error(stack: Stack, plugin: str) -> str | None:
    """The plugin's last error as a worker reports it in /health (its heartbeat), or None."""
    for found in stack.health()["checks"]["plugins"].get("workers", {}).values():
        for status in found:
            if status["name"] == plugin and status.get("error"):
                return status["error"]
    return None


def asked(stack: Stack, text: str) -> tuple[dict[str, Any], list[dict[str, Any]], str]:
    """(turn_completed frame, stored history, session id) of one question in a fresh chat."""
    client = stack.client()
    try:
        done = client.ask(text)
        return done, history(client), client.session_id
    finally:
        client.close()


# --- the tests ----------------------------------------------------------------------------


def test_health_and_the_api_list_every_plugin_with_the_broken_one(pstack: Stack) -> None:
    check = pstack.health()["checks"]["plugins"]
    plugins = by_name(check["plugins"])
    example = plugins["example"]
    assert (example["source"], example["version"], example["state"]) == ("entry_point", "0.1.0", "active")
    assert set(STAGE_HOOKS) | {"picobot_tools"} <= set(example["hooks"])
    broken = plugins["broken_import"]
    assert (broken["source"], broken["state"]) == ("file", "failed")
    assert "RuntimeError: e2e: broken at import" in broken["error"]
    assert check["ok"] is True and "broken_import" in check["detail"]  # reported, never a reason to pull the gateway
    assert plugins["bad_output"]["state"] == "active" and plugins["bad_check"]["state"] == "active"
    assert plugins["channels"]["source"] == "builtin"
    assert HTTP.get(pstack.http + "/api/plugins", timeout=10).status_code == 401
    api = HTTP.get(pstack.http + "/api/plugins", headers={"Authorization": f"Bearer {pstack.token}"}, timeout=10)
    assert api.status_code == 200
    assert by_name(api.json()["plugins"])["broken_import"]["state"] == "failed"
    assert by_name(api.json()["plugins"])["example"]["version"] == "0.1.0"


def test_on_input_answers_plugin_ping_without_a_model_call(pstack: Stack, llm: FakeLLM) -> None:
    done, stored, _session = asked(pstack, "plugin ping")
    assert done["status"] == "completed" and done["final_text"] == "example plugin: pong", done
    assert chat_bodies(llm, "plugin ping") == []  # the model never saw it
    assert [(m["role"], m["content"]) for m in stored[-2:]] == [("user", "plugin ping"),
                                                                ("assistant", "example plugin: pong")]


def test_tool_calls_are_denied_rewritten_and_fail_closed(pstack: Stack, llm: FakeLLM) -> None:
    add_rule(llm, "e2e-tools", {"tool_calls": [
        {"name": "example_echo", "arguments": {"text": "hello", "times": 2}},
        {"name": "example_echo", "arguments": {"text": "forbidden-by-plugin"}},
        {"name": "example_echo", "arguments": {"text": "explode-in-check"}},
    ]}, {"content": "Tools done."})
    done, stored, _session = asked(pstack, "run the e2e-tools please")
    assert done["status"] == "completed" and done["final_text"] == "Tools done.", done
    first, second = chat_bodies(llm, "e2e-tools")[-2:]
    spec = next(t["function"] for t in first["tools"] if t["function"]["name"] == "example_echo")
    assert spec["description"].startswith("Repeat a text")
    assert spec["parameters"]["required"] == ["text"]
    assert spec["parameters"]["properties"]["times"] == {
        "type": "integer", "description": "How many times to repeat it (1 to 10).", "default": 1}
    results = [m["content"] for m in second["messages"] if m["role"] == "tool"][-3:]
    assert results[0] == "hello hello [seen by example plugin]"  # after_toolcall
    assert results[1].startswith("[denied] example plugin forbids example_echo")  # before_toolcall's Deny
    assert results[2].startswith("[denied] the plugin bad_check failed")  # an exception denies: fail closed
    assert [m["content"] for m in stored if m["role"] == "tool"][-3:] == results  # stored as the model got them
    wait_for(lambda: "e2e: the checker crashed" in pstack.all_logs(), 10, "the failing check was not logged")
    error = wait_for(lambda: worker_error(pstack, "bad_check"), 15, "no worker reported bad_check's error")
    assert error.startswith("before_toolcall: RuntimeError: e2e: the checker crashed")


def test_before_output_rewrites_the_stored_answer_and_after_output_sees_it(pstack: Stack, llm: FakeLLM) -> None:
    add_rule(llm, "e2e-rewrite", {"content": "The answer is PLUGIN-REWRITE."})
    done, stored, session = asked(pstack, "e2e-rewrite this")
    rewritten = "The answer is rewritten by example plugin."
    assert done["status"] == "completed" and done["final_text"] == rewritten, done  # bad_output raised: skipped
    assert stored[-1]["role"] == "assistant" and stored[-1]["content"] == rewritten
    lines = wait_for(lambda: [e for e in plugin_log(pstack) if e["session_id"] == session and
                              e["hook"] == "after_output"], 10, "after_output wrote no line")
    assert lines == [{"hook": "after_output", "session_id": session, "turn_id": lines[0]["turn_id"],
                      "status": "completed", "final_text": rewritten}]
    hooks = [e["hook"] for e in plugin_log(pstack) if e["session_id"] == session]
    assert hooks == ["pre_action", "post_action", "after_output"]
    post = next(e for e in plugin_log(pstack) if e["session_id"] == session and e["hook"] == "post_action")
    assert post["text"] == "The answer is PLUGIN-REWRITE." and post["tool_calls"] == []  # the model's own text
    wait_for(lambda: "plugin bad_output: before_output failed" in pstack.all_logs(), 10,
             "the failing before_output was not logged with the plugin's name")
    error = wait_for(lambda: worker_error(pstack, "bad_output"), 15, "no worker reported bad_output's error")
    assert error.startswith("before_output: ValueError: e2e: before_output blew up")
    assert "bad_output" in pstack.health()["checks"]["plugins"]["detail"]
