"""`file_search` and `content_search` on real files in a temporary workspace, and in one real turn.

Confinement (.., absolute paths, symlinks out), binary and huge files skipped, the caps, bad regexes,
the time budget against a catastrophic pattern, /stop, hostile arguments (hypothesis); then a turn
through the gateway, the agent loop and the fake LLM that calls both tools.
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.config.loader import load_config
from picobot.domain.messages import ToolCall
from picobot.errors import ToolError, TurnCancelled
from picobot.tools import build_registry
from picobot.tools.base import ToolContext
from picobot.tools.search import MAX_FILES, MAX_MATCHES, ContentSearchTool, FileSearchTool
from tests.conftest import add_rule
from tests.stack import base_config

FILES = FileSearchTool()
CONTENT = ContentSearchTool()


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    ws = tmp_path / "ws"
    ws.mkdir()
    return ToolContext(session_id="s1", channel="test", chat_id="c1", sender_id="u1", turn_id="t1", workspace=ws)


def put(ctx: ToolContext, rel: str, data: str | bytes, mtime: float | None = None) -> Path:
    path = ctx.workspace / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    (path.write_bytes if isinstance(data, bytes) else path.write_text)(data)
    if mtime is not None:
        os.utime(path, (mtime, mtime))
    return path


# --- file_search ----------------------------------------------------------------------------


def test_file_search_globs_newest_first(ctx: ToolContext) -> None:
    put(ctx, "old.py", "", mtime=1_000)
    put(ctx, "src/pkg/new.py", "", mtime=3_000)
    put(ctx, "src/mid.py", "", mtime=2_000)
    put(ctx, "src/notes.md", "")
    assert FILES.execute({"pattern": "*.py"}, ctx).splitlines() == ["src/pkg/new.py", "src/mid.py", "old.py"]
    assert FILES.execute({"pattern": "src/*.py"}, ctx).splitlines() == ["src/mid.py"]
    assert FILES.execute({"pattern": "src/**/*.py"}, ctx).splitlines() == ["src/pkg/new.py", "src/mid.py"]
    assert set(FILES.execute({"pattern": "src/"}, ctx).splitlines()) == {"src/pkg/new.py", "src/mid.py", "src/notes.md"}
    assert FILES.execute({"pattern": "m?d.[pq]y"}, ctx) == "src/mid.py"
    assert FILES.execute({"pattern": "*.rs"}, ctx) == "No files match '*.rs'."


def test_file_search_caps_and_says_how_many_more(ctx: ToolContext) -> None:
    for i in range(MAX_FILES + 7):
        put(ctx, f"many/f{i:03d}.txt", "", mtime=1_000 + i)
    lines = FILES.execute({"pattern": "many/*.txt"}, ctx).splitlines()
    assert len(lines) == MAX_FILES + 1 and lines[0] == f"many/f{MAX_FILES + 6:03d}.txt"
    assert lines[-1] == "[7 more files not shown; narrow the pattern]"


def test_file_search_skips_vcs_and_dependency_folders_unless_named(ctx: ToolContext) -> None:
    put(ctx, ".git/config.py", "")
    put(ctx, "node_modules/lib/index.py", "")
    put(ctx, "app.py", "")
    assert FILES.execute({"pattern": "*.py"}, ctx) == "app.py"
    assert FILES.execute({"pattern": "node_modules/**/*.py"}, ctx) == "node_modules/lib/index.py"


@pytest.mark.parametrize("pattern", ["../*", "../../**/*.py", "/etc/*", "/*", "sub/../../*"])
def test_file_search_refuses_paths_out_of_the_workspace(ctx: ToolContext, pattern: str) -> None:
    put(ctx, "sub/x.py", "")
    with pytest.raises(ToolError, match="outside the workspace"):
        FILES.execute({"pattern": pattern}, ctx)


def test_symlinks_out_of_the_workspace_are_neither_followed_nor_listed(ctx: ToolContext, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("TOP-SECRET-LINE\n")
    put(ctx, "inside.txt", "an inside line\n")
    os.symlink(outside, ctx.workspace / "dirlink")
    os.symlink(outside / "secret.txt", ctx.workspace / "filelink.txt")
    os.symlink(ctx.workspace / "inside.txt", ctx.workspace / "alias.txt")  # inside: listed
    os.symlink("loop", ctx.workspace / "loop")
    listed = FILES.execute({"pattern": "**"}, ctx).splitlines()
    assert sorted(listed) == ["alias.txt", "inside.txt"]
    assert "TOP-SECRET" not in CONTENT.execute({"pattern": "LINE|line"}, ctx)
    assert "alias.txt:1: an inside line" in CONTENT.execute({"pattern": "line"}, ctx)
    with pytest.raises(ToolError, match="outside the workspace"):
        FILES.execute({"pattern": "dirlink/*"}, ctx)
    with pytest.raises(ToolError, match="outside the workspace"):
        CONTENT.execute({"pattern": "x", "glob": "filelink.txt/*"}, ctx)


# --- content_search ---------------------------------------------------------------------------


def test_content_search_lines_context_and_glob(ctx: ToolContext) -> None:
    put(ctx, "a.py", "import os\nvalue = 1\n\nother = 2\nVALUE = 3\n")
    put(ctx, "b.md", "value in prose\n")
    out = CONTENT.execute({"pattern": r"^value\b", "glob": "*.py"}, ctx)
    assert out.splitlines() == ["a.py:2: value = 1", "[1 matching lines in 1 files]"]
    out = CONTENT.execute({"pattern": r"(?i)^value", "glob": "*.py", "context": 1}, ctx)
    assert out.splitlines()[:6] == ["a.py-1- import os", "a.py:2: value = 1", "a.py-3- ",
                                    "a.py-4- other = 2", "a.py:5: VALUE = 3", "[2 matching lines in 1 files]"]
    out = CONTENT.execute({"pattern": "value", "context": 99}, ctx)  # more than 5 is cut to 5
    assert "b.md:1: value in prose" in out and "a.py-1- import os" in out
    assert CONTENT.execute({"pattern": "nowhere"}, ctx) == "No matches for 'nowhere'."
    put(ctx, "sub/c.py", "value here\n")
    assert CONTENT.execute({"pattern": "value", "glob": "sub/c.py"}, ctx).startswith("sub/c.py:1: value here\n")


def test_content_search_gives_separated_groups(ctx: ToolContext) -> None:
    put(ctx, "long.txt", "".join(f"line {i}{' hit' if i in (3, 20) else ''}\n" for i in range(1, 30)))
    lines = CONTENT.execute({"pattern": "hit", "context": 1}, ctx).splitlines()
    assert lines[:7] == ["long.txt-2- line 2", "long.txt:3: line 3 hit", "long.txt-4- line 4", "--",
                         "long.txt-19- line 19", "long.txt:20: line 20 hit", "long.txt-21- line 21"]


def test_binary_and_huge_files_are_skipped(ctx: ToolContext) -> None:
    put(ctx, "bin.dat", b"needle\x00\x01\x02needle")
    put(ctx, "big.txt", "needle\n" + "x" * 3_000_000)
    put(ctx, "small.txt", "a needle\n")
    out = CONTENT.execute({"pattern": "needle"}, ctx)
    assert "small.txt:1: a needle" in out and "bin.dat:" not in out and "big.txt:" not in out
    assert "[skipped files: 1 binary, 1 over 2,000,000 bytes]" in out
    ctx.settings["search_max_file_bytes"] = 5_000_000
    assert "big.txt:1: needle" in CONTENT.execute({"pattern": "needle"}, ctx)


def test_content_search_caps_matches_and_line_length(ctx: ToolContext) -> None:
    put(ctx, "many.txt", "match\n" * (MAX_MATCHES + 50) + "y" * 10_000 + " match\n")
    out = CONTENT.execute({"pattern": "match"}, ctx)
    assert out.count("many.txt:") == MAX_MATCHES
    assert f"[results capped at {MAX_MATCHES} matches; narrow the pattern or glob]" in out
    put(ctx, "wide.txt", "z" * 10_000 + " wide\n")
    out = CONTENT.execute({"pattern": "wide", "glob": "wide.txt"}, ctx)
    assert len(out.splitlines()[0]) < 400 and out.splitlines()[0].endswith("[...]")


@pytest.mark.parametrize("pattern", ["(", "[a-", "a{2,1}", "(?z)", "*x", "\\"])
def test_bad_regex_is_a_clear_tool_error(ctx: ToolContext, pattern: str) -> None:
    with pytest.raises(ToolError, match="Invalid regular expression"):
        CONTENT.execute({"pattern": pattern}, ctx)


def test_a_catastrophic_pattern_ends_with_the_time_budget(ctx: ToolContext) -> None:
    put(ctx, "evil.txt", "a" * 60 + "!\n")  # (a|aa)+$ backtracks through every way to split 60 a's
    ctx.settings["search_timeout_secs"] = 0.5
    out = _within(10, lambda: CONTENT.execute({"pattern": r"(a|aa)+$"}, ctx))
    assert "stopped after 0.5 s" in out


@pytest.mark.parametrize("glob", ["**/" * 300 + "x.txt", "*a" * 30 + "b", "a/" + "*/" * 40 + "*", "**" * 400])
def test_a_hostile_glob_cannot_hang_the_walk(ctx: ToolContext, glob: str) -> None:
    put(ctx, "a/b/c/d/e/f/g/h/i/j/k/l/x.txt", "x\n")
    put(ctx, "a" * 200, "x\n")
    ctx.settings["search_timeout_secs"] = 1
    assert isinstance(_within(10, lambda: FILES.execute({"pattern": glob}, ctx)), str)
    assert isinstance(_within(10, lambda: CONTENT.execute({"pattern": "x", "glob": glob}, ctx)), str)


def test_stop_ends_a_search_under_way(ctx: ToolContext) -> None:
    for i in range(50):
        put(ctx, f"f{i}.txt", "a" * 30 + "!\n")  # a second or two of backtracking each: a minute in all
    threading.Timer(0.3, ctx.cancel.cancel).start()
    with pytest.raises(TurnCancelled):
        _within(10, lambda: CONTENT.execute({"pattern": r"(a|aa)+$"}, ctx))
    with pytest.raises(TurnCancelled):  # already stopped: nothing is walked
        FILES.execute({"pattern": "**"}, ctx)


def _within(seconds: float, fn: Any) -> Any:
    """fn's result; fails the test if fn takes over `seconds` (a hang, not a measurement)."""
    box: dict[str, Any] = {}

    def run() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - re-raised below in the test's thread
            box["error"] = exc

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    assert not worker.is_alive(), f"still running after {seconds} s"
    if "error" in box:
        raise box["error"]
    return box["value"]


def test_special_files_are_ignored_without_hanging(ctx: ToolContext) -> None:
    os.mkfifo(ctx.workspace / "pipe.txt")
    put(ctx, "real.txt", "text\n")
    assert _within(10, lambda: FILES.execute({"pattern": "*.txt"}, ctx)) == "real.txt"
    assert "real.txt:1: text" in _within(10, lambda: CONTENT.execute({"pattern": "text"}, ctx))


# --- hostile arguments ------------------------------------------------------------------------

_JSON = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                     max_leaves=30)
_HOSTILE_TEXT = st.one_of(st.text(max_size=40), st.just("\ud800*.py"), st.just("a\x00b"), st.just("*" * 100_000),
                          st.just("[" * 500), st.just("(" * 200 + ")" * 200), st.just("**/" * 300))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(args=st.dictionaries(st.sampled_from(["pattern", "glob", "context", "path", "x"]),
                            _JSON | _HOSTILE_TEXT, max_size=4))
def test_hostile_arguments_give_a_tool_error_and_nothing_else(ctx: ToolContext, args: dict[str, Any]) -> None:
    put(ctx, "keep.txt", "keep me\n")
    before = sorted(p.name for p in ctx.workspace.rglob("*"))
    for tool in (FILES, CONTENT):
        try:
            result = tool.execute(dict(args), ctx)
        except ToolError:
            continue
        assert isinstance(result, str)
    assert sorted(p.name for p in ctx.workspace.rglob("*")) == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(raw=st.one_of(_JSON.map(json.dumps), st.text(max_size=50), st.just('{"pattern": "' + "[" * 5000 + '"}'),
                     st.just('{"pattern": "a", "context": NaN}'), st.just("[" * 10_000)))
def test_hostile_calls_through_the_registry_are_clear_errors(ctx: ToolContext, raw: str) -> None:
    registry = build_registry()
    for name in ("file_search", "content_search"):
        result = registry.execute(ToolCall(id="c", name=name, arguments=raw), ctx, 20_000)
        assert not result.content.startswith(f"Tool {name} failed:"), result.content  # an unexpected exception


# --- one real turn ----------------------------------------------------------------------------


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:  # the test drains by itself
        pass


@pytest.fixture
def runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:  # type: ignore[no-untyped-def]
    from picobot.app import build_runtime

    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps(base_config(llm.url, 1)))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-search-tools")
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.setenv("PICOBOT_WORKSPACE", str(tmp_path / "turn-ws"))
    rt = build_runtime(load_config(), _NoQueue(), migrate=True)
    yield rt
    rt.close()


def test_schemas_as_sent_stay_small() -> None:
    sizes = {t.name: len(json.dumps({"type": "function", "function": {"name": t.name, "description": t.description,
                                                                      "parameters": t.parameters}}, ensure_ascii=False))
             for t in (FILES, CONTENT)}
    assert sizes["file_search"] <= 340 and sizes["content_search"] <= 440, sizes


def test_both_tools_work_in_a_real_turn(runtime: Any, llm, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.runtime.turn_runner import drain_session

    ws = tmp_path / "turn-ws"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "main.py").write_text("def handler():\n    return 42\n")
    calls = [{"name": "file_search", "arguments": {"pattern": "**/*.py"}},
             {"name": "content_search", "arguments": {"pattern": r"return \d+", "glob": "*.py"}}]
    add_rule(llm, "find-it", {"tool_calls": calls}, {"content": "found"})
    reply = Gateway(runtime).submit(InboundMessage("cli_chat", "search", "u1", "find-it"))
    assert drain_session(runtime, reply.session_id) == 1
    last = [r["body"] for r in llm.requests() if r["path"].endswith("/chat/completions")][-1]
    results = [m["content"] for m in last["messages"] if m["role"] == "tool"]
    assert results[0] == "src/main.py"
    assert results[1].startswith("src/main.py:2:     return 42")
    offered = {t["function"]["name"] for t in last["tools"]}
    assert {"file_search", "content_search"} <= offered
