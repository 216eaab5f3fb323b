"""The client's cheap read of the config agrees with the full loader, and `picobot chat` imports little.

`picobot chat -m` reads the gateway address without pydantic (picobot/config/client.py). Whatever
the file and environment say, it must give what `load_config` gives, or the error `load_config`
raises for the keys it reads.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.config.client import load_client_settings
from picobot.config.loader import load_config
from picobot.errors import ConfigError
from tests.stack import base_config

CLIENT_KEYS = ("host", "port", "pairing_required")


def _full(home: Path, env: dict[str, str], cwd: Path) -> tuple[Any, ...]:
    config = load_config(home=home, environ=env, cwd=cwd)
    g = config.gateway
    return config.home, g.host, g.port, g.pairing_required, config.database_url


def _cheap(home: Path, env: dict[str, str], cwd: Path) -> tuple[Any, ...]:
    s = load_client_settings(home=home, environ=env, cwd=cwd)
    return s.home, s.host, s.port, s.pairing_required, s.database_url


def _outcome(load: Any, *args: Any) -> tuple[Any, ...]:
    try:
        return ("ok", *load(*args))
    except ConfigError as exc:
        return ("error", exc.key_path)


TYPOS = ("gateways", "gateway.prot", "gateway.hots", "gateway.pairing_requried")  # as generated below


def _about_what_clients_read(key_path: str) -> bool:
    return key_path in ("", "gateway", *TYPOS) or any(key_path.startswith(f"gateway.{k}") for k in CLIENT_KEYS)


# Values as a config file and placeholders can produce them: plain, in strings, odd, hostile.
VARS = {"P_PORT": "8080", "P_HOST": "::1", "P_FLAG": "false", "P_ODD": " 80", "P_EMPTY": ""}
ODD = ["80", "080", "+80", "80.0", " 80", "8080\n", "8_0", "1e2", "\u0668\u0660", "\u00b2", "99999999999",
       "true", "false", "True", "yes", "t", "0.0.0.0", "", "\ud800", "localhost", "${P_PORT}", "${P_HOST}",
       "${P_FLAG}", "${P_ODD}", "${P_EMPTY}", "<P_PORT>", "<P_UNSET>", "${P_UNSET}", "$${P_PORT}", "x${P_PORT}",
       80, 80.0, 80.5, -1, 65536, True, False, 0, 1, None, float("nan"), float("inf"), [80], {"port": 80}]
scalars = st.one_of(st.integers(-5, 70000), st.booleans(), st.none(), st.floats(), st.sampled_from(ODD),
                    st.text(max_size=8))
values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner,
                                                                                          max_size=2), max_leaves=4)
gateway_keys = st.sampled_from([*CLIENT_KEYS, "prot", "hots", "pairing_requried", "turn_lease_secs", "public_url"])
gateways = st.one_of(st.dictionaries(gateway_keys, values, max_size=4), values)
files = st.one_of(st.none(), st.fixed_dictionaries({}, optional={"gateway": gateways, "gateways": gateways,
                                                                 "time": st.just({"timezone": "UTC"})}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(file=files, dotenv_home=st.sampled_from(["", "P_PORT=1234\n", "DATABASE_URL=sqlite:///x.db\n"]),
       dotenv_cwd=st.sampled_from(["", "P_PORT=4321\n", "P_FLAG=true\n"]),
       process=st.sampled_from([{}, {"P_PORT": "9999"}, {"DATABASE_URL": " "}]))
def test_the_cheap_read_agrees_with_the_full_loader(file: Any, dotenv_home: str, dotenv_cwd: str,
                                                     process: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home, cwd = Path(tmp) / "home", Path(tmp) / "cwd"
        home.mkdir()
        cwd.mkdir()
        if file is not None:
            (home / "config.json").write_text(json.dumps(file))
        (home / ".env").write_text(dotenv_home)
        (cwd / ".env").write_text(dotenv_cwd)
        env = {**VARS, **process}
        full = _outcome(_full, home, env, cwd)
        cheap = _outcome(_cheap, home, env, cwd)
    if full[0] == "ok" or _about_what_clients_read(full[1]):
        assert cheap == full
    elif cheap[0] == "error":  # a mistake elsewhere: the client may still connect, but must not invent one
        assert cheap == full


@pytest.mark.parametrize("key", CLIENT_KEYS)
@pytest.mark.parametrize("value", ODD, ids=repr)
def test_each_odd_value_gives_what_the_loader_gives(tmp_path: Path, key: str, value: Any) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"gateway": {key: value}}))
    full = _outcome(_full, tmp_path, VARS, tmp_path)
    assert _outcome(_cheap, tmp_path, VARS, tmp_path) == full


def test_dotenv_layers_and_placeholders_reach_the_gateway_address(tmp_path: Path) -> None:
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    cwd.mkdir()
    (home / "config.json").write_text(json.dumps({"gateway": {"host": "${GW_HOST}", "port": "${GW_PORT}"}}))
    (home / ".env").write_text("GW_HOST=10.0.0.1\nGW_PORT=1111\n")
    (cwd / ".env").write_text("GW_PORT=2222\n")
    s = load_client_settings(home=home, environ={}, cwd=cwd)
    assert (s.host, s.port) == ("10.0.0.1", 2222)  # ./.env over the home's .env
    s = load_client_settings(home=home, environ={"GW_PORT": "3333"}, cwd=cwd)
    assert s.port == 3333  # the process environment over both
    assert _cheap(home, {}, cwd) == _full(home, {}, cwd)


def test_a_typo_in_a_key_the_client_reads_is_the_loaders_error(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"gateway": {"prot": 8080}}))
    with pytest.raises(ConfigError) as caught:
        load_client_settings(home=tmp_path, environ={}, cwd=tmp_path)
    assert caught.value.key_path == "gateway.prot" and "did you mean 'port'" in str(caught.value)


def test_no_key_of_the_schema_is_mistaken_for_a_typo() -> None:
    """Real keys never send the client to the slow path (a new key close to `port` would)."""
    from picobot.config.client import _looks_like_typo
    from picobot.config.schema import Config, GatewayConfig

    assert not _looks_like_typo({k: 1 for k in GatewayConfig.model_fields}, *CLIENT_KEYS)
    top = {(f.alias or name): 1 for name, f in Config.model_fields.items() if not f.exclude}
    assert not _looks_like_typo(top, "gateway")


def _modules_loaded_by(code: str, home: Path) -> set[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICOBOT_", "DATABASE_URL"))}
    r = subprocess.run([sys.executable, "-c", code], env=dict(env, PICOBOT_HOME=str(home)), cwd=home,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return set(r.stdout.split())


def test_picobot_chat_imports_neither_the_schema_nor_the_storage(tmp_path: Path) -> None:
    cfg = base_config("http://127.0.0.1:9", 1, turn_lease_secs=30)
    cfg["gateway"]["port"] = "${CHAT_PORT}"
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    (tmp_path / ".env").write_text("CHAT_PORT=9\nPICOBOT_TEST_KEY=sk-test\n")  # nothing listens on port 9
    code = ("import sys\nfrom picobot.cli.main import main\nrc = main(['chat', '-m', 'hi'])\n"
            "assert rc == 2, rc\nprint(*sys.modules)")
    loaded = _modules_loaded_by(code, tmp_path)
    assert "picobot.cli.chat" in loaded and "websocket" in loaded
    assert not {"pydantic", "sqlalchemy", "picobot.config.schema", "picobot.auth.pairing"} & loaded
