"""Tests for the built-in tools and the tool registry (real processes, files and HTTP)."""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.domain.messages import ToolCall
from picobot.errors import ToolError, TurnCancelled
from picobot.tools import SHELL_TOOL_NAME, build_registry, builtin_tools
from picobot.tools.base import Tool, ToolContext
from picobot.tools.calculator import CalculatorTool
from picobot.tools.clock import ClockTool
from picobot.tools.files import EditFileTool, ReadFileTool, WriteFileTool
from picobot.tools.http import HttpRequestTool
from picobot.tools.registry import ToolRegistry, truncate
from picobot.tools.session_message import SendSessionMessageTool
from picobot.tools.shell import ShellTool
from picobot.tools.web_fetch import WebFetchTool, html_to_text

posix_only = pytest.mark.skipif(os.name == "nt", reason="POSIX shell and symlinks")


# --- fixtures -----------------------------------------------------------------------


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(
        session_id="s1",
        channel="test",
        chat_id="c1",
        sender_id="u1",
        turn_id="t1",
        workspace=tmp_path / "ws",
        # The test HTTP server listens on loopback, which the network guard refuses by default.
        settings={"network": {"allow": ["127.0.0.1"]},
                  # Plain bash: these tests watch host pids; tests/test_sandbox.py covers the sandbox.
                  "bash": {"sandbox": "none"}},
    )


@pytest.fixture
def ws(ctx: ToolContext) -> Path:
    ctx.workspace.mkdir(parents=True, exist_ok=True)
    return ctx.workspace


@pytest.fixture(autouse=True)
def _no_proxies(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        monkeypatch.delenv(name, raising=False)


PAGE_HTML = """<!DOCTYPE html>
<html><head><title>Test  Page</title>
<style>body { color: red; } .secret-style {}</style>
<script>var secretScript = "do not show";</script>
</head><body>
<nav><a href="/">Home nav link</a></nav>
<h1>Main Heading</h1>
<p>First   paragraph with
   <b>bold</b> text and a <a href="/docs">docs link</a>.</p>
<h2>Sub heading</h2>
<ul><li>Apple</li><li>Banana</li></ul>
<noscript>Enable JavaScript please</noscript>
<script type="text/javascript">document.write("hidden");</script>
</body></html>"""


STALLED = threading.Event()  # set when /stall has sent the start of its body


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:
        pass

    def _stall(self) -> None:
        """Headers and a few bytes of body, then nothing for 20 s: only a cut ends the read early."""
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", "100000")
        self.end_headers()
        self.wfile.write(b"first bytes ")
        self.wfile.flush()
        STALLED.set()
        time.sleep(20)

    def _send(self, status: int, body: bytes, content_type: str, extra: dict[str, str] | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def do_GET(self) -> None:
        path = self.path.split("?")[0]
        if path == "/page.html":
            self._send(200, PAGE_HTML.encode(), "text/html; charset=utf-8")
        elif path == "/data.json":
            self._send(200, b'{"name": "pico", "items": [1, 2, 3]}', "application/json")
        elif path == "/text":
            self._send(200, "plain text body \u00e9".encode(), "text/plain; charset=utf-8")
        elif path == "/binary":
            self._send(200, b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4, "image/png")
        elif path == "/redirect":
            self._send(302, b"", "text/plain", {"Location": "/page.html"})
        elif path == "/missing":
            self._send(404, b"<html><body><p>No such page</p></body></html>", "text/html")
        elif path == "/big":
            self._send(200, b"x" * 50_000, "text/plain")
        elif path == "/slow":
            time.sleep(2)
            self._send(200, b"late", "text/plain")
        elif path == "/stall":
            self._stall()
        elif path == "/echo-headers":
            self._send(200, json.dumps(dict(self.headers.items())).encode(), "application/json")
        else:
            self._send(404, b"not found", "text/plain")

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode()
        echo = {"method": "POST", "content_type": self.headers.get("Content-Type"), "body": body}
        self._send(201, json.dumps(echo).encode(), "application/json", {"X-RateLimit-Remaining": "41"})


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(name: str, args: dict[str, Any] | str, call_id: str = "call_1") -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments=args if isinstance(args, str) else json.dumps(args))


# --- registry -------------------------------------------------------------------------


class EchoTool(Tool):
    name = "echo"
    description = "Echo the text."
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string"},
            "items": {"type": "array", "items": {"type": "integer"}},
            "mode": {"type": "string", "enum": ["a", "b"]},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return args["text"]


class RaisingTool(Tool):
    name = "boom"
    description = "Fails."

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        raise self.exc


@pytest.fixture
def registry() -> ToolRegistry:
    reg = ToolRegistry()
    reg.register(EchoTool())
    return reg


def test_register_get_names_specs_unregister(registry: ToolRegistry) -> None:
    registry.register(CalculatorTool())
    assert registry.names() == ["echo", "calculator"]
    assert isinstance(registry.get("calculator"), CalculatorTool)
    assert registry.get("nope") is None
    assert "echo" in registry and len(registry) == 2
    spec = registry.specs()[1]
    sent = {k: v for k, v in CalculatorTool.parameters.items() if k != "additionalProperties"}
    assert (spec.name, spec.parameters) == ("calculator", sent)  # the model is not sent what only validation needs
    assert isinstance(registry.unregister("calculator"), CalculatorTool)
    assert registry.unregister("calculator") is None
    assert registry.names() == ["echo"]


def test_unknown_arguments_are_refused_though_the_model_schema_omits_the_rule(registry: ToolRegistry) -> None:
    registry.register(CalculatorTool())
    assert "additionalProperties" not in registry.specs()[1].parameters
    assert registry.narrowed(lambda t: True).specs()[1].parameters == registry.specs()[1].parameters
    ctx = ToolContext(session_id="s", channel="web", chat_id="c", sender_id="u", turn_id="t", workspace=Path("."))
    res = registry.execute(ToolCall(id="1", name="calculator", arguments='{"expression": "1+1", "x": 1}'), ctx, 0)
    assert res.is_error and "x" in res.content
    assert registry.execute(ToolCall(id="2", name="calculator", arguments='{"expression": "1+1"}'), ctx, 0).content == "2"


def test_register_duplicate_and_bad_schema(registry: ToolRegistry) -> None:
    with pytest.raises(ValueError, match="already registered"):
        registry.register(EchoTool())

    class BadSchema(Tool):
        name = "bad"
        parameters = {"type": "object", "properties": {"x": {"type": 12}}}

    with pytest.raises(ValueError, match="invalid parameters schema"):
        registry.register(BadSchema())
    with pytest.raises(ValueError, match="no name"):
        registry.register(Tool())


def test_execute_success(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = registry.execute(call("echo", {"text": "hi"}), ctx, 1000)
    assert (result.content, result.is_error) == ("hi", False)


def test_unknown_tool_lists_available(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = registry.execute(call("frobnicate", {}), ctx, 1000)
    assert result.is_error
    assert "'frobnicate'" in result.content and "echo" in result.content


def test_invalid_json_quotes_first_200_chars(registry: ToolRegistry, ctx: ToolContext) -> None:
    raw = '{"text": "abc' + "z" * 500
    result = registry.execute(call("echo", raw), ctx, 5000)
    assert result.is_error
    assert "not valid JSON" in result.content
    assert raw[:200] in result.content and raw[:201] not in result.content
    assert f"({len(raw) - 200} more characters)" in result.content
    assert "line 1 column 10" in result.content


def test_json_that_is_not_an_object(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = registry.execute(call("echo", "[1, 2]"), ctx, 1000)
    assert result.is_error and "must be a JSON object" in result.content and "[1, 2]" in result.content


def test_empty_arguments_mean_empty_object(registry: ToolRegistry, ctx: ToolContext) -> None:
    registry.register(ClockTool())
    assert not registry.execute(call("get_time", ""), ctx, 1000).is_error
    result = registry.execute(call("echo", "  "), ctx, 1000)
    assert result.is_error and "'text' is a required property" in result.content


def test_schema_errors_list_paths_reasons_and_summary(registry: ToolRegistry, ctx: ToolContext) -> None:
    args = {"text": 5, "items": [1, "two"], "mode": "c", "extra": True}
    result = registry.execute(call("echo", args), ctx, 5000)
    assert result.is_error
    text = result.content
    assert "Invalid arguments for tool echo" in text
    assert "$.text: 5 is not of type 'string'" in text
    assert "$.items[1]: 'two' is not of type 'integer'" in text
    assert "$.mode:" in text and "is not one of" in text
    assert "$: Additional properties are not allowed ('extra' was unexpected)" in text
    assert 'Expected arguments: {text: string, items?: array of integer, mode?: "a" | "b"}' in text
    assert "no other properties allowed" in text


def test_tool_error_becomes_error_result(registry: ToolRegistry, ctx: ToolContext) -> None:
    registry.register(RaisingTool(ToolError("the file is locked")))
    result = registry.execute(call("boom", {}), ctx, 1000)
    assert (result.content, result.is_error) == ("the file is locked", True)


def test_turn_cancelled_propagates(registry: ToolRegistry, ctx: ToolContext) -> None:
    registry.register(RaisingTool(TurnCancelled("stopped")))
    with pytest.raises(TurnCancelled):
        registry.execute(call("boom", {}), ctx, 1000)
    ctx.cancel.cancel("user stop")
    with pytest.raises(TurnCancelled):
        registry.execute(call("echo", {"text": "x"}), ctx, 1000)


def test_unexpected_exception_is_reported_and_logged(
    registry: ToolRegistry, ctx: ToolContext, caplog: pytest.LogCaptureFixture
) -> None:
    registry.register(RaisingTool(RuntimeError("kaput")))
    with caplog.at_level(logging.ERROR, logger="picobot.tools"):
        result = registry.execute(call("boom", {}), ctx, 1000)
    assert result.is_error and result.content == "Tool boom failed: RuntimeError: kaput"
    record = next(r for r in caplog.records if r.name == "picobot.tools")
    assert record.exc_info is not None and "RuntimeError" in caplog.text


def test_truncation_marker(registry: ToolRegistry, ctx: ToolContext) -> None:
    result = registry.execute(call("echo", {"text": "a" * 150}), ctx, 100)
    assert result.content.startswith("a" * 100)
    assert "truncated: 50 more characters" in result.content
    assert truncate("short", 100) == "short"
    assert truncate("x" * 10, 0) == "x" * 10


def test_build_registry_builtins_and_disabled() -> None:
    expected = ["calculator", "get_time", "read", "write", "edit", "file_search", "content_search", SHELL_TOOL_NAME,
                "http_request", "web_fetch", "send_session_message"]
    assert build_registry().names() == expected
    assert [t.name for t in builtin_tools()] == expected
    for disabled in (["bash"], ["shell"]):
        names = build_registry(disabled=disabled).names()
        assert "bash" not in names and "shell" not in names
    names = build_registry(disabled=["write", "web_fetch"], extra=[EchoTool()]).names()
    assert "write" not in names and "web_fetch" not in names and names[-1] == "echo"
    # a plugin's tool that takes a built-in's name is skipped (and logged): the built-in stays, nothing crashes
    twice = CalculatorTool()
    registry = build_registry(extra=[twice])
    assert registry.names() == expected and registry.get("calculator") is not twice


SELF_EXPLAINING = {"path", "url", "method", "headers", "channel"}


def test_every_builtin_has_llm_ready_schema() -> None:
    for tool in builtin_tools():
        schema = tool.parameters
        assert len(tool.description) > 60, tool.name
        assert schema["type"] == "object" and schema["additionalProperties"] is False, tool.name
        assert set(schema["required"]) <= set(schema["properties"]), tool.name
        for prop, spec in schema["properties"].items():  # a name that says it all spends no prompt on a description
            assert spec.get("description") or prop in SELF_EXPLAINING, f"{tool.name}.{prop}"
    read_only = {t.name for t in builtin_tools() if t.read_only}
    assert read_only == {"calculator", "get_time", "read", "file_search", "content_search", "web_fetch"}


# --- calculator -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "expression, expected",
    [
        ("1 + 2 * 3", "7"),
        ("(1 + 2) * 3", "9"),
        ("2 ** 10", "1024"),
        ("7 / 2", "3.5"),
        ("6 / 3", "2"),
        ("7 // 2", "3"),
        ("-7 % 3", "2"),
        ("+-3", "-3"),
        ("2 ** -1", "0.5"),
        ("0.1 + 0.2", "0.3"),
        ("sqrt(16)", "4"),
        ("sqrt(2)", "1.4142135623731"),
        ("pi", "3.14159265358979"),
        ("e", "2.71828182845905"),
        ("log(1000, 10)", "3"),
        ("log10(0.001)", "-3"),
        ("exp(0)", "1"),
        ("sin(0) + cos(0) + tan(0)", "1"),
        ("round(2.567, 2)", "2.57"),
        ("round(2.5)", "2"),
        ("floor(-2.5)", "-3"),
        ("ceil(2.1)", "3"),
        ("abs(-3)", "3"),
        ("max(1, 5, 3)", "5"),
        ("min(4, -2)", "-2"),
        ("2 ** 100", "1267650600228229401496703205376"),
        ("1e20", "1e+20"),
    ],
)
def test_calculator_values(ctx: ToolContext, expression: str, expected: str) -> None:
    assert CalculatorTool().execute({"expression": expression}, ctx) == expected


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os')", "Unknown function '__import__'"),
        ("__import__('os').system('id')", "Attribute access"),
        ("(1).__class__", "Attribute access"),
        ("os", "Unknown name 'os'"),
        ("x + 1", "Unknown name 'x'"),
        ("lambda: 1", "lambda"),
        ("(lambda x: x)(1)", "cannot be called"),
        ("'a' * 3", "Only numbers"),
        ("True + 1", "Only numbers"),
        ("[1, 2][0]", "Indexing"),
        ("1 if 1 else 2", "conditional"),
        ("1 < 2", "comparison"),
        ("print(1)", "Unknown function 'print'"),
        ("abs(x=1)", "positional"),
        ("max()", "at least one argument"),
        ("2 ^ 3", "use ** for powers"),
        ("2 ** 100000", "Exponent 100000 is too large"),
        ("9 ** 9 ** 9", "too large"),
        ("10 ** 2000", "more than 1000 digits"),
        ("10 ** 999 * 10 ** 999", "more than 1000 digits"),
        ("2.5 ** 9999", "too large"),
        ("exp(1000)", "too large"),
        ("1e400", "not a finite number"),
        ("1 / 0", "Division by zero"),
        ("5 // 0", "Division by zero"),
        ("5 % 0", "Division by zero"),
        ("0 ** -1", "Division by zero"),
        ("sqrt(-1)", "Math error"),
        ("(-8) ** 0.5", "complex"),
        ("1 +", "Syntax error"),
        ("", "empty"),
        ("1" + "+1" * 1500, "too long"),
    ],
)
def test_calculator_refuses(ctx: ToolContext, expression: str, message: str) -> None:
    with pytest.raises(ToolError) as info:
        CalculatorTool().execute({"expression": expression}, ctx)
    assert message.lower() in str(info.value).lower()


def test_calculator_never_executes_code(ctx: ToolContext, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    expr = f"__import__('os').system('touch {marker}')"
    result = build_registry().execute(call("calculator", {"expression": expr}), ctx, 1000)
    assert result.is_error and not marker.exists()


# --- clock ----------------------------------------------------------------------------


def _fixed_clock() -> ClockTool:
    return ClockTool(now=lambda: datetime(2024, 1, 15, 12, 0, 30, 123456, tzinfo=timezone.utc))


def test_get_time_in_named_zone(ctx: ToolContext) -> None:
    text = _fixed_clock().execute({"timezone": "Europe/Paris"}, ctx)
    assert text.splitlines() == [
        "2024-01-15T13:00:30+01:00",
        "Weekday: Monday",
        "UTC offset: UTC+01:00",
        "Time zone: Europe/Paris (CET)",
    ]


def test_get_time_defaults_to_context_zone(ctx: ToolContext) -> None:
    ctx.timezone = "America/St_Johns"
    text = _fixed_clock().execute({}, ctx)
    assert text.startswith("2024-01-15T08:30:30-03:30")
    assert "UTC offset: UTC-03:30" in text and "America/St_Johns" in text


def test_get_time_real_clock_utc(ctx: ToolContext) -> None:
    first = ClockTool().execute({}, ctx).splitlines()[0]
    moment = datetime.fromisoformat(first)
    assert abs((datetime.now(timezone.utc) - moment).total_seconds()) < 5
    assert moment.utcoffset().total_seconds() == 0


def test_get_time_unknown_zone(ctx: ToolContext) -> None:
    with pytest.raises(ToolError, match="Mars/Olympus_Mons"):
        ClockTool().execute({"timezone": "Mars/Olympus_Mons"}, ctx)
    with pytest.raises(ToolError, match="Unknown time zone"):
        ClockTool().execute({"timezone": "../../etc/passwd"}, ctx)


# --- files ----------------------------------------------------------------------------


def test_write_creates_workspace_and_parents_then_read(ctx: ToolContext) -> None:
    assert not ctx.workspace.exists()
    out = WriteFileTool().execute({"path": "a/b/note.txt", "content": "héllo\nworld\n"}, ctx)
    assert out == "Created a/b/note.txt (13 bytes written)."
    assert (ctx.workspace / "a/b/note.txt").read_text(encoding="utf-8") == "héllo\nworld\n"
    assert ReadFileTool().execute({"path": "a/b/note.txt"}, ctx) == "     1\théllo\n     2\tworld"
    again = WriteFileTool().execute({"path": "a/b/note.txt", "content": ""}, ctx)
    assert again.startswith("Overwrote") and "0 bytes" in again
    assert ReadFileTool().execute({"path": "a/b/note.txt"}, ctx) == "(a/b/note.txt is empty)"


def test_read_slices_and_paging_hint(ctx: ToolContext, ws: Path) -> None:
    (ws / "big.txt").write_text("".join(f"line {i}\n" for i in range(1, 101)))
    text = ReadFileTool().execute({"path": "big.txt", "offset": 10, "limit": 3}, ctx)
    lines = text.splitlines()
    assert lines[:3] == ["    10\tline 10", "    11\tline 11", "    12\tline 12"]
    assert "offset=13" in text
    tail = ReadFileTool().execute({"path": "big.txt", "offset": 99}, ctx)
    assert tail == "    99\tline 99\n   100\tline 100"
    with pytest.raises(ToolError, match="past the end.*100 lines"):
        ReadFileTool().execute({"path": "big.txt", "offset": 500}, ctx)


def test_read_caps_size_and_long_lines(ctx: ToolContext, ws: Path) -> None:
    (ws / "wide.txt").write_text("y" * 5000 + "\n" + "short\n" * 2000)
    ctx.settings["read_max_chars"] = 3000
    text = ReadFileTool().execute({"path": "wide.txt"}, ctx)
    assert "line truncated: 3000 more characters" in text and "     2\tshort" in text
    assert len(text) < 4000 and "more lines follow" in text


def test_read_refuses_binary_directory_and_missing(ctx: ToolContext, ws: Path) -> None:
    (ws / "img.png").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    with pytest.raises(ToolError, match="binary file.*image/png"):
        ReadFileTool().execute({"path": "img.png"}, ctx)
    (ws / "dir").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        ReadFileTool().execute({"path": "dir"}, ctx)
    with pytest.raises(ToolError, match="File not found: nope.txt"):
        ReadFileTool().execute({"path": "nope.txt"}, ctx)


def test_edit_unique_many_none_and_replace_all(ctx: ToolContext, ws: Path) -> None:
    target = ws / "code.py"
    target.write_text("a = 1\nb = 1\nc = 2\n")
    out = EditFileTool().execute({"path": "code.py", "old_text": "c = 2", "new_text": "c = 3"}, ctx)
    assert out == "Replaced 1 occurrence in code.py."
    assert target.read_text() == "a = 1\nb = 1\nc = 3\n"
    with pytest.raises(ToolError, match="occurs 2 times.*replace_all"):
        EditFileTool().execute({"path": "code.py", "old_text": "= 1", "new_text": "= 9"}, ctx)
    with pytest.raises(ToolError, match="not found"):
        EditFileTool().execute({"path": "code.py", "old_text": "zzz", "new_text": "y"}, ctx)
    with pytest.raises(ToolError, match="identical"):
        EditFileTool().execute({"path": "code.py", "old_text": "a", "new_text": "a"}, ctx)
    args = {"path": "code.py", "old_text": "= 1", "new_text": "= 9", "replace_all": True}
    assert EditFileTool().execute(args, ctx) == "Replaced 2 occurrences in code.py."
    assert target.read_text() == "a = 9\nb = 9\nc = 3\n"


def test_edit_matches_crlf_files(ctx: ToolContext, ws: Path) -> None:
    (ws / "win.txt").write_bytes(b"one\r\ntwo\r\nthree\r\n")
    EditFileTool().execute({"path": "win.txt", "old_text": "one\ntwo", "new_text": "1\n2"}, ctx)
    assert (ws / "win.txt").read_bytes() == b"1\r\n2\r\nthree\r\n"


def test_paths_inside_workspace_are_allowed(ctx: ToolContext, ws: Path) -> None:
    (ws / "sub").mkdir()
    (ws / "x.txt").write_text("x\n")
    assert "x" in ReadFileTool().execute({"path": "sub/../x.txt"}, ctx)
    assert "x" in ReadFileTool().execute({"path": str(ws / "x.txt")}, ctx)


@pytest.mark.parametrize("path", ["../outside.txt", "sub/../../outside.txt", "/etc/passwd"])
def test_file_tools_refuse_escapes(ctx: ToolContext, ws: Path, path: str) -> None:
    (ws.parent / "outside.txt").write_text("secret\n")
    with pytest.raises(ToolError, match="outside the workspace"):
        ReadFileTool().execute({"path": path}, ctx)
    with pytest.raises(ToolError, match="outside the workspace"):
        WriteFileTool().execute({"path": path, "content": "pwned"}, ctx)
    with pytest.raises(ToolError, match="outside the workspace"):
        EditFileTool().execute({"path": path, "old_text": "secret", "new_text": "pwned"}, ctx)
    assert (ws.parent / "outside.txt").read_text() == "secret\n"


def test_file_tools_refuse_absolute_path_outside(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "other" / "f.txt"
    with pytest.raises(ToolError, match="outside the workspace"):
        WriteFileTool().execute({"path": str(outside), "content": "x"}, ctx)
    assert not outside.exists()


@posix_only
def test_file_tools_refuse_symlink_escapes(ctx: ToolContext, ws: Path, tmp_path: Path) -> None:
    secret_dir = tmp_path / "secret"
    secret_dir.mkdir()
    (secret_dir / "key.txt").write_text("top secret\n")
    (ws / "link_dir").symlink_to(secret_dir)
    (ws / "link_file").symlink_to(secret_dir / "key.txt")
    for path in ("link_dir/key.txt", "link_file"):
        with pytest.raises(ToolError, match="outside the workspace"):
            ReadFileTool().execute({"path": path}, ctx)
        with pytest.raises(ToolError, match="outside the workspace"):
            EditFileTool().execute({"path": path, "old_text": "top", "new_text": "no"}, ctx)
    with pytest.raises(ToolError, match="outside the workspace"):
        WriteFileTool().execute({"path": "link_dir/new.txt", "content": "x"}, ctx)
    assert not (secret_dir / "new.txt").exists()
    assert (secret_dir / "key.txt").read_text() == "top secret\n"
    (ws / "inner.txt").write_text("fine\n")
    (ws / "inner_link").symlink_to(ws / "inner.txt")
    assert "fine" in ReadFileTool().execute({"path": "inner_link"}, ctx)


# --- shell ----------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    if stat.parent.exists():
        try:
            return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
        except (FileNotFoundError, ProcessLookupError):
            return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_dead(pid: int, within: float = 2.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not _alive(pid):
            return True
        time.sleep(0.02)
    return False


@posix_only
def test_bash_runs_in_workspace_with_interleaved_output(ctx: ToolContext) -> None:
    out = ShellTool().execute({"command": "pwd; echo out; echo err >&2; echo out2"}, ctx)
    lines = out.splitlines()
    assert lines[0] == "Exit code: 0"
    assert lines[1] == str(ctx.workspace.resolve())
    assert lines[2:] == ["out", "err", "out2"]


@posix_only
def test_bash_reports_nonzero_exit_and_empty_output(ctx: ToolContext) -> None:
    assert ShellTool().execute({"command": "exit 3"}, ctx) == "Exit code: 3\n(no output)"


@posix_only
def test_bash_caps_output_keeping_head_and_tail(ctx: ToolContext) -> None:
    ctx.settings["bash_output_max_chars"] = 1000
    out = ShellTool().execute({"command": "echo START; head -c 3000000 /dev/zero | tr '\\0' x; echo; echo END"}, ctx)
    assert "START" in out and out.rstrip().endswith("END")
    assert "characters of output omitted" in out and len(out) < 1200


@posix_only
def test_bash_timeout_kills_process_group(ctx: ToolContext, ws: Path) -> None:
    start = time.monotonic()
    with pytest.raises(ToolError, match="timed out after 1 s") as info:
        command = "sleep 30 & echo $! > child.pid; echo started; sleep 30"
        ShellTool().execute({"command": command, "timeout_secs": 1}, ctx)
    assert time.monotonic() - start < 4
    assert "started" in str(info.value)
    assert _wait_dead(int((ws / "child.pid").read_text()))


@posix_only
def test_bash_cancel_from_another_thread(ctx: ToolContext, ws: Path) -> None:
    timer = threading.Timer(0.3, ctx.cancel.cancel, args=("user pressed stop",))
    start = time.monotonic()
    timer.start()
    try:
        with pytest.raises(TurnCancelled, match="user pressed stop"):
            ShellTool().execute({"command": "sleep 30 & echo $! > child.pid; sleep 30"}, ctx)
    finally:
        timer.cancel()
    assert time.monotonic() - start < 1.3
    assert _wait_dead(int((ws / "child.pid").read_text()), within=1.0)


@posix_only
def test_bash_already_cancelled_does_not_run(ctx: ToolContext, ws: Path) -> None:
    ctx.cancel.cancel()
    with pytest.raises(TurnCancelled):
        ShellTool().execute({"command": "touch ran"}, ctx)
    assert not (ws / "ran").exists()


@posix_only
def test_bash_returns_when_background_job_holds_output(ctx: ToolContext) -> None:
    start = time.monotonic()
    out = ShellTool().execute({"command": "echo $$; sleep 20 &"}, ctx)
    pgid = int(out.splitlines()[1])
    try:
        assert time.monotonic() - start < 3
        assert "background processes" in out
    finally:
        os.killpg(pgid, 9)


def test_shell_tool_schema_via_registry(ctx: ToolContext) -> None:
    result = build_registry().execute(call(SHELL_TOOL_NAME, {"command": "echo hi", "timeout_secs": 601}), ctx, 1000)
    assert result.is_error and "601 is greater than the maximum of 600" in result.content


# --- http_request ---------------------------------------------------------------------


def test_http_get_json(ctx: ToolContext, server: str) -> None:
    out = HttpRequestTool().execute({"method": "GET", "url": f"{server}/data.json"}, ctx)
    assert out.startswith("HTTP 200 OK\n")
    assert "content-type: application/json" in out
    assert '{"name": "pico", "items": [1, 2, 3]}' in out
    assert "server:" not in out.lower()  # unselected headers are left out
    assert "Final URL" not in HttpRequestTool().execute({"method": "GET", "url": server}, ctx)


def test_http_post_json_and_body(ctx: ToolContext, server: str) -> None:
    out = HttpRequestTool().execute({"method": "POST", "url": f"{server}/echo", "json": {"a": 1}}, ctx)
    assert out.startswith("HTTP 201 Created")
    assert "x-ratelimit-remaining: 41" in out
    echo = json.loads(out.split("\n\n", 1)[1])
    assert echo["content_type"] == "application/json" and json.loads(echo["body"]) == {"a": 1}
    args = {"method": "POST", "url": f"{server}/echo", "body": "k=v", "headers": {"Content-Type": "text/plain"}}
    echo = json.loads(HttpRequestTool().execute(args, ctx).split("\n\n", 1)[1])
    assert (echo["body"], echo["content_type"]) == ("k=v", "text/plain")
    with pytest.raises(ToolError, match="either body or json"):
        HttpRequestTool().execute({"method": "POST", "url": f"{server}/echo", "body": "x", "json": {}}, ctx)


def test_http_head_binary_404_and_redirect(ctx: ToolContext, server: str) -> None:
    tool = HttpRequestTool()
    assert "(empty body)" in tool.execute({"method": "HEAD", "url": f"{server}/data.json"}, ctx)
    binary = tool.execute({"method": "GET", "url": f"{server}/binary"}, ctx)
    assert "[binary body not shown: image/png, 1032 bytes]" in binary and "PNG" not in binary
    assert tool.execute({"method": "GET", "url": f"{server}/missing"}, ctx).startswith("HTTP 404 Not Found")
    redirected = tool.execute({"method": "GET", "url": f"{server}/redirect"}, ctx)
    assert f"Final URL: {server}/page.html" in redirected and "<h1>Main Heading</h1>" in redirected


def test_http_never_echoes_authorization(ctx: ToolContext, server: str) -> None:
    args = {
        "method": "GET",
        "url": f"{server}/echo-headers",
        "headers": {"Authorization": "Bearer sekrit-token-123", "X-Trace": "visible"},
    }
    out = HttpRequestTool().execute(args, ctx)
    assert "sekrit-token-123" not in out and "[redacted]" in out and "visible" in out


def test_http_caps_body(ctx: ToolContext, server: str) -> None:
    ctx.settings["http_max_chars"] = 1000
    out = HttpRequestTool().execute({"method": "GET", "url": f"{server}/big"}, ctx)
    assert "truncated: 49000 more characters" in out
    ctx.settings["http_max_bytes"] = 10_000
    out = HttpRequestTool().execute({"method": "GET", "url": f"{server}/big"}, ctx)
    assert "body cut at the 10000 bytes download limit" in out


@pytest.mark.parametrize("url", ["ftp://example.com/x", "file:///etc/passwd", "http:///nohost", "example.com"])
def test_http_rejects_bad_urls(ctx: ToolContext, url: str) -> None:
    with pytest.raises(ToolError, match="http://|no host"):
        HttpRequestTool().execute({"method": "GET", "url": url}, ctx)


def test_http_connection_errors(ctx: ToolContext, server: str) -> None:
    with pytest.raises(ToolError, match="Could not connect to 127.0.0.1"):
        HttpRequestTool().execute({"method": "GET", "url": f"http://127.0.0.1:{_closed_port()}/"}, ctx)
    with pytest.raises(ToolError, match="timed out after 0.3 s"):
        HttpRequestTool().execute({"method": "GET", "url": f"{server}/slow", "timeout_secs": 0.3}, ctx)


def test_http_refuses_loopback_unless_allowed(ctx: ToolContext, server: str) -> None:
    ctx.settings["network"] = {"allow": []}
    with pytest.raises(ToolError, match=r"Refused to connect to 127\.0\.0\.1:\d+: it is a loopback address") as info:
        HttpRequestTool().execute({"method": "GET", "url": f"{server}/data.json"}, ctx)
    assert '"127.0.0.1/32" to tools.network.allow' in str(info.value)


def test_http_schema_rejects_unknown_method(ctx: ToolContext, server: str) -> None:
    result = build_registry().execute(call("http_request", {"method": "FETCH", "url": server}), ctx, 1000)
    assert result.is_error and "$.method" in result.content


# --- web_fetch ------------------------------------------------------------------------


def test_web_fetch_html_to_readable_text(ctx: ToolContext, server: str) -> None:
    out = WebFetchTool().execute({"url": f"{server}/page.html"}, ctx)
    assert out.startswith("Title: Test Page\n")
    assert "# Main Heading" in out and "## Sub heading" in out
    assert f"First paragraph with bold text and a docs link ({server}/docs)." in out
    assert "- Apple\n- Banana" in out
    for hidden in ("secretScript", "color: red", "Home nav link", "Enable JavaScript", "document.write", "<p>"):
        assert hidden not in out


def test_web_fetch_json_text_and_redirect(ctx: ToolContext, server: str) -> None:
    tool = WebFetchTool()
    assert '{"name": "pico", "items": [1, 2, 3]}' in tool.execute({"url": f"{server}/data.json"}, ctx)
    assert "plain text body \u00e9" in tool.execute({"url": f"{server}/text"}, ctx)
    redirected = tool.execute({"url": f"{server}/redirect"}, ctx)
    assert "Title: Test Page" in redirected and f"URL: {server}/page.html" in redirected


def test_web_fetch_errors(ctx: ToolContext, server: str) -> None:
    tool = WebFetchTool()
    with pytest.raises(ToolError, match="(?s)HTTP 404 Not Found.*No such page"):
        tool.execute({"url": f"{server}/missing"}, ctx)
    with pytest.raises(ToolError, match="not a text page.*image/png"):
        tool.execute({"url": f"{server}/binary"}, ctx)
    with pytest.raises(ToolError, match="Only http"):
        tool.execute({"url": "javascript:alert(1)"}, ctx)
    with pytest.raises(ToolError, match="Could not connect"):
        tool.execute({"url": f"http://127.0.0.1:{_closed_port()}/"}, ctx)


def test_web_fetch_refuses_loopback_unless_allowed(ctx: ToolContext, server: str) -> None:
    ctx.settings.pop("network")
    with pytest.raises(ToolError, match=r"Refused to connect to 127\.0\.0\.1:\d+: it is a loopback address"):
        WebFetchTool().execute({"url": f"{server}/page.html"}, ctx)


def test_web_fetch_caps(ctx: ToolContext, server: str) -> None:
    out = WebFetchTool().execute({"url": f"{server}/big", "max_chars": 500}, ctx)
    assert "truncated:" in out and len(out) < 600
    ctx.settings["web_fetch_max_bytes"] = 1000
    out = WebFetchTool().execute({"url": f"{server}/big", "max_chars": 100_000}, ctx)
    assert "page cut at the 1000 byte download limit" in out and "x" * 1000 in out and "x" * 1001 not in out


def test_html_to_text_details() -> None:
    html = (
        "<title>T</title><ul><li>a<ul><li>nested</li></ul></li></ul><p>x<br>y</p>"
        "<pre>  keep\n    indent</pre><table><tr><th>A</th><th>B</th></tr></table>"
        '<p><a href="https://x.org/">https://x.org/</a> <a href="#top">top</a> <a href="rel">rel</a></p>'
    )
    title, text = html_to_text(html, "https://site.test/dir/page")
    assert title == "T"
    assert "- a\n  - nested" in text
    assert "x\ny" in text and "  keep\n    indent" in text and "A | B" in text
    assert "https://x.org/ top rel (https://site.test/dir/rel)" in text


# --- send_session_message ---------------------------------------------------------------


def test_send_session_message(ctx: ToolContext) -> None:
    sent: list[tuple[str, str | None, str | None]] = []

    def send(text: str, *, channel: str | None = None, chat_id: str | None = None) -> str:
        sent.append((text, channel, chat_id))
        return f"delivered #{len(sent)}"

    ctx.send_message = send
    tool = SendSessionMessageTool()
    assert tool.execute({"text": "progress: 50%"}, ctx) == "delivered #1"
    assert tool.execute({"text": "hi", "channel": "telegram", "chat_id": "42"}, ctx) == "delivered #2"
    assert sent == [("progress: 50%", None, None), ("hi", "telegram", "42")]


def test_send_session_message_unavailable(ctx: ToolContext) -> None:
    result = build_registry().execute(call("send_session_message", {"text": "hi"}), ctx, 1000)
    assert result.is_error and result.content == "sending messages is not available in this context"


# --- cancellation, the write gate, ordering keys ------------------------------------


@pytest.mark.parametrize("tool", [HttpRequestTool(), WebFetchTool()], ids=lambda t: t.name)
def test_stop_cuts_a_stalled_http_read_at_once(ctx: ToolContext, server: str, tool: Tool) -> None:
    STALLED.clear()
    outcome: list[BaseException] = []

    def fetch() -> None:
        try:
            tool.execute({"method": "GET", "url": f"{server}/stall"} if tool.name == "http_request"
                         else {"url": f"{server}/stall"}, ctx)
        except BaseException as exc:  # noqa: BLE001 - the test inspects it
            outcome.append(exc)

    thread = threading.Thread(target=fetch, daemon=True)
    thread.start()
    assert STALLED.wait(10)
    time.sleep(0.2)  # let the tool block in its read of the stalled body
    ctx.cancel.cancel()
    thread.join(5)  # the server stays silent for 20 s: only the cut ends the read before that
    assert not thread.is_alive()
    assert len(outcome) == 1 and isinstance(outcome[0], TurnCancelled)


def test_http_request_after_stop_sends_nothing(ctx: ToolContext, server: str) -> None:
    ctx.cancel.cancel()
    with pytest.raises(TurnCancelled):
        HttpRequestTool().execute({"method": "POST", "url": f"{server}/echo", "body": "x"}, ctx)


def test_file_writes_refused_once_cancelled_or_sealed(ctx: ToolContext, ws: Path) -> None:
    (ws / "keep.txt").write_text("original\n")
    ctx.cancel.cancel()
    with pytest.raises(TurnCancelled):
        WriteFileTool().execute({"path": "new.txt", "content": "late"}, ctx)
    with pytest.raises(TurnCancelled):
        EditFileTool().execute({"path": "keep.txt", "old_text": "original", "new_text": "changed"}, ctx)
    assert not (ws / "new.txt").exists() and (ws / "keep.txt").read_text() == "original\n"
    assert "original" in ReadFileTool().execute({"path": "keep.txt"}, ctx)  # reading is no side effect


def test_sealed_gate_refuses_writes_of_a_finished_turn(ctx: ToolContext, ws: Path) -> None:
    assert ctx.gate.seal(1.0)
    with pytest.raises(TurnCancelled):
        WriteFileTool().execute({"path": "after.txt", "content": "late"}, ctx)
    assert not (ws / "after.txt").exists()


def test_seal_waits_for_a_write_under_way(ctx: ToolContext) -> None:
    entered, release = threading.Event(), threading.Event()

    def writer() -> None:
        with ctx.gate.side_effect():
            entered.set()
            release.wait(10)

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    assert entered.wait(10)
    assert ctx.gate.seal(0.1) is False  # still under way
    release.set()
    assert ctx.gate.seal(10) is True
    thread.join(10)


def test_send_session_message_sends_nothing_once_cancelled(ctx: ToolContext) -> None:
    sent: list[str] = []
    ctx.send_message = lambda text, channel=None, chat_id=None: sent.append(text) or "sent"
    ctx.cancel.cancel()
    with pytest.raises(TurnCancelled):
        SendSessionMessageTool().execute({"text": "too late"}, ctx)
    assert sent == []


def _finishes(fn: Any, within: float = 5.0) -> BaseException | None:
    """Run fn on a thread; fail the test (instead of hanging it) if it blocks."""
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            fn()
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - returned to the test
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), "the tool blocked"
    return outcome[0]


@posix_only
def test_file_tools_refuse_a_fifo_without_hanging(ctx: ToolContext, ws: Path) -> None:
    os.mkfifo(ws / "pipe")
    for tool, args in [(ReadFileTool(), {"path": "pipe"}),
                       (WriteFileTool(), {"path": "pipe", "content": "x"}),
                       (EditFileTool(), {"path": "pipe", "old_text": "a", "new_text": "b"})]:
        exc = _finishes(lambda: tool.execute(args, ctx))
        assert isinstance(exc, ToolError) and "named pipe (FIFO), not a regular file" in str(exc), exc


@posix_only
@pytest.mark.skipif(not os.path.exists("/dev/zero"), reason="needs /dev/zero")
def test_file_tools_refuse_devices(ctx: ToolContext) -> None:
    ctx.workspace = Path("/dev")  # a workspace that holds devices
    exc = _finishes(lambda: ReadFileTool().execute({"path": "zero"}, ctx))
    assert isinstance(exc, ToolError) and "character device, not a regular file" in str(exc)
    exc = _finishes(lambda: WriteFileTool().execute({"path": "null", "content": "x"}, ctx))
    assert isinstance(exc, ToolError) and "character device" in str(exc)


@posix_only
def test_file_tools_refuse_a_unix_socket(ctx: ToolContext, ws: Path) -> None:
    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(ws / "sock"))
        exc = _finishes(lambda: ReadFileTool().execute({"path": "sock"}, ctx))
    assert isinstance(exc, ToolError) and "a socket, not a regular file" in str(exc)


def test_file_paths_with_lone_surrogates_get_a_clear_error(ctx: ToolContext, ws: Path) -> None:
    for tool in (ReadFileTool(), WriteFileTool()):
        with pytest.raises(ToolError, match="lone surrogate"):
            tool.execute({"path": "bad\ud800.txt", "content": "x"} if tool.name == "write"
                         else {"path": "bad\ud800.txt"}, ctx)


def test_file_tools_share_a_footprint_per_resolved_path(ctx: ToolContext, ws: Path) -> None:
    registry = build_registry()
    same = [registry.footprint(call(name, {"path": p, "content": "", "old_text": "a", "new_text": "b"}), ctx)
            for name, p in [("write", "a.txt"), ("edit", "./a.txt"), ("read", "sub/../a.txt")]]
    assert same[0] == same[1] == same[2] and len(same[0]) == 1
    assert registry.footprint(call("read", {"path": "b.txt"}), ctx) != same[0]
    for bad in ("{not json", '{"path": 5}', '{"path": "../../etc/passwd"}', "[]"):
        assert registry.footprint(call("read", bad), ctx) == frozenset()
    assert registry.footprint(call("nope", {}), ctx) == frozenset()
    assert registry.is_read_only("read") and not registry.is_read_only("write")
    assert not registry.is_read_only("nope")
