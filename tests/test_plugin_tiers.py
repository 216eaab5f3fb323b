"""The two tiers of PluginPorts: a plugin that is neither built in nor named in `plugins.trusted` gets ports
that reach only its own Redis keys ("<plugin>:"), its own settings, tasks and channel types, and no SQL.
Real Redis (a private server per test), a real runtime with real plugins registered as entry points; the
Redis checks are proved both ways: the command is refused, and a second, unguarded client sees that nothing
was written.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import redis
from pydantic import BaseModel

from picobot.app import App, build_runtime
from picobot.config import Config
from picobot.plugins import Capabilities, PluginHost, hookimpl
from picobot.runtime.plugin_ports import PluginPorts, RestrictedPluginPorts, ports_for


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
    token: str = ""


class Adapter:
    capabilities = Capabilities()

    def __init__(self, name: str, config: Any, ports: Any) -> None:
        self.ports = ports


def _route(request: Any, ports: Any) -> Any:
    return {"ports": type(ports).__name__}


class Chat:
    """Named "qq": settings "qq", the channel type "onebot", the task "qq.fetch" and a route."""

    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("qq", Settings)

    @hookimpl
    def picobot_channels(self) -> dict[str, Any]:
        return {"onebot": Adapter}

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register("qq.fetch", lambda ports: type(ports).__name__)

    @hookimpl
    def picobot_routes(self, register: Any) -> None:
        register("GET", "/qq/tier", _route)


class Plain:
    """Named "qqx": its name starts with "qq" but its keys are "qqx:..."."""


class Other:
    """Named "other": what the "qq" plugin must not reach."""

    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("other", Settings)

    @hookimpl
    def picobot_channels(self) -> dict[str, Any]:
        return {"otherchat": Adapter}

    @hookimpl
    def picobot_tasks(self, register: Any) -> None:
        register("other.job", lambda ports: None)


def _runtime(tmp_path: Path, redis_url: str, trusted: list[str]) -> App:
    from picobot.app import builtin_plugins

    config = Config(home=tmp_path, redis_url=redis_url, database_url=f"sqlite:///{tmp_path / 'picobot.db'}",
                    gateway={"pairing_required": False}, tools={"network": {"allow": ["127.0.0.1"]}},
                    plugins={"trusted": trusted, "settings": {"qq": {"token": "mine"}, "other": {"token": "theirs"}}},
                    channels={"qq_main": {"type": "onebot", "enabled": True},
                              "other_main": {"type": "otherchat", "enabled": True}})
    host = PluginHost(config, builtins=builtin_plugins(config), discover=False)
    assert host.register("qq", Chat(), source="entry_point")
    assert host.register("other", Other(), source="file")
    assert host.register("qqx", Plain(), source="entry_point")
    return build_runtime(config, _Queue(), migrate=True, plugins=host)  # type: ignore[arg-type]


@pytest.fixture
def runtime(tmp_path: Path, redis_url: str) -> Iterator[App]:
    rt = _runtime(tmp_path, redis_url, trusted=[])
    yield rt
    rt.close()


@pytest.fixture
def raw(redis_url: str) -> Iterator[redis.Redis]:
    """A client of the same server with no guard: what is really in Redis."""
    client = redis.Redis.from_url(redis_url)
    client.set("other:x", "theirs")
    client.set("qqx:a", "theirs")
    client.set("qq", "theirs")
    yield client
    client.close()


@pytest.fixture
def ports(runtime: App, raw: redis.Redis) -> PluginPorts:
    made = ports_for(runtime, "qq")
    assert isinstance(made, RestrictedPluginPorts)
    return made


def _refused(call: Any, *args: Any, **kwargs: Any) -> str:
    with pytest.raises(PermissionError) as caught:
        call(*args, **kwargs)
    message = str(caught.value)
    assert "plugins.trusted" in message and "'qq'" in message
    return message


def _untouched(raw: redis.Redis) -> None:
    assert raw.get("other:x") == b"theirs" and raw.get("qqx:a") == b"theirs" and raw.get("qq") == b"theirs"


# ---------------------------------------------------------------- its own keys work


def test_its_own_keys_work_against_real_redis(ports: PluginPorts, raw: redis.Redis) -> None:
    r = ports.redis
    assert r.set("qq:a", "1") and r.get("qq:a") == "1"
    assert r.mset({"qq:b": "2", "qq:c": "3"}) and r.mget(["qq:a", "qq:b", "qq:c"]) == ["1", "2", "3"]
    assert r.incr("qq:n") == 1 and r.expire("qq:n", 60) and 0 < r.ttl("qq:n") <= 60
    r.hset("qq:h", mapping={"f": "v"})
    assert r.hgetall("qq:h") == {"f": "v"}
    r.rpush("qq:list", "x")
    assert r.blpop(["qq:list"], timeout=1) == ("qq:list", "x")
    assert sorted(r.scan_iter(match="qq:*", count=100)) == ["qq:a", "qq:b", "qq:c", "qq:h", "qq:n"]
    with r.pipeline() as pipe:
        assert pipe.set("qq:p", "1").incr("qq:p").get("qq:p").execute() == [True, 2, "2"]
    assert r.exists("qq:a", "qq:b") == 2 and r.delete("qq:a", "qq:b") == 2
    assert r.set("qq:", "empty suffix") and r.get("qq:") == "empty suffix"
    assert r.set(b"qq:bytes", b"\xff") and raw.get("qq:bytes") == b"\xff"
    long_key = "qq:" + "k" * 100_000
    assert r.set(long_key, "long") and raw.get(long_key) == b"long"
    assert r.set("qq:中文\x00", "x") and raw.get("qq:中文\x00".encode()) == b"x"
    assert r.ping()
    _untouched(raw)
    _refused(r.get, "other:x")  # the same client, one key over


# ---------------------------------------------------------------- another plugin's keys are refused


@pytest.mark.parametrize("command", [
    ("get", "other:x"), ("set", "other:x", "mine"), ("delete", "other:x"), ("delete", "qq:a", "other:x"),
    ("mget", ["qq:a", "other:x"]), ("mset", {"qq:a": "1", "other:x": "mine"}), ("exists", "qq:a", "qq"),
    ("rename", "qq:a", "other:x"), ("rename", "other:x", "qq:a"), ("blpop", ["qq:a", "other:x"], 1),
    ("hset", "other:x", "f", "v"), ("expire", "other:x", 1),
])
def test_another_plugins_keys_are_refused(ports: PluginPorts, raw: redis.Redis, command: tuple) -> None:
    name, *args = command
    _refused(getattr(ports.redis, name), *args)
    _untouched(raw)
    assert raw.get("qq:a") is None  # a mixed command ran for none of its keys


@pytest.mark.parametrize("key", [
    "", "qq", "QQ:a", "qqx:a", " qq:a", "\x00qq:a", "qq\uff1aa", "qq\u200b:a", "other:\udc80", "\udc80qq:a",
    b"other:x", b"qq", b"\xffqq:a", "other:" + "x" * 100_000, 5, 5.0, None, memoryview(b"qq:a"), bytearray(b"qq:a"),
])
def test_hostile_key_names_are_refused(ports: PluginPorts, raw: redis.Redis, key: Any) -> None:
    _refused(ports.redis.set, key, "mine")
    _refused(ports.redis.get, key)
    _untouched(raw)


def test_a_key_that_only_looks_like_its_own_is_refused(ports: PluginPorts, raw: redis.Redis) -> None:
    class Sly(str):  # compares as "qq:a", is sent as "other:x"
        def encode(self, *args: Any, **kwargs: Any) -> bytes:
            return b"other:x"

    class SlyBytes(bytes):
        pass

    _refused(ports.redis.set, Sly("qq:a"), "mine")
    _refused(ports.redis.set, SlyBytes(b"qq:a"), "mine")
    _untouched(raw)


def test_an_own_key_with_a_lone_surrogate_fails_as_it_would_for_anyone(ports: PluginPorts, runtime: App) -> None:
    with pytest.raises(UnicodeEncodeError):
        runtime.redis.set("qq:\udc80", "x")  # the full client
    with pytest.raises(UnicodeEncodeError):
        ports.redis.set("qq:\udc80", "x")  # not a PermissionError: the key is its own, Redis cannot take it


def test_scan_is_only_for_its_own_prefix(ports: PluginPorts, raw: redis.Redis) -> None:
    for match in [None, "*", "other:*", "qq*", "q?:*", "[q]q:*", "qq\\:*", b"other:*", "QQ:*"]:
        _refused(lambda m=match: list(ports.redis.scan_iter(match=m)))
    _refused(ports.redis.execute_command, "SCAN", 0, "MATCH", "qq:*", "MATCH", "*")  # Redis takes the last
    _refused(ports.redis.execute_command, "SCAN", 0, "MATCH", "qq:*", "NOVALUES")
    _refused(ports.redis.keys, "qq:*")  # KEYS blocks the server: SCAN is the way
    assert list(ports.redis.scan_iter(match=b"qq:*")) == []


def test_a_plugin_name_with_glob_characters_scans_only_its_literal_prefix(runtime: App, raw: redis.Redis) -> None:
    from picobot.runtime.plugin_ports import GuardedRedis, KeyGuard

    raw.set("qa:x", "theirs")
    r = GuardedRedis(runtime.redis, KeyGuard("q?"))
    with pytest.raises(PermissionError):
        list(r.scan_iter(match="q?:*"))  # would match qa:x
    assert list(r.scan_iter(match="q\\?:*")) == []
    assert r.set("q?:mine", "1") and list(r.scan_iter(match="q\\?:*")) == ["q?:mine"]


@pytest.mark.parametrize("command", [
    ("EVAL", "return redis.call('SET', KEYS[1], 'mine')", 1, "qq:a"),
    ("EVAL", "return redis.call('SET', 'other:x', 'mine')", 0),
    ("EVALSHA", "0" * 40, 0), ("FCALL", "f", 1, "qq:a"), ("SCRIPT", "FLUSH"), ("FLUSHALL",), ("FLUSHDB",),
    ("CONFIG", "GET", "*"), ("CONFIG GET", "*"), ("SELECT", 1), ("KEYS", "*"), ("RANDOMKEY",),
    ("SORT", "qq:a", "BY", "other:*"), ("COPY", "qq:a", "qq:b", "DB", 1), ("MOVE", "qq:a", 1),
    ("PUBLISH", "other", "x"), ("CLIENT", "LIST"), ("GET other:x",), ("SET other:x", "mine"), (b"GET other:x",),
    ("ZUNIONSTORE", "qq:z", 1, "other:x"), ("OBJECT", "ENCODING", "other:x"), ("DUMP", "other:x"), ("",), (5,),
])
def test_commands_off_the_allowlist_are_refused(ports: PluginPorts, raw: redis.Redis, command: tuple) -> None:
    _refused(ports.redis.execute_command, *command)
    _untouched(raw)


def test_lowercase_and_bytes_command_names_are_checked_too(ports: PluginPorts, raw: redis.Redis) -> None:
    _refused(ports.redis.execute_command, "set", "other:x", "mine")
    _refused(ports.redis.execute_command, b"SET", "other:x", "mine")
    assert ports.redis.execute_command(b"set", "qq:a", "1") and raw.get("qq:a") == b"1"
    _untouched(raw)


def test_a_pipeline_checks_each_command_and_sends_none_after_a_refusal(ports: PluginPorts, raw: redis.Redis) -> None:
    for transaction in (True, False):
        pipe = ports.redis.pipeline(transaction=transaction)
        pipe.set("qq:a", "1")
        _refused(pipe.set, "other:x", "mine")
        _refused(pipe.execute_command, "EVAL", "return 1", 0)
        _refused(pipe.pipeline().get, "other:x")  # a pipeline of the pipeline is guarded too
        pipe.reset()
    with ports.redis.pipeline() as pipe:
        _refused(pipe.watch, "other:x")
    _untouched(raw)
    assert raw.get("qq:a") is None
    _refused(ports.redis.transaction, lambda pipe: pipe.set("other:x", "mine"), "qq:a")
    _untouched(raw)


def test_the_side_doors_are_shut(ports: PluginPorts) -> None:
    _refused(ports.redis.pubsub)
    _refused(ports.redis.monitor)
    _refused(ports.redis.client)
    _refused(ports.redis.lock, "qq:lock")
    _refused(ports.redis.register_script, "return 1")
    _refused(ports.redis.pipeline().pubsub)


# ---------------------------------------------------------------- SQL, settings, tasks, events


def test_db_another_plugins_settings_and_tasks_are_refused(ports: PluginPorts, runtime: App) -> None:
    assert "ports.db" in _refused(lambda: ports.db)
    assert ports.settings("qq") == Settings(token="mine")
    assert "plugins.settings.other" in _refused(ports.settings, "other")
    ports.send_task("qq.fetch")
    assert runtime.queue.sent[-1][0] == "qq.fetch"  # type: ignore[attr-defined]
    _refused(ports.send_task, "other.job")
    assert [s[0] for s in runtime.queue.sent] == ["qq.fetch"]  # type: ignore[attr-defined]


def test_record_event_only_for_a_channel_of_its_own_type(ports: PluginPorts, runtime: App) -> None:
    event_id, created = ports.record_event("qq_main", "1:1", {"text": "hi"})
    assert created and runtime.queue.events == [event_id]  # type: ignore[attr-defined]
    for channel in ["other_main", "nochannel", "", None, "onebot"]:
        _refused(ports.record_event, channel, "1:2", {"text": "hi"})
    assert runtime.queue.events == [event_id]  # type: ignore[attr-defined]


def test_config_channel_redact_and_fetch_stay(ports: PluginPorts, runtime: App) -> None:
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "text/plain")
            self.end_headers()
            self.wfile.write(b"fetched")

        def log_message(self, *args: Any) -> None:
            pass

    assert ports.config is runtime.config and ports.channel("qq_main")["type"] == "onebot"  # type: ignore[index]
    assert ports.redact("plain") == "plain"
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        assert ports.fetch(f"http://127.0.0.1:{server.server_address[1]}/x") == (b"fetched", "text/plain")
    finally:
        server.shutdown()
        server.server_close()
    _refused(lambda: ports.db)  # while SQL stays out of reach


# ---------------------------------------------------------------- where ports are made


def test_every_place_that_makes_ports_picks_the_tier(runtime: App) -> None:
    from web.app import create_app
    from worker.celery_app import make_celery
    from worker.tasks import register_plugin_tasks

    assert isinstance(runtime.channels.adapter("qq_main").ports, RestrictedPluginPorts)  # type: ignore[attr-defined]
    assert runtime.channels.adapter("qq_main").ports.plugin == "qq"  # type: ignore[attr-defined]
    app = create_app(runtime=runtime)
    assert app.test_client().get("/qq/tier").json == {"ports": "RestrictedPluginPorts"}
    worker = make_celery(runtime.config)
    worker.__dict__["plugins"] = runtime.plugins
    register_plugin_tasks(worker, lambda: runtime)
    assert worker.tasks["qq.fetch"]() == "RestrictedPluginPorts"


# ---------------------------------------------------------------- trusted: everything


def test_a_plugin_named_in_plugins_trusted_gets_everything(tmp_path: Path, redis_url: str, raw: redis.Redis) -> None:
    rt = _runtime(tmp_path, redis_url, trusted=["qq"])
    try:
        ports = ports_for(rt, "qq")
        assert type(ports) is PluginPorts and ports.redis is rt.redis
        assert ports.redis.get("other:x") == "theirs" and ports.redis.keys("*")
        assert ports.db is rt.db
        assert ports.settings("other") == Settings(token="theirs")
        ports.send_task("other.job")
        assert ports.record_event("other_main", "1:1", {"text": "hi"})[1]
        assert isinstance(ports_for(rt, "other"), RestrictedPluginPorts)  # only the one named
        assert isinstance(ports_for(rt, "qqx"), RestrictedPluginPorts)
        assert type(rt.channels.adapter("qq_main").ports) is PluginPorts  # type: ignore[attr-defined]
    finally:
        rt.close()


def test_a_builtin_is_always_trusted_and_a_name_alone_is_not(runtime: App) -> None:
    builtins = [s["name"] for s in runtime.plugins.statuses() if s["source"] == "builtin"]
    assert builtins and runtime.config.plugins.trusted == []
    for name in builtins:
        assert type(ports_for(runtime, name)) is PluginPorts
    assert isinstance(ports_for(runtime, "ghost"), RestrictedPluginPorts)  # no such plugin: nothing to trust


def test_trusting_a_name_that_is_no_active_plugin_gives_nothing(tmp_path: Path, redis_url: str) -> None:
    rt = _runtime(tmp_path, redis_url, trusted=["ghost", ""])
    try:
        assert isinstance(ports_for(rt, "ghost"), RestrictedPluginPorts)
        empty = ports_for(rt, "")
        assert isinstance(empty, RestrictedPluginPorts)
        with pytest.raises(PermissionError):
            empty.redis.set(":x", "1")  # no name, no prefix: no key at all
    finally:
        rt.close()


@pytest.mark.parametrize("name,key", [("picobot", "picobot:turn:x"), ("redbeat", "redbeat:x"), ("qq:x", "qq:x:y"),
                                      ("", ":x")])
def test_a_name_that_would_reach_picobots_or_another_plugins_keys_owns_none(runtime: App, name: str, key: str) -> None:
    from picobot.runtime.plugin_ports import GuardedRedis, KeyGuard

    r = GuardedRedis(runtime.redis, KeyGuard(name))
    with pytest.raises(PermissionError):
        r.set(key, "mine")
    with pytest.raises(PermissionError):
        list(r.scan_iter(match=key.split(":")[0] + ":*"))
    assert runtime.redis.get(key) is None


def test_its_process_status_is_written_by_picobot_and_not_by_the_plugin(ports: PluginPorts, runtime: App,
                                                                           raw: redis.Redis) -> None:
    """The runner writes a process's status with the process's own client: the plugin's guarded Redis may not
    write PicoBot's keys, its own process's status key included."""
    from picobot.coord import keys
    from picobot.plugins.contributions import ProcessSpec
    from picobot.runtime.processes import serve, statuses

    stopping = threading.Event()

    def run(ctx: Any) -> None:
        ctx.status("connected", "to the platform")
        ctx.ports.redis.set("qq:seen", "1")
        stopping.set()

    assert serve(ports, ProcessSpec("qq", "connection", run), "main", stopping, handle_signals=False,
                 status_redis=runtime.redis) == 0
    assert [(s["plugin"], s["state"]) for s in statuses(runtime.redis)] == [("qq", "stopped")]
    assert raw.get("qq:seen") == b"1"
    _refused(ports.redis.set, keys.plugin_process("qq", "connection", "main"), "{}")
    _refused(ports.redis.set, keys.plugin_process("other", "connection", "main"), "{}")
    _refused(ports.redis.set, keys.PROCESS_PREFIX + "qqx:connection:main", "{}")
