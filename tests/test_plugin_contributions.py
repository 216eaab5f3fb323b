"""What plugins contribute through the `register` hooks — routes, tasks, processes, CLI commands and settings —
with the hostile cases each boundary meets: a bad or taken path, a colliding task name, a settings model that
fails, a handler that raises, a process that crashes in a loop. Each is reported against its plugin and
contained; the rest keeps working. Real Flask app, real WebSocket over loopback, real Celery app, real Redis,
real `picobot` subprocesses; no mocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from pydantic import BaseModel, Field, field_validator

from picobot.app import App, build_runtime, check_config
from picobot.config import Config
from picobot.errors import ConfigError
from picobot.plugins import HttpRequest, HttpResponse, PluginHost, hookimpl
from picobot.plugins.contributions import (
    ContributionError, ProcessSpec, check_cli, check_process, check_route, check_settings, check_task,
)
from picobot.runtime.plugin_ports import PluginPorts
from picobot.runtime.processes import health_entry, parse_target, serve, statuses
from tests.stack import ROOT


class _Queue:
    def __init__(self) -> None:
        self.sent: list[tuple[str, list[Any], str, float]] = []
        self.events: list[int] = []

    def enqueue_background(self, task: str, args: list[Any], queue: str = "maintenance", countdown: float = 0) -> None:
        self.sent.append((task, args, queue, countdown))

    def enqueue_channel_event(self, event_id: int) -> None:
        self.events.append(event_id)

    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


class Settings(BaseModel):
    greeting: str = "hello"
    repeat: int = Field(default=1, ge=1, le=5)


class Exploding(BaseModel):
    value: str = ""

    @field_validator("value")
    @classmethod
    def _boom(cls, v: str) -> str:
        if v == "boom":
            raise RuntimeError("the validator itself crashed")
        return v


def echo(request: HttpRequest, ports: PluginPorts) -> HttpResponse:
    try:
        body = request.json()
    except ValueError as exc:
        return HttpResponse.json({"error": str(exc)}, 400)
    greeting = ports.settings("greeter").greeting
    return HttpResponse.json({"greeting": greeting, "params": dict(request.params), "body": body,
                              "sig": request.headers.get("x-signature")})


def raising(request: HttpRequest, ports: PluginPorts) -> Any:
    raise RuntimeError("the handler broke")


def bad_status(request: HttpRequest, ports: PluginPorts) -> Any:
    return (999, {}, b"nope")


def socket_echo(socket: Any, request: HttpRequest, ports: PluginPorts) -> Any:
    if request.query.get("token") != "right":
        return HttpResponse.json({"error": "bad token"}, 401)  # before the upgrade: refused with HTTP
    while True:
        message = socket.receive(timeout=5)
        if message is None or message == "bye":
            return None
        socket.send(f"echo:{message}")


class Greeter:
    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("greeter", Settings)

    @hookimpl
    def picobot_routes(self, register: Any) -> None:
        register("POST", "/greeter/<name>", echo, max_body_bytes=1000)
        register("GET", "/greeter/raise", raising)
        register("GET", "/greeter/status", bad_status)
        register("GET", "/greeter/socket", socket_echo, websocket=True)
        register("GET", "/ws", echo)  # PicoBot's own
        register("GET", "not a path", echo)
        register("BREW", "/greeter/tea", echo)

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register("greeter.say", lambda ports, text: f"{ports.settings('greeter').greeting} {text}", queue="outbound")
        register("picobot.turn", lambda ports: None)  # the kernel's task
        register("picobot.mine", lambda ports: None)  # picobot.* is for the built-ins
        register("greeter.turns", lambda ports: None, queue="turns")


class Intruder:
    @hookimpl
    def picobot_routes(self, register: Any) -> None:
        register("POST", "/greeter/<name>", raising)  # the path the greeter took first

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register("greeter.say", lambda ports, text: "stolen")

    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("exploding", Exploding)


class Crashing:
    @hookimpl
    def picobot_routes(self, register: Any) -> None:
        register("GET", "/crashing/one", echo)
        raise RuntimeError("the hook itself crashed")


def _config(tmp_path: Path, redis_url: str = "redis://127.0.0.1:9/0", **settings: Any) -> Config:
    return Config(home=tmp_path, redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'picobot.db'}",
                  plugins={"settings": settings}, gateway={"pairing_required": False})


def _host(config: Config, *plugins: Any) -> PluginHost:
    from picobot.app import builtin_plugins

    host = PluginHost(config, builtins=builtin_plugins(config), discover=False)
    for i, plugin in enumerate(plugins):
        assert host.register(type(plugin).__name__.lower(), plugin, source="entry_point")
    return host


def _errors(host: PluginHost, name: str) -> str:
    return next(s for s in host.statuses() if s["name"] == name)["error"] or ""


@pytest.fixture
def runtime(tmp_path: Path, redis_url: str) -> Iterator[App]:
    config = _config(tmp_path, redis_url, greeter={"greeting": "hi"})
    host = _host(config, Intruder(), Greeter(), Crashing())  # pluggy calls the last registered first: Greeter before Intruder
    rt = build_runtime(config, _Queue(), migrate=True, plugins=host)  # type: ignore[arg-type]
    yield rt
    rt.close()


# ---------------------------------------------------------------- the checks, one by one


@pytest.mark.parametrize("path", ["", "x", "/a b", "/a/<1bad>", "/../etc", "/a\x00", "/a/\ud800", "/" + "a" * 300,
                                  "/api/x", "/ws", "/v1/chat", "/", None, 5, ["/a"]])
def test_a_route_path_that_is_not_a_path_or_is_picobots_is_refused(path: Any) -> None:
    with pytest.raises(ContributionError):
        check_route("p", "GET", path, echo)


def test_route_task_process_cli_and_settings_checks() -> None:
    assert check_route("p", "post", "/p/<channel>", echo).method == "POST"
    assert check_route("p", "GET", "/p/<path:rest>", echo, websocket=True).websocket
    for bad in [("GET", "/p", "not callable"), ("POST", "/p", echo, True), ("GET", "/p", echo, False, 0)]:
        with pytest.raises(ContributionError):
            check_route("p", *bad)
    assert check_task("p", "p.work", echo, queue="scheduled").queue == "scheduled"
    for name in ["work", "P.Work", "p.", "p.a b", "", None, "p.x\ud800"]:
        with pytest.raises(ContributionError):
            check_task("p", name, echo)
    with pytest.raises(ContributionError):
        check_task("p", "p.work", echo, queue="turns")
    with pytest.raises(ContributionError):
        check_process("p", "Conn ection", echo)
    with pytest.raises(ContributionError):
        check_process("p", "conn", echo, instances="all")
    spec = check_process("p", "conn", echo, instances=lambda config: ["a", "b/../c"])
    with pytest.raises(ContributionError):
        spec.instance_names(None)
    assert check_process("p", "conn", echo).instance_names(None) == ["main"]
    with pytest.raises(ContributionError):
        check_cli("p", "up", echo, taken=frozenset({"up"}))
    with pytest.raises(ContributionError):
        check_settings("p", "x", dict)


def test_parse_target() -> None:
    assert parse_target("qq:connection") == ("qq", "connection", None)
    assert parse_target("qq:connection:main") == ("qq", "connection", "main")
    for bad in ["qq", "qq::x", ":a", "a:b:c:d", ""]:
        with pytest.raises(ValueError):
            parse_target(bad)


# ---------------------------------------------------------------- settings


def test_settings_are_validated_at_start_with_the_key_path(tmp_path: Path) -> None:
    good = _config(tmp_path, greeter={"greeting": "hey", "repeat": 3})
    check_config(good, _host(good, Greeter()))
    bad = _config(tmp_path, greeter={"repeat": 9})
    with pytest.raises(ConfigError) as caught:
        check_config(bad, _host(bad, Greeter()))
    assert caught.value.key_path == "plugins.settings.greeter.repeat"
    typo = _config(tmp_path, greeter={"greting": "x"})  # pydantic's default ignores it: the model decides
    check_config(typo, _host(typo, Greeter()))
    crashing = _config(tmp_path, exploding={"value": "boom"})
    with pytest.raises(ConfigError) as caught:
        check_config(crashing, _host(crashing, Intruder()))
    assert caught.value.key_path == "plugins.settings.exploding"
    assert "the validator itself crashed" in caught.value.reason


def test_ports_give_the_validated_settings_and_refuse_an_unknown_key(runtime: App) -> None:
    ports = PluginPorts(runtime, "greeter")
    assert ports.settings("greeter") == Settings(greeting="hi")
    with pytest.raises(ConfigError):
        ports.settings("nobody")


# ---------------------------------------------------------------- routes


def test_routes_are_mounted_and_the_bad_ones_reported(runtime: App) -> None:
    from web.app import create_app

    app = create_app(runtime=runtime)
    try:
        client = app.test_client()
        answer = client.post("/greeter/alice", data=json.dumps({"n": 1}), headers={"X-Signature": "sha1=abc"})
        assert answer.status_code == 200, answer.data
        assert answer.json == {"greeting": "hi", "params": {"name": "alice"}, "body": {"n": 1}, "sig": "sha1=abc"}
        deep = "[" * 100_000 + "]" * 100_000
        answer = client.post("/greeter/bob", data=deep)
        assert answer.status_code == 413  # over the route's own max_body_bytes
        answer = client.post("/greeter/bob", data="[" * 600 + "]" * 400)
        assert answer.status_code == 400 and "JSON" in answer.json["error"]
        answer = client.post("/greeter/bob", data=b"\xff\xfe\x00")
        assert answer.status_code == 400
        answer = client.get("/greeter/raise")
        assert answer.status_code == 500 and answer.json == {"error": "internal error"}
        assert "RuntimeError: the handler broke" in _errors(runtime.plugins, "greeter")
        assert client.get("/greeter/status").status_code == 500
        assert "the status 999" in _errors(runtime.plugins, "greeter")
        greeter = next(s for s in runtime.plugins.statuses() if s["name"] == "greeter")
        assert greeter["errors"] >= 5  # /ws, "not a path", BREW, the handler, the status
        assert "the path is taken" in _errors(runtime.plugins, "intruder")
        assert "the hook itself crashed" in _errors(runtime.plugins, "crashing")
        assert client.get("/crashing/one").status_code == 400  # what it registered before raising stands (its echo wants JSON)
        assert client.get("/health").status_code in (200, 503)  # PicoBot's own paths still answer
    finally:
        relay = app.extensions.get("picobot.live")
        if relay is not None:
            relay.stop()


def test_a_websocket_route_over_a_real_socket(runtime: App) -> None:
    import websocket
    from werkzeug.serving import make_server

    from web.app import create_app

    app = create_app(runtime=runtime)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"ws://127.0.0.1:{server.server_port}/greeter/socket"
    try:
        with pytest.raises(websocket.WebSocketBadStatusException) as refused:
            websocket.create_connection(url + "?token=wrong", timeout=5)
        assert refused.value.status_code == 401
        ws = websocket.create_connection(url + "?token=right", timeout=5)
        try:
            ws.send("one")
            assert ws.recv() == "echo:one"
            ws.send("\u4f60\u597d")
            assert ws.recv() == "echo:\u4f60\u597d"
            ws.send("bye")
        finally:
            ws.close()
    finally:
        server.shutdown()
        relay = app.extensions.get("picobot.live")
        if relay is not None:
            relay.stop()


# ---------------------------------------------------------------- tasks


def test_plugin_tasks_register_on_a_worker_app_and_collisions_are_refused(runtime: App, tmp_path: Path) -> None:
    from worker.celery_app import make_celery
    from worker.tasks import register_plugin_tasks

    app = make_celery(runtime.config)
    app.__dict__["plugins"] = runtime.plugins  # the host the runtime uses (a worker builds one for both)
    registered = register_plugin_tasks(app, lambda: runtime)
    assert "greeter.say" in registered and "picobot.deliver" in registered  # a built-in's tasks come the same way
    assert app.tasks["greeter.say"]("there") == "hi there"  # the first plugin's function, with its ports
    assert "picobot.turn" in app.tasks  # PicoBot's own stays its own
    assert "greeter.turns" not in app.tasks
    assert "the name is taken" in _errors(runtime.plugins, "intruder")
    assert "picobot.mine" not in app.tasks
    assert "picobot.* is PicoBot's own" in _errors(runtime.plugins, "greeter")
    ports = PluginPorts(runtime, "greeter")
    ports.send_task("greeter.say", "you", countdown=2)
    assert runtime.queue.sent[-1] == ("greeter.say", ["you"], "outbound", 2)  # type: ignore[attr-defined]
    with pytest.raises(ValueError):
        ports.send_task("nobody.task")


def test_record_event_stores_once_and_queues(runtime: App) -> None:
    ports = PluginPorts(runtime, "greeter")
    first = ports.record_event("qq", "1:42", {"text": "hi", "odd": "\ud800"[:0]})
    again = ports.record_event("qq", "1:42", {"text": "hi again"})
    assert first[1] is True and again == (first[0], False)
    assert runtime.queue.events == [first[0]]  # type: ignore[attr-defined]
    for bad in [("", "k", {}), ("qq", "", {}), ("qq", "k", ["not", "an", "object"])]:
        with pytest.raises((ValueError, TypeError)):
            ports.record_event(*bad)


# ---------------------------------------------------------------- processes


def test_a_process_that_crashes_in_a_loop_is_restarted_with_backoff_and_shown(runtime: App) -> None:
    runs: list[float] = []

    def run(ctx: Any) -> None:
        runs.append(time.monotonic())
        ctx.status("connecting", f"attempt {len(runs)}")
        raise ConnectionError(f"platform down (token {runtime.config.redis_url})")

    spec = ProcessSpec("greeter", "conn", run)
    stopping = threading.Event()
    thread = threading.Thread(target=serve, args=(PluginPorts(runtime, "greeter"), spec, "main", stopping, False,
                                                  lambda: 0.0), daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while len(runs) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(runs) >= 3
    assert runs[2] - runs[1] >= runs[1] - runs[0] - 0.05  # the waits grow (0.5 s, then 1 s)
    [status] = statuses(runtime.redis)
    assert (status["plugin"], status["process"], status["instance"]) == ("greeter", "conn", "main")
    assert status["state"] in ("restarting", "running", "connecting") and status["restarts"] >= 2
    assert "platform down" in status["last_error"]
    entry = health_entry(runtime.redis)
    assert entry is not None and entry["processes"]
    stopping.set()
    thread.join(timeout=10)
    assert not thread.is_alive()
    assert statuses(runtime.redis)[0]["state"] == "stopped"


def test_health_lists_plugin_processes(runtime: App) -> None:
    from picobot.runtime.health import check_health

    assert "processes" not in check_health(runtime)["checks"]
    runtime.redis.set("picobot:process:greeter:conn:main",
                      json.dumps({"plugin": "greeter", "process": "conn", "instance": "main", "state": "restarting",
                                  "last_error": "ConnectionError: down"}), ex=30)
    runtime.redis.set("picobot:process:greeter:conn:junk", "{not json", ex=30)
    check = check_health(runtime)["checks"]["processes"]
    assert check["ok"] is False and "ConnectionError: down" in check["detail"]


# ---------------------------------------------------------------- the command line, as a user runs it

HOME_PLUGIN = '''
import click
from pydantic import BaseModel
from picobot.plugins import hookimpl


class Settings(BaseModel):
    greeting: str = "hello"


@click.command()
@click.option("--name", required=True)
@click.pass_obj
def hello(ports, name):
    """Say hello, with the greeting of the settings (the command's obj: the plugin's PluginPorts)."""
    click.echo(f"{ports.settings('homeplug').greeting} {name}")


def broken(argv):
    raise RuntimeError("broken command")


def run(ctx):
    ctx.stopping.wait(0.1)


@hookimpl
def picobot_cli(register):
    register("hello", hello)
    register("broken", broken)
    register("up", broken)


@hookimpl
def picobot_processes(register):
    register("conn", run, instances=lambda config: sorted(k for k, c in config.channels.items() if c.type == "demo"))


@hookimpl
def picobot_settings(register):
    register("homeplug", Settings)
'''


def _picobot(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update(PICOBOT_HOME=str(home), PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "picobot", *args], capture_output=True, text=True, env=env,
                          cwd=home, timeout=120)


@pytest.fixture(scope="module")
def plugin_home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    home = tmp_path_factory.mktemp("clihome")
    (home / "plugins").mkdir()
    (home / "plugins" / "homeplug.py").write_text(textwrap.dedent(HOME_PLUGIN))
    (home / "config.json").write_text(json.dumps({"channels": {"d1": {"type": "demo"}, "d2": {"type": "demo"}},
                                                  "plugins": {"settings": {"homeplug": {"greeting": "hi"}}}}))
    return home


def test_a_plugin_command_runs_and_its_errors_are_one_line(plugin_home: Path) -> None:
    done = _picobot(plugin_home, "hello", "--name", "Ada")
    assert done.returncode == 0 and done.stdout.strip() == "hi Ada", done.stderr
    done = _picobot(plugin_home, "hello")
    assert done.returncode == 2 and "--name" in done.stderr
    done = _picobot(plugin_home, "broken", "x")
    assert done.returncode == 1 and "RuntimeError: broken command" in done.stderr
    done = _picobot(plugin_home, "nosuchcommand")
    assert done.returncode == 2 and "invalid choice" in done.stderr


def test_picobot_run_names_what_exists(plugin_home: Path) -> None:
    done = _picobot(plugin_home, "run", "homeplug:nothing")
    assert done.returncode == 2 and "homeplug:conn" in done.stderr
    done = _picobot(plugin_home, "run", "homeplug:conn")
    assert done.returncode == 2 and "d1, d2" in done.stderr  # two instances: name one
    done = _picobot(plugin_home, "run", "homeplug:conn:d3")
    assert done.returncode == 2 and "no instance 'd3'" in done.stderr
    done = _picobot(plugin_home, "run", "not-a-target")
    assert done.returncode == 2 and "<plugin>:<process>" in done.stderr


def test_bad_settings_stop_a_process_and_a_command_with_the_key_path(tmp_path: Path) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "homeplug.py").write_text(textwrap.dedent(HOME_PLUGIN))
    (tmp_path / "config.json").write_text(json.dumps({"channels": {"d1": {"type": "demo"}},
                                                      "plugins": {"settings": {"homeplug": {"greeting": 5}}}}))
    for args in (["run", "homeplug:conn:d1"], ["hello", "--name", "x"]):
        done = _picobot(tmp_path, *args)
        assert done.returncode == 2, done.stderr
        assert "plugins.settings.homeplug.greeting" in done.stderr


def test_picobot_up_plans_one_child_per_instance(plugin_home: Path) -> None:
    code = ("from picobot.config.loader import load_config\n"
            "from picobot.cli.plugin_parts import planned\n"
            "print(planned(load_config()))")
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update(PICOBOT_HOME=str(plugin_home), PYTHONPATH=str(ROOT))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "('homeplug:conn (d1)', 'homeplug:conn:d1')" in done.stdout
    assert "('homeplug:conn (d2)', 'homeplug:conn:d2')" in done.stdout



# ---------------------------------------------------------------- web UI pages

PAGE_JS = """export function createPage(ctx) {
  const el = ctx.h("section", { id: "greeter-page" }, ctx.h("h1", null, "Greeter"));
  return { el, show: async () => { el.dataset.greeting = (await ctx.api("/api/me")) ? "ready" : "no"; } };
}
"""


def test_pages_are_listed_and_served_and_bad_ones_refused(tmp_path: Path, redis_url: str) -> None:
    from picobot.plugins.contributions import check_page
    from web.app import create_app

    script = tmp_path / "greeter.js"
    script.write_text(PAGE_JS)

    class Pages:
        @hookimpl
        def picobot_pages(self, register: Any) -> None:
            register("greet", "Greeter", str(script), icon="chat", group="main")
            register("odd", "Odd icon", str(script), icon="no-such-icon")
            register("Bad Id", "x", str(script))
            register("rel", "Relative", "greeter.js")
            register("missing", "Missing", str(tmp_path / "nope.js"))
            register("notjs", "Not JS", str(tmp_path / "config.json"))
            register("long", "x" * 41, str(script))

    config = _config(tmp_path, redis_url)
    host = _host(config, Pages())
    rt = build_runtime(config, _Queue(), migrate=True, plugins=host)  # type: ignore[arg-type]
    app = create_app(runtime=rt)
    try:
        client = app.test_client()
        pages = client.get("/api/ui/pages").json["pages"]
        assert [(p["id"], p["title"], p["icon"], p["group"]) for p in pages] == [
            ("pages-greet", "Greeter", "chat", "main"), ("pages-odd", "Odd icon", "tool", "manage")]
        served = client.get(pages[0]["src"])
        assert served.status_code == 200 and served.mimetype == "text/javascript"
        assert served.data.decode() == PAGE_JS
        assert client.get("/plugin-pages/pages/nope.js").status_code == 404
        assert client.get("/plugin-pages/other/greet.js").status_code == 404
        assert client.get("/plugin-pages/pages/..%2Fgreet.js").status_code == 404
        errors = next(s for s in rt.plugins.statuses() if s["name"] == "pages")
        assert errors["errors"] == 5  # the bad id, the relative, missing and non-JS scripts, the long title
        with pytest.raises(ContributionError):
            check_page("Bad Plugin", "p", "t", str(script))
        script.unlink()  # a page whose file went away answers 500 and is reported, the rest stands
        assert client.get(pages[0]["src"]).status_code == 500
        assert "cannot be read" not in (errors.get("error") or "")
        assert "FileNotFoundError" in _errors(rt.plugins, "pages")
    finally:
        relay = app.extensions.get("picobot.live")
        if relay is not None:
            relay.stop()
        rt.close()
