"""PATCH /api/config against a real web process: an allowlisted edit is validated by the project's loader,
written atomically (readers only ever see the old or the new file), keeps the rest of the file as it was,
and is running after a restart; a bad value, a key off the allowlist or a stale version changes nothing.
"""

from __future__ import annotations

import json
import os
import stat
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from picobot.config import load_config
from picobot.config.edit import EDITABLE, JsonStyle, apply_changes, parse_changes
from picobot.security.redact import is_secret_key
from scripts.fake_llm import FakeLLM
from tests.stack import API_KEY, Stack, base_config
from tests.http_client import HTTP

TG_TOKEN = "123456789:AAE" + "tgsecretTGSECRET" * 2
EXTRA = {"channels": {"tg": {"type": "telegram", "enabled": False, "token": "${PICOBOT_TG_TOKEN}",
                             "allow_from": ["1"]}},
         "zzz_last": None}


@pytest.fixture(scope="module")
def cstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("cfgedit")
    s = Stack(tmp, fake_llm.url)
    s.env["PICOBOT_TG_TOKEN"] = TG_TOKEN
    cfg = base_config(fake_llm.url, s.port) | {"channels": EXTRA["channels"]}
    s.config_path = s.home / "config.json"  # type: ignore[attr-defined]
    # four-space indent and a mode of 0600, which a save must keep
    s.config_path.write_text(json.dumps(cfg, indent=4) + "\n")  # type: ignore[attr-defined]
    os.chmod(s.config_path, 0o600)  # type: ignore[attr-defined]
    try:
        s.start_web()
        yield s
    finally:
        s.stop()


def auth(stack: Stack, **headers: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.token}", **headers}


def editable(stack: Stack) -> dict[str, Any]:
    r = HTTP.get(stack.http + "/api/config/editable", headers=auth(stack), timeout=10)
    assert r.status_code == 200, r.text
    assert r.headers["ETag"] == f'"{r.json()["version"]}"'
    return r.json()


def patch(stack: Stack, body: Any, version: str | None = None, raw: str | None = None, **headers: str) -> httpx.Response:
    if version is None:
        version = editable(stack)["version"]
    h = auth(stack, **({"If-Match": f'"{version}"'} if version else {}), **headers)
    if raw is not None:
        return HTTP.patch(stack.http + "/api/config", content=raw, headers=h | {"Content-Type": "application/json"},
                           timeout=30)
    return HTTP.patch(stack.http + "/api/config", json=body, headers=h, timeout=30)


def file_bytes(stack: Stack) -> bytes:
    return (stack.home / "config.json").read_bytes()


def leftovers(stack: Stack) -> list[str]:
    return [p.name for p in stack.home.iterdir() if p.name.endswith(".tmp")]


def keys(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {k["key"]: k for k in data["keys"]}


def test_editable_keys_carry_no_secret(cstack: Stack) -> None:
    data = editable(cstack)
    text = json.dumps(data)
    assert API_KEY not in text and "S3CRETKEY" not in text and "tgsecret" not in text
    listed = keys(data)
    assert {"agents.default.system_prompt", "gateway.rate_limits.messages_per_chat_per_minute", "tools.disabled",
            "channels.tg.allow_from", "memory.enabled", "models.default.model_id"} <= set(listed)
    assert not any(is_secret_key(part) for k in listed for part in k.split(".")[::2] if part not in ("tg",))
    assert listed["channels.tg.allow_from"]["value"] == ["1"] and listed["channels.tg.allow_from"]["in_file"]
    assert listed["tools.disabled"]["restart"] == ["worker"]
    r = HTTP.get(cstack.http + "/api/config", headers=auth(cstack), timeout=10)
    assert API_KEY not in r.text and "S3CRETKEY" not in r.text and "tgsecret" not in r.text  # the read-only view too


def test_a_valid_edit_is_saved_atomically_keeps_the_file_and_runs_after_a_restart(cstack: Stack) -> None:
    before = json.loads(file_bytes(cstack))
    version = editable(cstack)["version"]
    stop = threading.Event()
    seen: list[str] = []
    broken: list[str] = []

    def reader() -> None:  # a process reading the file while it is saved must never see half of it
        while not stop.is_set():
            text = (cstack.home / "config.json").read_text()
            try:
                json.loads(text)
            except ValueError:
                broken.append(text)
            seen.append(text)

    thread = threading.Thread(target=reader)
    thread.start()
    try:
        for i in range(15):
            r = patch(cstack, {"gateway.rate_limits.messages_per_chat_per_minute": 100 + i}, version)
            assert r.status_code == 200, r.text
            version = r.json()["version"]
    finally:
        stop.set()
        thread.join()
    assert broken == [] and len(seen) > 15 and leftovers(cstack) == []
    r = patch(cstack, {"agents.default.system_prompt": "Be brief. <b>verbatim</b> ${NOT_EXPANDED}",
                       "gateway.rate_limits.messages_per_chat_per_minute": 7, "tools.disabled": ["bash"],
                       "channels.tg.allow_from": ["1", "42"]}, version)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["restart"] == ["channels", "web", "worker"] and "restart" in out["message"]
    assert r.headers["ETag"] == f'"{out["version"]}"'

    text = file_bytes(cstack).decode()
    after = json.loads(text)
    assert text.startswith('{\n    "providers"') and text.endswith("}\n")  # the file's own indent kept
    assert stat.S_IMODE((cstack.home / "config.json").stat().st_mode) == 0o600
    assert after["providers"] == before["providers"]  # the placeholder stays a placeholder: no secret written
    assert after["channels"]["tg"]["token"] == "${PICOBOT_TG_TOKEN}" and TG_TOKEN not in text
    assert list(after) == list(before) + ["tools"]  # key order kept, a new section at the end
    assert after["agents"]["default"] == {**before["agents"]["default"],
                                          "system_prompt": "Be brief. <b>verbatim</b> ${NOT_EXPANDED}"}

    loaded = load_config(home=cstack.home, environ=cstack.env)  # what a process starting now reads
    assert loaded.gateway.rate_limits.messages_per_chat_per_minute == 7 and loaded.tools.disabled == ["bash"]
    listed = keys(editable(cstack))
    assert listed["tools.disabled"]["value"] == ["bash"] and listed["tools.disabled"]["pending"] is True

    cstack.kill("web")
    cstack.start_web()
    running = HTTP.get(cstack.http + "/api/config", headers=auth(cstack), timeout=10).json()["config"]
    assert running["gateway"]["rate_limits"]["messages_per_chat_per_minute"] == 7
    assert running["channels"]["tg"]["allow_from"] == ["1", "42"]
    listed = keys(editable(cstack))
    assert listed["tools.disabled"]["pending"] is False and listed["tools.disabled"]["running"] == ["bash"]
    # null takes a key out of the file: its default applies again
    r = patch(cstack, {"tools.disabled": None, "agents.default.system_prompt": None})
    assert r.status_code == 200, r.text
    saved = json.loads(file_bytes(cstack))
    assert "disabled" not in saved["tools"] and "system_prompt" not in saved["agents"]["default"]


@pytest.mark.parametrize("body, key, words", [
    ({"agents.default.model": "nope"}, "agents.default.model", "unknown model"),
    ({"memory.recall_limit": 999}, "memory.recall_limit", "less than or equal to 50"),
    ({"channels.tg.agent": "ghost"}, "channels.tg.agent", "unknown agent"),
    ({"models.default.temperature": 5}, "models.default.temperature", "less than or equal to 2"),
])
def test_an_invalid_edit_is_refused_with_its_key_path_and_nothing_written(cstack: Stack, body: dict[str, Any],
                                                                          key: str, words: str) -> None:
    before = file_bytes(cstack)
    r = patch(cstack, body)
    assert r.status_code == 400, r.text
    out = r.json()
    assert out["error"] == "invalid_config" and out["problems"][0]["key"] == key and words in out["message"]
    assert ".config.json." not in out["message"] and str(cstack.home / "config.json") in out["message"]
    assert file_bytes(cstack) == before and leftovers(cstack) == []


@pytest.mark.parametrize("key", ["providers.default.api_key", "channels.tg.token", "gateway.port", "gateway.host",
                                 "agents.ghost.system_prompt", "__proto__", "a..b", "", "agents.default",
                                 "plugins.settings.x", "hooks.h.secret", "tools.disabled.0"])
def test_keys_off_the_allowlist_are_refused_with_the_list(cstack: Stack, key: str) -> None:
    before = file_bytes(cstack)
    r = patch(cstack, {key: "x"})
    assert r.status_code == 400, r.text
    out = r.json()
    assert out["error"] == "not_editable" and "agents.*.system_prompt" in out["allowed"]
    assert "tools.disabled" in out["message"] and file_bytes(cstack) == before


def test_a_stale_version_is_a_409_and_a_missing_one_a_428(cstack: Stack) -> None:
    old = editable(cstack)["version"]
    assert patch(cstack, {"skills.enabled": False}, old).status_code == 200
    before = file_bytes(cstack)
    r = patch(cstack, {"skills.enabled": True}, old)
    assert r.status_code == 409 and r.json()["error"] == "version_mismatch"
    assert r.json()["version"] == editable(cstack)["version"] and file_bytes(cstack) == before
    r = patch(cstack, {"skills.enabled": True}, "")
    assert r.status_code == 428 and file_bytes(cstack) == before
    r = HTTP.patch(cstack.http + "/api/config", json={"skills.enabled": True}, headers=auth(cstack, **{"If-Match": "*"}),
                    timeout=10)
    assert r.status_code == 200 and json.loads(file_bytes(cstack))["skills"]["enabled"] is True


def test_a_cross_site_write_is_refused(cstack: Stack) -> None:
    before = file_bytes(cstack)
    r = patch(cstack, {"skills.enabled": False}, Origin="https://evil.example")
    assert r.status_code == 403 and file_bytes(cstack) == before
    r = HTTP.patch(cstack.http + "/api/config", json={"skills.enabled": False}, timeout=10)
    assert r.status_code == 401 and file_bytes(cstack) == before


HOSTILE_RAW = [
    ('{"models.default.temperature": NaN}', "models.default.temperature"),
    ('{"models.default.temperature": Infinity}', "models.default.temperature"),
    ('{"agents.default.max_tool_iterations": 1e400}', "agents.default.max_tool_iterations"),
    ('{"agents.default.max_tool_iterations": 99999999999999999999}', "agents.default.max_tool_iterations"),
    ('{"memory.enabled": "yes"}', "memory.enabled"),
    ('{"memory.recall_limit": true}', "memory.recall_limit"),
    ('{"tools.disabled": "bash"}', "tools.disabled"),
    ('{"tools.disabled": [["bash"]]}', "tools.disabled"),
    ('{"tools.disabled": [{"a": 1}]}', "tools.disabled"),
    ('{"channels.tg.allow_from": ["${PICOBOT_TEST_KEY}"]}', "channels.tg.allow_from"),
    ('{"models.default.model_id": "<PICOBOT_TEST_KEY>"}', "models.default.model_id"),
    ('{"models.default.model_id": "a\\u0000b"}', "models.default.model_id"),
    ('{"tools.disabled": [' + ",".join(['"x"'] * 1001) + "]}", "tools.disabled"),
    ('{"agents.default.system_prompt": "' + "x" * 100_001 + '"}', "agents.default.system_prompt"),
]


@pytest.mark.parametrize("raw, key", HOSTILE_RAW, ids=[k + str(i) for i, (_, k) in enumerate(HOSTILE_RAW)])
def test_hostile_values_get_a_400_naming_the_key(cstack: Stack, raw: str, key: str) -> None:
    before = file_bytes(cstack)
    r = patch(cstack, None, raw=raw)
    assert r.status_code == 400, r.text
    assert r.json()["problems"][0]["key"] == key, r.text
    assert file_bytes(cstack) == before and API_KEY not in r.text


@pytest.mark.parametrize("raw, status", [
    ("[" * 100_000 + "]" * 100_000, 400), ("not json", 400), ("[]", 400), ("{}", 400), ('"x"', 400),
    ('{"a": ' * 5000 + "1" + "}" * 5000, 400), ("{" + ",".join(f'"k{i}": 1' for i in range(100)) + "}", 400),
    ('{"agents.default.system_prompt": "' + "x" * 1_100_000 + '"}', 413),
])
def test_hostile_bodies_change_nothing(cstack: Stack, raw: str, status: int) -> None:
    before = file_bytes(cstack)
    r = patch(cstack, None, raw=raw)
    assert r.status_code == status, r.text[:300]
    assert file_bytes(cstack) == before


# --- the pure parts, with generated input ------------------------------------------------------

JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=20)
NAMES = {"agents": {"default"}, "models": {"default"}, "channels": {"tg"}}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.sampled_from([k.pattern.replace("*", "default" if k.pattern[0] in "am" else "tg")
                                        for k in EDITABLE] + ["x.y", "gateway.port"]), JSON, max_size=5))
def test_parse_changes_accepts_only_checked_values(body: dict[str, Any]) -> None:
    from picobot.config.edit import EditError

    try:
        changes = parse_changes(body, NAMES)
    except EditError as exc:
        assert exc.status == 400 and str(exc)
        return
    for change in changes:
        json.dumps(change.value, allow_nan=False)  # every accepted value can be written as strict JSON


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(st.text(max_size=8), JSON.filter(lambda v: v == v), max_size=6), st.sampled_from([None, "  ", "\t", "    "]),
       st.booleans())
def test_a_saved_file_keeps_its_style_and_everything_not_edited(raw: dict[str, Any], indent: str | None, bom: bool) -> None:
    try:
        original = json.dumps(raw, indent=indent, allow_nan=False)
    except ValueError:
        return
    text = ("\ufeff" if bom else "") + original + "\n"
    style = JsonStyle.of(text)
    changes = parse_changes({"skills.enabled": False}, NAMES)
    out = style.dump(apply_changes(raw, changes))
    assert out.startswith("\ufeff") == bom and out.endswith("\n")
    data = json.loads(out.lstrip("\ufeff"))
    assert {k: v for k, v in data.items() if k != "skills"} == {k: v for k, v in raw.items() if k != "skills"}
    assert data["skills"]["enabled"] is False
    if indent and any(isinstance(v, (dict, list)) and v for v in raw.values()) or (indent and raw):
        assert f"\n{indent}" in out


def test_a_symlinked_config_stays_a_symlink(tmp_path: Path) -> None:
    from picobot.config.edit import save_changes

    real = tmp_path / "dotfiles" / "picobot.json"
    real.parent.mkdir()
    real.write_text('{"skills": {"enabled": true}}\n')
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").symlink_to(real)
    loaded: list[Path] = []
    result = save_changes(home / "config.json", parse_changes({"skills.enabled": False}, NAMES), "*",
                          lambda candidate: loaded.append(load_config(home=home, environ={}, path=candidate)))
    assert (home / "config.json").is_symlink() and json.loads(real.read_text()) == {"skills": {"enabled": False}}
    assert result.path == real and loaded[0].skills.enabled is False
    assert [p.name for p in real.parent.iterdir()] == ["picobot.json"]  # no temp file left beside the target
