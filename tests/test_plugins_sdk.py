"""The plugin SDK core: the @tool decorator's schemas, and PluginHost's loading, isolation and stage semantics.

Real plugin objects and real plugin files (a tmp home's plugins/, a tmp dist-info on sys.path), no mocks.
"""

from __future__ import annotations

import json
import logging
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Annotated, Any, Literal, Optional

import pytest
from jsonschema import Draft202012Validator
from pydantic import BaseModel

from picobot.config import Config
from picobot.errors import ToolArgumentsError
from picobot.plugins import (
    Command, Deny, InputMessage, PluginHost, StageContext, Tool, ToolCallView, ToolContext, hookimpl, tool,
)
from picobot.plugins.manager import CUT_NOTE, MAX_TEXT

CTX = StageContext(session_id="s1", channel="web", chat_id="c1", sender_id="u1", turn_id="t1")
CALL = ToolCallView(id="call-1", name="bash", arguments={"command": "ls"})


def _tool_ctx(tmp_path: Path) -> ToolContext:
    return ToolContext(session_id="s1", channel="web", chat_id="c1", sender_id="u1", turn_id="t1", workspace=tmp_path)


def _valid(schema: dict[str, Any], value: Any) -> bool:
    return Draft202012Validator(schema).is_valid(value)


# ---------------------------------------------------------------- @tool: schemas


class Point(BaseModel):
    x: int
    y: int = 0


class Shape(BaseModel):
    name: str
    points: list[Point]


class Node(BaseModel):
    value: int
    children: list[Node] = []


def test_simple_types_defaults_and_required() -> None:
    @tool
    def f(a: str, b: int, c: float = 1.5, d: bool = False) -> str:
        """F."""
        return ""

    schema = f.parameters
    Draft202012Validator.check_schema(schema)
    assert schema["type"] == "object" and schema["additionalProperties"] is False
    assert schema["properties"] == {"a": {"type": "string"}, "b": {"type": "integer"},
                                    "c": {"type": "number", "default": 1.5}, "d": {"type": "boolean", "default": False}}
    assert schema["required"] == ["a", "b"]
    assert not _valid(schema, {"a": "x", "b": 1, "extra": 1})
    assert not _valid(schema, {"a": "x", "b": "1"})


def test_containers_literal_and_optional() -> None:
    @tool
    def f(tags: list[str], counts: dict[str, int], raw: dict, anything: list, mode: Literal["fast", "slow"],
          level: Optional[int] = None, note: str | None = None, pick: Literal[1, 2] | None = None) -> str:
        """F."""
        return ""

    p = f.parameters["properties"]
    Draft202012Validator.check_schema(f.parameters)
    assert p["tags"] == {"type": "array", "items": {"type": "string"}}
    assert p["counts"] == {"type": "object", "additionalProperties": {"type": "integer"}}
    assert p["raw"] == {"type": "object"} and p["anything"] == {"type": "array"}
    assert p["mode"] == {"enum": ["fast", "slow"], "type": "string"}
    assert p["level"] == {"type": ["integer", "null"], "default": None}
    assert p["note"] == {"type": ["string", "null"], "default": None}
    assert p["pick"]["enum"] == [1, 2, None]
    assert f.parameters["required"] == ["tags", "counts", "raw", "anything", "mode"]
    assert _valid(f.parameters, {"tags": [], "counts": {"a": 1}, "raw": {}, "anything": [1], "mode": "fast",
                                 "level": None, "pick": 2})
    assert not _valid(f.parameters, {"tags": [], "counts": {}, "raw": {}, "anything": [], "mode": "medium"})


def test_a_pydantic_model_is_inlined_and_built_from_a_dict(tmp_path: Path) -> None:
    @tool
    def draw(shape: Shape, ctx: ToolContext) -> str:
        """Draw a shape."""
        assert isinstance(shape, Shape) and isinstance(shape.points[0], Point)
        return f"{shape.name}:{len(shape.points)}:{ctx.session_id}"

    schema = draw.parameters
    Draft202012Validator.check_schema(schema)
    assert "$ref" not in json.dumps(schema) and "$defs" not in schema
    assert "ctx" not in schema["properties"]
    shape = {"name": "tri", "points": [{"x": 1}, {"x": 2, "y": 3}]}
    assert _valid(schema, {"shape": shape})
    assert not _valid(schema, {"shape": {"name": "tri", "points": [{"y": 1}]}})
    assert draw.execute({"shape": shape}, _tool_ctx(tmp_path)) == "tri:2:s1"


def test_a_recursive_model_keeps_valid_defs() -> None:
    @tool
    def walk(tree: Node, depth: int = 1) -> int:
        """Walk a tree."""
        return len(tree.children[0].children) + depth

    schema = walk.parameters
    Draft202012Validator.check_schema(schema)
    assert "Node" in schema["$defs"]
    assert _valid(schema, {"tree": {"value": 1, "children": [{"value": 2, "children": []}]}})
    assert not _valid(schema, {"tree": {"value": 1, "children": [{"value": "two"}]}})
    assert walk.execute({"tree": {"value": 1, "children": [{"value": 2}]}}, None) == "1"


@pytest.mark.parametrize("annotation", ["set[int]", "tuple[int, int]", "dict[int, str]", "bytes", "Path"])
def test_an_unsupported_type_names_the_parameter(annotation: str) -> None:
    namespace: dict[str, Any] = {"Path": Path}
    exec(f"def f(fine: int, weird: {annotation}) -> str:\n    return ''", namespace)
    with pytest.raises(TypeError, match=r"parameter 'weird' has an unsupported type"):
        tool(namespace["f"])


def test_a_parameter_without_a_type_hint_is_refused() -> None:
    def f(city) -> str:  # type: ignore[no-untyped-def]
        return city

    with pytest.raises(TypeError, match="parameter 'city' has no type hint"):
        tool(f)


def test_descriptions_from_google_and_numpy_docstrings() -> None:
    @tool
    def google(city: str, units: str = "c") -> str:
        """The weather in a city
        right now.

        Longer text the model does not need.

        Args:
            city: The city's name,
                in English.
            units (str): "c" or "f".

        Returns:
            The forecast.
        """
        return city

    @tool
    def numpy(city: str, days: Annotated[int, "how many days"] = 1) -> str:
        """A forecast.

        Parameters
        ----------
        city : str
            The city's name.

        Returns
        -------
        str
        """
        return city

    assert google.description == "The weather in a city right now."
    assert google.parameters["properties"]["city"]["description"] == "The city's name, in English."
    assert google.parameters["properties"]["units"]["description"] == '"c" or "f".'
    assert numpy.description == "A forecast."
    assert numpy.parameters["properties"]["city"]["description"] == "The city's name."
    assert numpy.parameters["properties"]["days"]["description"] == "how many days"


def test_options_and_the_function_still_callable() -> None:
    @tool(name="shout_it", description="Capitals.", read_only=True)
    def shout(text: str) -> str:
        """Ignored: the option wins."""
        return text.upper()

    assert isinstance(shout, Tool)
    assert (shout.name, shout.description, shout.read_only) == ("shout_it", "Capitals.", True)
    assert shout("hi") == "HI"


def test_execute_passes_ctx_and_returns_text(tmp_path: Path) -> None:
    @tool
    def info(key: str, context: ToolContext) -> dict:
        """Info."""
        return {"key": key, "chat": context.chat_id, "é": 1}

    @tool
    def nothing() -> None:
        """Nothing."""

    assert info.parameters["properties"] == {"key": {"type": "string"}}
    assert json.loads(info.execute({"key": "k"}, _tool_ctx(tmp_path))) == {"key": "k", "chat": "c1", "é": 1}
    assert "é" in info.execute({"key": "k"}, _tool_ctx(tmp_path))  # JSON, not ASCII escapes
    assert nothing.execute({}, _tool_ctx(tmp_path)) == ""


def test_execute_refuses_bad_arguments() -> None:
    @tool
    def draw(shape: Shape, times: int = 1) -> str:
        """Draw."""
        return shape.name * times

    with pytest.raises(ToolArgumentsError, match="'shape'"):
        draw.execute({}, None)
    with pytest.raises(ToolArgumentsError, match="'colour'"):
        draw.execute({"shape": {"name": "a", "points": []}, "colour": "red"}, None)
    with pytest.raises(ToolArgumentsError, match="shape"):
        draw.execute({"shape": {"points": []}}, None)


def test_a_method_becomes_a_tool_bound_to_its_instance() -> None:
    class Counter:
        step = 5

        @tool
        def add(self, n: int) -> int:
            """Add the step."""
            return n + self.step

    counter = Counter()
    assert counter.add.parameters["properties"] == {"n": {"type": "integer"}}
    assert counter.add.execute({"n": 1}, None) == "6"


# ---------------------------------------------------------------- PluginHost: discovery


def _config(tmp_path: Path, **plugins: Any) -> Config:
    return Config(home=tmp_path, plugins={"hook_timeout_secs": 0.2, **plugins})


def _write(folder: Path, name: str, source: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(textwrap.dedent(source))
    return path


GOOD_FILE = '''
    from pathlib import Path
    from picobot.plugins import hookimpl

    __version__ = "0.3"
    Path(__file__).with_suffix(".imported").write_text("yes")

    @hookimpl
    def before_output(text):
        return text + " [good]"
'''


def _home_plugins(tmp_path: Path) -> Path:
    folder = tmp_path / "plugins"
    _write(folder, "good.py", GOOD_FILE)
    _write(folder, "broken.py", "raise RuntimeError('cannot start: no token')\n")
    _write(folder, "unknown_hook.py", """
        from picobot.plugins import hookimpl

        @hookimpl
        def picobot_no_such_hook():
            return 1
    """)
    _write(folder, "bad_argument.py", """
        from picobot.plugins import hookimpl

        @hookimpl
        def on_input(ctx, nonsense):
            return "never"
    """)
    _write(folder, "quits.py", "import sys\nsys.exit(3)\n")
    return folder


class Builtin:
    @hookimpl
    def before_output(self, text: str) -> str:
        return text + " [builtin]"


def _by_name(host: PluginHost) -> dict[str, dict[str, Any]]:
    return {s["name"]: s for s in host.statuses()}


def test_home_plugin_files_load_alone_and_failures_are_listed(tmp_path: Path,
                                                               caplog: pytest.LogCaptureFixture) -> None:
    _home_plugins(tmp_path)
    with caplog.at_level(logging.ERROR, logger="picobot.plugins"):
        host = PluginHost(_config(tmp_path), builtins=[("core", Builtin())])
    s = _by_name(host)
    assert s["core"] == {"name": "core", "source": "builtin", "version": None, "hooks": ["before_output"],
                         "state": "active", "error": None, "errors": 0}
    assert s["good"]["state"] == "active" and s["good"]["source"] == "file" and s["good"]["version"] == "0.3"
    assert s["broken"]["state"] == "failed" and "cannot start: no token" in s["broken"]["error"]
    assert s["unknown_hook"]["state"] == "failed" and "picobot_no_such_hook" in s["unknown_hook"]["error"]
    assert s["bad_argument"]["state"] == "failed" and "nonsense" in s["bad_argument"]["error"]
    assert s["quits"]["state"] == "failed" and "SystemExit" in s["quits"]["error"]
    json.dumps(host.statuses())
    assert not host.has("picobot_no_such_hook") and not host.has("on_input")
    assert host.before_output(CTX, "hi") in ("hi [good] [builtin]", "hi [builtin] [good]")
    logged = [r.getMessage() for r in caplog.records]
    for name in ("broken", "unknown_hook", "bad_argument", "quits"):
        assert sum(f"plugin {name} " in line for line in logged) == 1


def test_disabled_plugins_are_not_even_imported(tmp_path: Path) -> None:
    folder = _home_plugins(tmp_path)
    host = PluginHost(_config(tmp_path, disabled=["good", "broken"]))
    s = _by_name(host)
    assert s["good"]["state"] == s["broken"]["state"] == "disabled"
    assert not (folder / "good.imported").exists()
    assert host.before_output(CTX, "hi") == "hi"


def test_plugins_enabled_false_keeps_only_the_builtins(tmp_path: Path) -> None:
    _home_plugins(tmp_path)
    host = PluginHost(_config(tmp_path, enabled=False), builtins=[("core", Builtin())])
    assert [s["name"] for s in host.statuses()] == ["core"]
    assert host.before_output(CTX, "hi") == "hi [builtin]"
    assert PluginHost(_config(tmp_path), discover=False).statuses() == []


@pytest.fixture
def dist_on_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An installed distribution with three entry points: a broken one first, a module, a class."""
    site = tmp_path / "site"
    info = site / "picobot_demo_plugins-1.2.3.dist-info"
    _write(info, "METADATA", "Metadata-Version: 2.1\nName: picobot-demo-plugins\nVersion: 1.2.3\n")
    _write(info, "entry_points.txt", """
        [picobot.plugins]
        demo_broken = picobot_demo_broken
        demo_good = picobot_demo_good
        demo_class = picobot_demo_good:Shouter
    """)
    _write(site, "picobot_demo_broken.py", "import picobot_demo_missing_module\n")
    _write(site, "picobot_demo_good.py", """
        from picobot.plugins import hookimpl

        @hookimpl
        def on_input(message):
            return "entry point says hi" if message.text == "hi" else None

        class Shouter:
            @hookimpl
            def before_output(self, text):
                return text.upper()
    """)
    monkeypatch.syspath_prepend(str(site))
    yield site
    for name in ("picobot_demo_broken", "picobot_demo_good"):
        sys.modules.pop(name, None)


def test_each_entry_point_loads_on_its_own(tmp_path: Path, dist_on_path: Path) -> None:
    host = PluginHost(_config(tmp_path))
    s = _by_name(host)
    assert s["demo_broken"]["state"] == "failed" and "picobot_demo_missing_module" in s["demo_broken"]["error"]
    assert s["demo_good"] == {"name": "demo_good", "source": "entry_point", "version": "1.2.3",
                              "hooks": ["on_input"], "state": "active", "error": None, "errors": 0}
    assert s["demo_class"]["state"] == "active"
    assert host.on_input(CTX, InputMessage(text="hi")) == "entry point says hi"
    assert host.before_output(CTX, "quiet") == "QUIET"
    assert _by_name(PluginHost(_config(tmp_path, disabled=["demo_broken"])))["demo_broken"]["state"] == "disabled"


def test_a_second_plugin_of_the_same_name_fails_and_the_first_stays(tmp_path: Path) -> None:
    host = PluginHost(_config(tmp_path), builtins=[("core", Builtin())])
    assert host.register("core", Builtin(), source="file") is False
    states = [(s["name"], s["state"]) for s in host.statuses()]
    assert states == [("core", "active"), ("core", "failed")]
    assert host.before_output(CTX, "hi") == "hi [builtin]"


def test_hook_wrappers_are_refused(tmp_path: Path) -> None:
    class Wrapper:
        @hookimpl(wrapper=True)
        def before_output(self, text: str) -> Any:
            return (yield)

    host = PluginHost(_config(tmp_path))
    assert host.register("wrapper", Wrapper(), source="file") is False
    assert "wrappers are not supported" in _by_name(host)["wrapper"]["error"]
    assert not host.has("before_output")


def test_register_and_unregister_refresh_the_hook_cache(tmp_path: Path) -> None:
    host = PluginHost(_config(tmp_path))
    assert not host.has("before_output") and host.before_output(CTX, "a") == "a"
    host.register("core", Builtin())
    assert host.has("before_output") and host.before_output(CTX, "a") == "a [builtin]"
    assert isinstance(host.unregister("core"), Builtin)
    assert not host.has("before_output") and host.before_output(CTX, "a") == "a"


# ---------------------------------------------------------------- PluginHost: stage hooks


class Recorder:
    """A third-party plugin whose hooks do what its constructor says."""

    def __init__(self, answer: Any = None, delay: float = 0.0, fail: bool = False) -> None:
        self.answer, self.delay, self.fail = answer, delay, fail
        self.seen: list[Any] = []
        self.threads: list[str] = []

    def _act(self, seen: Any) -> Any:
        self.seen.append(seen)
        self.threads.append(threading.current_thread().name)
        if self.delay:
            time.sleep(self.delay)
        if self.fail:
            raise RuntimeError("boom")
        return self.answer(seen) if callable(self.answer) else self.answer


class OnInput(Recorder):
    @hookimpl
    def on_input(self, message: InputMessage) -> Any:
        return self._act(message.text)


class BeforeOutput(Recorder):
    @hookimpl
    def before_output(self, text: str) -> Any:
        return self._act(text)


class BeforeToolcall(Recorder):
    @hookimpl
    def before_toolcall(self, call: ToolCallView) -> Any:
        return self._act(dict(call.arguments))


class AfterToolcall(Recorder):
    @hookimpl
    def after_toolcall(self, call: ToolCallView, result: str) -> Any:
        return self._act(result)


class PreAction(Recorder):
    @hookimpl
    def pre_action(self, messages: list[Any]) -> Any:
        return self._act(len(messages))


class AfterOutput(Recorder):
    @hookimpl
    def after_output(self, turn: Any) -> Any:
        return self._act(turn)


def _host(tmp_path: Path, *plugins: Recorder, source: str = "entry_point") -> PluginHost:
    """A host with the plugins registered in order; pluggy calls the last registered first."""
    host = PluginHost(_config(tmp_path), discover=False)
    for i, plugin in enumerate(plugins):
        assert host.register(f"p{i}", plugin, source=source)
    return host


def test_on_input_first_answer_wins_and_the_rest_are_not_called(tmp_path: Path) -> None:
    last, answers, first = OnInput("never"), OnInput("the answer"), OnInput(None)
    host = _host(tmp_path, last, answers, first)
    assert host.on_input(CTX, InputMessage(text="hello")) == "the answer"
    assert first.seen == ["hello"] and answers.seen == ["hello"] and last.seen == []
    assert _host(tmp_path, OnInput(None)).on_input(CTX, InputMessage(text="x")) is None


def test_on_input_wrong_type_is_ignored_and_recorded(tmp_path: Path) -> None:
    host = _host(tmp_path, OnInput("fallback"), OnInput(42))
    assert host.on_input(CTX, InputMessage(text="x")) == "fallback"
    assert "returned int" in _by_name(host)["p1"]["error"]


def test_third_party_hooks_run_in_a_hook_thread_builtins_inline(tmp_path: Path) -> None:
    third, builtin = BeforeOutput("x"), BeforeOutput("y")
    _host(tmp_path, third).before_output(CTX, "a")
    _host(tmp_path, builtin, source="builtin").before_output(CTX, "a")
    assert third.threads[0] != threading.current_thread().name
    assert builtin.threads == [threading.current_thread().name]


def test_before_output_is_chained(tmp_path: Path) -> None:
    second = BeforeOutput(lambda text: text + " B")
    first = BeforeOutput(lambda text: text + " A")
    host = _host(tmp_path, second, BeforeOutput(None), first)
    assert host.before_output(CTX, "x") == "x A B"
    assert second.seen == ["x A"]


def test_after_toolcall_is_chained(tmp_path: Path) -> None:
    host = _host(tmp_path, AfterToolcall(lambda r: r + "!"), AfterToolcall(lambda r: r.upper()))
    assert host.after_toolcall(CTX, CALL, "done") == "DONE!"


def test_pre_action_collects_every_note_in_order(tmp_path: Path) -> None:
    host = _host(tmp_path, PreAction(["c", "d"]), PreAction(42), PreAction("b"), PreAction(["a"]))
    assert host.pre_action(CTX, [1, 2]) == ["a", "b", "c", "d"]
    assert "returned int" in _by_name(host)["p1"]["error"]
    assert _host(tmp_path).pre_action(CTX, []) == []


def test_before_toolcall_deny_stops_the_chain(tmp_path: Path) -> None:
    after = BeforeToolcall(None)
    host = _host(tmp_path, after, BeforeToolcall(Deny("not here")), BeforeToolcall(None))
    assert host.before_toolcall(CTX, CALL) == Deny("not here")
    assert after.seen == []


def test_before_toolcall_dict_replaces_the_arguments_for_the_next(tmp_path: Path) -> None:
    checker = BeforeToolcall(None)
    host = _host(tmp_path, checker, BeforeToolcall({"command": "ls -la"}))
    assert host.before_toolcall(CTX, CALL) == {"command": "ls -la"}
    assert checker.seen == [{"command": "ls -la"}]
    assert _host(tmp_path, BeforeToolcall(None)).before_toolcall(CTX, CALL) is None


@pytest.mark.parametrize("plugin", [BeforeToolcall(fail=True), BeforeToolcall(delay=1.0), BeforeToolcall("yes"),
                                    BeforeToolcall({"when": object()})],
                         ids=["exception", "timeout", "wrong type", "not JSON"])
def test_before_toolcall_fails_closed(tmp_path: Path, plugin: BeforeToolcall) -> None:
    host = _host(tmp_path, BeforeToolcall(None), plugin)
    verdict = host.before_toolcall(CTX, CALL)
    assert isinstance(verdict, Deny) and "p1" in verdict.reason
    assert _by_name(host)["p1"]["errors"] == 1


def test_an_exception_elsewhere_is_skipped_and_recorded(tmp_path: Path) -> None:
    fine = AfterOutput("ignored")
    host = _host(tmp_path, fine, AfterOutput(fail=True))
    host.after_output(CTX, "turn")
    host.after_output(CTX, "turn")
    assert fine.seen == ["turn", "turn"]
    status = _by_name(host)["p1"]
    assert (status["state"], status["error"], status["errors"]) == ("active", "after_output: RuntimeError: boom", 2)
    assert _host(tmp_path, BeforeOutput(fail=True)).before_output(CTX, "kept") == "kept"


def test_a_slow_hook_is_skipped_after_the_timeout(tmp_path: Path) -> None:
    host = _host(tmp_path, BeforeOutput("too late", delay=1.5))
    started = time.monotonic()
    assert host.before_output(CTX, "on time") == "on time"
    assert time.monotonic() - started < 1.0
    assert "timed out after 0.2s" in _by_name(host)["p0"]["error"]


def test_a_huge_replacement_is_cut(tmp_path: Path) -> None:
    host = _host(tmp_path, BeforeOutput("x" * (MAX_TEXT + 500_000)))
    text = host.before_output(CTX, "short")
    assert len(text) == MAX_TEXT and text.endswith(CUT_NOTE)


def test_lone_surrogates_and_nul_are_repaired(tmp_path: Path) -> None:
    host = _host(tmp_path, OnInput("a\ud800b\x00"), BeforeToolcall({"path": "x\udfff"}))
    assert host.on_input(CTX, InputMessage(text="q")) == "a\ufffdb\ufffd"
    assert host.before_toolcall(CTX, CALL) == {"path": "x\ufffd"}
    assert _host(tmp_path, BeforeToolcall(Deny("no\ud800"))).before_toolcall(CTX, CALL) == Deny("no\ufffd")


class NoOp:
    """Implements every stage hook and does nothing."""

    @hookimpl
    def on_input(self, message: Any) -> None: ...
    @hookimpl
    def pre_action(self, messages: Any) -> None: ...
    @hookimpl
    def post_action(self, response: Any) -> None: ...
    @hookimpl
    def before_toolcall(self, call: Any) -> None: ...
    @hookimpl
    def after_toolcall(self, result: Any) -> None: ...
    @hookimpl
    def before_output(self, text: Any) -> None: ...
    @hookimpl
    def after_output(self, turn: Any) -> None: ...


def _turn_secs(host: PluginHost, turns: int = 30) -> float:
    """The fastest of `turns` turns' worth of stage calls (one tool call), in seconds."""
    best = float("inf")
    for _ in range(turns):
        started = time.perf_counter()
        host.on_input(CTX, InputMessage(text="hi"))
        host.pre_action(CTX, [])
        host.post_action(CTX, None)
        host.before_toolcall(CTX, CALL)
        host.after_toolcall(CTX, CALL, "result")
        host.pre_action(CTX, [])
        host.post_action(CTX, None)
        host.before_output(CTX, "answer")
        host.after_output(CTX, None)
        best = min(best, time.perf_counter() - started)
    return best


def test_stage_calls_cost_almost_nothing(tmp_path: Path) -> None:
    assert _turn_secs(_host(tmp_path)) <= 0.0005
    host = _host(tmp_path, NoOp(), NoOp(), NoOp())
    assert _turn_secs(host) <= 0.002
    assert all(s["errors"] == 0 for s in host.statuses())


# ---------------------------------------------------------------- PluginHost: contributions and lifecycle


class Plain(Tool):
    name = "plain"
    description = "A plain tool."

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return "plain"


@tool
def decorated(text: str) -> str:
    """Echo."""
    return text


def undecorated(n: int) -> int:
    """Double."""
    return n * 2


class Contributor:
    def __init__(self, tools: Any = (), commands: Any = (), channels: Any = None, problems: Any = None) -> None:
        self._tools, self._commands, self._channels, self._problems = tools, commands, channels, problems

    @hookimpl
    def picobot_tools(self, config: Any, ports: Any) -> Any:
        return self._tools

    @hookimpl
    def picobot_commands(self) -> Any:
        return self._commands

    @hookimpl
    def picobot_channels(self) -> Any:
        return self._channels

    @hookimpl
    def picobot_config_check(self, config: Any) -> Any:
        return self._problems


class Crashing:
    @hookimpl
    def picobot_tools(self) -> Any:
        raise RuntimeError("no tools today")

    @hookimpl
    def picobot_started(self) -> Any:
        raise RuntimeError("cannot start")


def _say(ctx: StageContext, args: str) -> str:
    return args


def test_tools_are_collected_and_converted(tmp_path: Path) -> None:
    host = _host(tmp_path, Contributor([Plain(), decorated]), Contributor([undecorated, "junk", Plain()]), Crashing())
    tools = host.tools(_config(tmp_path), ports=None)
    assert sorted(t.name for t in tools) == ["decorated", "plain", "undecorated"]
    assert [t for t in tools if t.name == "undecorated"][0].execute({"n": 2}, None) == "4"
    s = _by_name(host)
    assert "str is neither a Tool nor a function" in s["p1"]["error"]
    assert s["p2"]["error"] == "picobot_tools: RuntimeError: no tools today"
    assert _host(tmp_path, Contributor(decorated)).tools(_config(tmp_path), None) == []  # not a list


def test_commands_are_lower_case_without_slash_and_the_first_wins(tmp_path: Path) -> None:
    later = Contributor(commands=[Command("hello", "later", _say)])
    first = Contributor(commands=[Command("/Hello", "first", _say), Command("two words", "bad", _say), 3])
    host = _host(tmp_path, later, first)
    commands = host.commands(_config(tmp_path), None)
    assert list(commands) == ["hello"]
    assert (commands["hello"].name, commands["hello"].description) == ("hello", "first")
    assert _by_name(host)["p1"]["errors"] == 2


def test_channels_and_config_problems(tmp_path: Path) -> None:
    host = _host(tmp_path, Contributor(channels={"feishu": "later", "slack": "S"}, problems=[("a.b", "why")]),
                 Contributor(channels={"feishu": "F"}, problems=[("c", "bad"), ("only one",), None]))
    assert host.channels(_config(tmp_path)) == {"feishu": "F", "slack": "S"}
    assert host.config_problems(_config(tmp_path)) == [("c", "bad"), ("a.b", "why")]
    assert _by_name(host)["p1"]["errors"] == 2


class Lifecycle:
    def __init__(self, value: Any) -> None:
        self.value, self.closed, self.threads = value, 0, []

    @hookimpl
    def picobot_health(self, ports: Any) -> Any:
        self.threads.append(threading.current_thread().name)
        return self.value

    @hookimpl
    def picobot_internal_event(self, name: str) -> Any:
        return self.value

    @hookimpl
    def picobot_close(self) -> None:
        self.closed += 1


def test_call_first_and_has(tmp_path: Path) -> None:
    a, b = Lifecycle({"a": 1}), Lifecycle(None)
    host = _host(tmp_path, a, b, Crashing())
    assert host.call("picobot_health", ports=None) == [{"a": 1}]
    assert a.threads == [threading.current_thread().name]  # lifecycle calls run inline for every plugin
    assert host.first("picobot_internal_event", name="x", payload={}, ports=None) == {"a": 1}
    assert host.call("picobot_started", ports=None, registry=None) == []
    assert "cannot start" in _by_name(host)["p2"]["error"]
    assert host.has("picobot_health") and not host.has("picobot_sweep")
    with pytest.raises(ValueError, match="no hook named"):
        host.call("picobot_no_such_hook")
    host.close()
    host.close()
    assert a.closed == b.closed == 1
