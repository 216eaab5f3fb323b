"""Plugin settings at run time (picobot/runtime/settings_store.py): SQL over config.json over the model's defaults,
every write validated against the plugin's model (nothing written when refused), secrets masked, a change seen by
another runtime on the same database within the cache time, the untrusted tier kept to its own keys, and the two
edges — `picobot settings` as a subprocess and /api/settings through Flask's test client. SQLite and PostgreSQL;
real Redis, no mocks.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from pydantic import BaseModel, Field, SecretStr

from picobot.app import App, build_runtime
from picobot.config import Config
from picobot.errors import ConfigError
from picobot.plugins import PluginHost, hookimpl
from picobot.runtime.plugin_ports import SETTINGS_TTL, PluginPorts, RestrictedPluginPorts, ports_for
from picobot.runtime.settings_store import MAX_VALUE_CHARS, SettingsStore
from picobot.security.redact import MASK
from picobot.storage import plugin_settings as rows
from tests.stack import ROOT


class Greeting(BaseModel):
    greeting: str = "hello"
    repeat: int = Field(default=1, ge=1, le=5)
    tags: list[str] = []
    api_token: str = ""
    password: SecretStr = SecretStr("")


class Level(BaseModel):
    level: int = 0


class Greeter:
    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("greeter", Greeting)


class Other:
    @hookimpl
    def picobot_settings(self, register: Any) -> None:
        register("other", Level)


class _Queue:
    def __getattr__(self, name: str) -> Any:
        raise AttributeError(name)


def _runtime(home: Path, db_url: str, redis_url: str, pairing: bool = False) -> App:
    from picobot.app import builtin_plugins

    config = Config(home=home, redis_url=redis_url, database_url=db_url, gateway={"pairing_required": pairing},
                    plugins={"settings": {"greeter": {"greeting": "from-config", "api_token": "cfg-token-1234"}}})
    host = PluginHost(config, builtins=builtin_plugins(config), discover=False)
    assert host.register("greeter", Greeter(), source="entry_point")
    assert host.register("other", Other(), source="entry_point")
    return build_runtime(config, _Queue(), migrate=True, plugins=host)  # type: ignore[arg-type]


@pytest.fixture
def runtime(tmp_path: Path, db_url: str, redis_url: str) -> Iterator[App]:
    rt = _runtime(tmp_path, db_url, redis_url)
    yield rt
    rt.close()


def _stored(rt: App, key: str = "greeter") -> dict[str, Any]:
    with rt.db.connect() as conn:
        return rows.overrides(conn, key)


def _store(rt: App) -> SettingsStore:
    return SettingsStore(rt.config, rt.plugins, rt.db)


# ---------------------------------------------------------------- semantics


def test_sql_over_config_over_the_default_and_unset_falls_back(runtime: App) -> None:
    ports = PluginPorts(runtime, "greeter")
    first = ports.settings("greeter")
    assert (first.greeting, first.repeat) == ("from-config", 1)  # config over default; default where unset
    changed = ports.set_setting("greeter", "greeting", "from-sql")
    assert changed.greeting == "from-sql" and ports.settings("greeter").greeting == "from-sql"  # own write: no wait
    ports.set_setting("greeter", "repeat", 4)
    assert ports.settings("greeter").repeat == 4
    assert _stored(runtime) == {"greeting": "from-sql", "repeat": 4}
    ports.unset_setting("greeter", "greeting")
    assert ports.settings("greeter").greeting == "from-config"
    fields = {f["name"]: f for f in ports.list_settings("greeter")["fields"]}
    assert fields["greeting"]["source"] == "config" and "override" not in fields["greeting"]
    assert fields["repeat"] | {"updated_at": 0} == {"name": "repeat", "type": "int", "secret": False, "default": 1,
                                                     "override": 4, "updated_at": 0, "updated_by": "plugin:greeter",
                                                     "source": "override", "effective": 4}
    assert fields["tags"]["source"] == "default" and fields["tags"]["effective"] == []


def test_a_bad_value_is_refused_with_its_key_path_and_nothing_is_written(runtime: App) -> None:
    ports = PluginPorts(runtime, "greeter")
    ports.set_setting("greeter", "repeat", 2)
    with pytest.raises(ConfigError) as caught:
        ports.set_setting("greeter", "repeat", 9)
    assert caught.value.key_path == "plugins.settings.greeter.repeat"
    with pytest.raises(ConfigError) as caught:
        _store(runtime).update("greeter", {"greeting": "fine", "repeat": "many"})  # one bad value: none of them
    assert caught.value.key_path == "plugins.settings.greeter.repeat"
    with pytest.raises(ConfigError) as caught:
        ports.set_setting("greeter", "nosuch", 1)
    assert caught.value.key_path == "plugins.settings.greeter.nosuch"
    with pytest.raises(ConfigError):
        ports.set_setting("nobody", "x", 1)
    assert _stored(runtime) == {"repeat": 2}
    assert ports.settings("greeter").repeat == 2


def _deep(levels: int) -> Any:
    value: Any = "x"
    for _ in range(levels):
        value = [value]
    return value


@pytest.mark.parametrize("name, value, why", [
    ("tags", _deep(5000), "nests deeper"),
    ("repeat", float("nan"), "finite"),
    ("repeat", float("inf"), "finite"),
    ("greeting", "a\ud800b", "surrogate"),
    ("tags", ["ok", "\udfff"], "surrogate"),
    ("greeting", "x" * (MAX_VALUE_CHARS + 1), "characters"),
    ("repeat", 10 ** 5000, "not JSON"),
    ("repeat", {"a": 1}, "valid integer"),
    ("repeat", "abc", "valid integer"),
    ("tags", "not a list", "valid list"),
    ("tags", [1, {"x": 2}], "valid string"),
    ("greeting", b"bytes", "bytes is not a JSON value"),
    ("greeting", {1: "x"}, "keys must be text"),
], ids=["deep", "nan", "inf", "surrogate", "surrogate-in-list", "huge-string", "huge-int", "object-for-int",
        "text-for-int", "text-for-list", "wrong-items", "bytes", "int-keys"])
def test_hostile_values_are_refused_and_nothing_is_written(runtime: App, name: str, value: Any, why: str) -> None:
    ports = PluginPorts(runtime, "greeter")
    with pytest.raises(ConfigError) as caught:
        ports.set_setting("greeter", name, value)
    assert caught.value.key_path.startswith(f"plugins.settings.greeter.{name}")
    assert why in caught.value.reason
    assert _stored(runtime) == {}
    assert ports.settings("greeter").greeting == "from-config"


def test_secrets_are_masked_when_listed(runtime: App) -> None:
    ports = PluginPorts(runtime, "greeter")
    ports.set_setting("greeter", "password", "hunter2-secret")
    listing = ports.list_settings("greeter")
    text = json.dumps(listing)
    assert "hunter2-secret" not in text and "cfg-token-1234" not in text
    fields = {f["name"]: f for f in listing["fields"]}
    assert fields["password"]["secret"] and fields["password"]["override"] == MASK
    assert fields["password"]["effective"] == MASK
    assert fields["api_token"]["secret"] and fields["api_token"]["config"] == MASK
    assert not fields["greeting"]["secret"] and fields["greeting"]["effective"] == "from-config"
    assert ports.settings("greeter").password.get_secret_value() == "hunter2-secret"  # the plugin sees it


def test_a_change_reaches_another_runtime_within_the_cache_time(tmp_path: Path, db_url: str, redis_url: str) -> None:
    first, second = _runtime(tmp_path / "a", db_url, redis_url), _runtime(tmp_path / "b", db_url, redis_url)
    try:
        reader, writer = PluginPorts(first, "greeter"), PluginPorts(second, "greeter")
        assert reader.settings("greeter").repeat == 1
        writer.set_setting("greeter", "repeat", 5)
        start = time.monotonic()
        while reader.settings("greeter").repeat != 5:
            assert time.monotonic() - start < SETTINGS_TTL + 1.0, "the change did not arrive"
            time.sleep(0.05)
        writer.unset_setting("greeter", "repeat")
        start = time.monotonic()
        while reader.settings("greeter").repeat != 1:
            assert time.monotonic() - start < SETTINGS_TTL + 1.0, "the unset did not arrive"
            time.sleep(0.05)
    finally:
        first.close()
        second.close()


def test_an_untrusted_plugin_touches_only_its_own_keys(runtime: App) -> None:
    ports = ports_for(runtime, "greeter")
    assert isinstance(ports, RestrictedPluginPorts)
    assert ports.set_setting("greeter", "repeat", 3).repeat == 3
    assert ports.list_settings("greeter")["key"] == "greeter"
    for attempt in (lambda: ports.settings("other"), lambda: ports.set_setting("other", "level", 7),
                    lambda: ports.unset_setting("other", "level"), lambda: ports.list_settings("other")):
        with pytest.raises(PermissionError) as caught:
            attempt()
        assert "plugins.settings.other" in str(caught.value) and "plugins.trusted" in str(caught.value)
    assert _stored(runtime, "other") == {}
    assert PluginPorts(runtime, "greeter").set_setting("other", "level", 7).level == 7  # the trusted tier may


# ---------------------------------------------------------------- the web API


def _stop_relay(app: Any) -> None:
    relay = app.extensions.get("picobot.live")
    if relay is not None:
        relay.stop()


def test_the_http_api_lists_patches_and_refuses(runtime: App) -> None:
    from web.app import create_app

    app = create_app(runtime=runtime)
    try:
        client = app.test_client()
        listed = client.get("/api/settings")
        assert listed.status_code == 200
        keys = {s["key"]: s for s in listed.json["settings"]}
        assert set(keys) >= {"greeter", "other"}
        assert "cfg-token-1234" not in listed.get_data(as_text=True)
        answer = client.patch("/api/settings/greeter", json={"repeat": 3, "password": "pw-from-web-1"})
        assert answer.status_code == 200, answer.json
        assert "pw-from-web-1" not in answer.get_data(as_text=True)
        assert _stored(runtime) == {"repeat": 3, "password": "pw-from-web-1"}
        answer = client.patch("/api/settings/greeter", json={"repeat": 2, "greeting": ["wrong"]})
        assert answer.status_code == 400 and "plugins.settings.greeter.greeting" in answer.json["message"]
        answer = client.patch("/api/settings/greeter", data='{"repeat": NaN}', content_type="application/json")
        assert answer.status_code == 400
        for body in ("[" * 5000 + "]" * 5000, "[1]", "{}", "not json"):
            answer = client.patch("/api/settings/greeter", data=body, content_type="application/json")
            assert answer.status_code == 400, body[:20]
        deep = json.dumps({"tags": _deep(200)})
        answer = client.patch("/api/settings/greeter", data=deep, content_type="application/json")
        assert answer.status_code == 400 and "nests deeper" in answer.json["message"]
        assert _stored(runtime) == {"repeat": 3, "password": "pw-from-web-1"}  # none of the refused ones wrote
        answer = client.patch("/api/settings/greeter", json={"repeat": None})
        assert answer.status_code == 200 and _stored(runtime) == {"password": "pw-from-web-1"}
        assert client.patch("/api/settings/nobody", json={"x": 1}).status_code == 404
    finally:
        _stop_relay(app)


def test_the_http_api_is_behind_the_pairing_guard(tmp_path: Path, db_url: str, redis_url: str) -> None:
    from web.app import create_app

    rt = _runtime(tmp_path, db_url, redis_url, pairing=True)
    app = create_app(runtime=rt)
    try:
        client = app.test_client()
        assert client.get("/api/settings").status_code == 401
        assert client.patch("/api/settings/greeter", json={"repeat": 3}).status_code in (401, 403)
        assert _stored(rt) == {}
    finally:
        _stop_relay(app)
        rt.close()


# ---------------------------------------------------------------- the CLI

HOME_PLUGIN = '''
from pydantic import BaseModel, Field
from picobot.plugins import hookimpl


class Settings(BaseModel):
    greeting: str = "hello"
    repeat: int = Field(default=1, ge=1, le=5)
    token: str = ""


@hookimpl
def picobot_settings(register):
    register("homeplug", Settings)
'''


def _picobot(home: Path, db_url: str, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env.update(PICOBOT_HOME=str(home), PYTHONPATH=str(ROOT), DATABASE_URL=db_url)
    return subprocess.run([sys.executable, "-m", "picobot", "settings", *args], capture_output=True, text=True,
                          env=env, cwd=home, timeout=120)


def test_the_cli_lists_gets_sets_and_unsets(tmp_path: Path, db_url: str) -> None:
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "homeplug.py").write_text(textwrap.dedent(HOME_PLUGIN))
    (tmp_path / "config.json").write_text(json.dumps({"plugins": {"settings": {"homeplug": {"greeting": "hi"}}}}))
    done = _picobot(tmp_path, db_url, "set", "homeplug.repeat", "3")
    assert done.returncode == 0, done.stderr
    done = _picobot(tmp_path, db_url, "set", "homeplug.greeting", "plain words")  # not JSON: a string
    assert done.returncode == 0, done.stderr
    done = _picobot(tmp_path, db_url, "set", "homeplug.token", "tok-abcdef-123")
    assert done.returncode == 0, done.stderr
    done = _picobot(tmp_path, db_url, "get", "homeplug.greeting")
    assert done.returncode == 0 and done.stdout.strip() == '"plain words"', done.stderr
    done = _picobot(tmp_path, db_url, "list", "homeplug")
    assert done.returncode == 0, done.stderr
    assert "homeplug.repeat = 3  (override)" in done.stdout and "tok-abcdef-123" not in done.stdout
    for bad in (["set", "homeplug.repeat", "9"], ["set", "homeplug.repeat", "NaN"], ["set", "homeplug.nosuch", "1"]):
        done = _picobot(tmp_path, db_url, *bad)
        assert done.returncode == 2, (bad, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and f"plugins.settings.{bad[1]}" in done.stderr, done.stderr
    for bad in (["get", "nodot"], ["get", "nobody.x"]):
        done = _picobot(tmp_path, db_url, *bad)
        assert done.returncode == 2 and len(done.stderr.strip().splitlines()) == 1, (bad, done.stderr)
    done = _picobot(tmp_path, db_url, "unset", "homeplug.greeting")
    assert done.returncode == 0, done.stderr
    done = _picobot(tmp_path, db_url, "list", "--json")
    assert done.returncode == 0, done.stderr
    section = next(s for s in json.loads(done.stdout)["settings"] if s["key"] == "homeplug")
    fields = {f["name"]: f for f in section["fields"]}
    assert fields["greeting"]["effective"] == "hi" and fields["greeting"]["source"] == "config"
    assert fields["repeat"]["effective"] == 3 and fields["token"]["effective"] == MASK
