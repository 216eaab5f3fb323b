"""Settings accepted but not acted on yet: `picobot config` warns about each one set, the docs mark each."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.config import AgentConfig, ChannelConfig, Config, ModelConfig
from picobot.config.unused import UNUSED_KEYS, unused_settings, warning_lines

SHIPPED = frozenset({"feishu", "telegram"})  # the channel types PicoBot ships (picobot/channels/plugin.py)

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "CONFIGURATION.md"
MARK = "**Not acted on yet**"

INERT_CONFIG = {
    "providers": {"default": {"type": "openai", "api_key": "<TEST_KEY>", "memory_maintenance_timeout_secs": 5}},
    "models": {"default": {"model_id": "m", "context_window_tokens": 1000}},
    "agents": {"default": {"max_tool_iterations": 3}, "writer": {"system_prompt": "short"}},
    "gateway": {"port": 1, "session_ttl_secs": "<TTL>"},
    "scheduler": {"jobs": [{"id": "j", "kind": "internal_event", "schedule": {"type": "delay", "seconds": 1}}]},
    "channels": {"feishu": {"enabled": True, "app_id": "cli_1", "app_secret": "<TEST_KEY>", "verification_token": "<TEST_KEY>"},
                 "matrix": {"enabled": True, "token": "<TEST_KEY>"}, "web": {"allow_from": ["*"]}},
    "subagents": {"enabled": False},
    "skills": {"enabled": False},
    "tools": {"max_parallel": 2, "network": {"allow": ["10.0.0.0/8"]}},
    "time": {"timezone": "UTC"},
}
# providers.*.memory_maintenance_timeout_secs is set above and acted on (memory maintenance): no warning
EXPECTED = {"channels.matrix"}  # scheduler.*, session_ttl_secs and named agents are acted on


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "REDIS_URL", "DATABASE_URL", "PICOBOT_"))}
    env.update(PICOBOT_HOME=str(home), **extra)
    return env


def _picobot_config(tmp_path: Path, config: dict | None, **env: str) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    if config is not None:
        (home / "config.json").write_text(json.dumps(config))
    return subprocess.run([sys.executable, "-m", "picobot", "config"], env=_env(home, **env), cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)


def _warned(stderr: str) -> list[str]:
    return re.findall(r"^picobot: warning: (\S+) is accepted but not acted on yet", stderr, re.M)


def test_config_warns_once_per_inert_key_with_its_path(tmp_path: Path) -> None:
    # session_ttl_secs comes from the environment through a placeholder: set by the user all the same
    r = _picobot_config(tmp_path, INERT_CONFIG, TEST_KEY="sk-secret-value-0123456789", TTL="60")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["gateway"]["session_ttl_secs"] == 60
    warned = _warned(r.stderr)
    assert sorted(warned) == sorted(EXPECTED)  # one line each; nothing acted on (agents, tools, skills)
    assert "sk-secret-value-0123456789" not in r.stdout + r.stderr


def test_config_without_inert_keys_warns_about_nothing(tmp_path: Path) -> None:
    # the environment fallback builds providers.default and models.default: no inert key among them
    r = _picobot_config(tmp_path, None, OPENAI_API_KEY="sk-secret-value-0123456789", OPENAI_BASE_URL="http://127.0.0.1:9/v1")
    assert r.returncode == 0, r.stderr
    assert "warning" not in r.stderr
    r = _picobot_config(tmp_path, {"agents": {"default": {}}, "scheduler": {}, "channels": {}, "gateway": {"port": 2}})
    assert r.returncode == 0 and "warning" not in r.stderr, r.stderr


def test_config_prints_a_lone_surrogate_key_as_valid_json(tmp_path: Path) -> None:
    # JSON allows "\ud800"; UTF-8 cannot carry it. The printout must neither crash nor lose the key.
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text('{"channels": {"x\\ud800y": {"enabled": true}}}')
    r = subprocess.run([sys.executable, "-m", "picobot", "config"], env=_env(home), cwd=tmp_path,
                       capture_output=True, timeout=120)
    assert r.returncode == 0, r.stderr.decode(errors="replace")
    [channel] = json.loads(r.stdout)["channels"].values()
    assert channel["type"] == "x\ud800y"  # the type defaults to the key: the value survives, escaped
    assert b'channels."x\\ud800y" is accepted but not acted on yet' in r.stderr


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(st.text(max_size=12), st.just({}), max_size=4),
       st.dictionaries(st.text(max_size=12), st.just({}), max_size=3))
def test_warnings_are_one_printable_line_per_key_whatever_the_names(channels: dict, agents: dict) -> None:
    agents = {"default": {}, **agents}
    config = Config.model_validate({"channels": channels, "agents": agents})
    lines = warning_lines(config, SHIPPED)
    from picobot.channels.registry import known_channel

    unknown = [key for key, ch in config.channels.items() if not known_channel(key, ch.type)]
    assert len(lines) == len(unknown)  # named agents are acted on (channels and jobs pick them)
    for line in lines:
        assert "\n" not in line and "\r" not in line
        line.encode("utf-8")  # a lone surrogate in a key is shown escaped, never raises when printed


def _section(doc: str, top: str) -> str:
    match = re.search(rf"^### `{re.escape(top)}`.*?(?=^### |\Z)", doc, re.M | re.S)
    assert match, f"docs/CONFIGURATION.md has no section for `{top}`"
    return match.group(0)


def test_the_reference_marks_every_key_that_is_not_acted_on() -> None:
    doc = DOC.read_text()
    for key in UNUSED_KEYS:
        parts = key.pattern.split(".")
        section = _section(doc, parts[0])
        if parts[1:] == ["*"]:  # a whole section (or map) is inert: said before its first table
            intro = section.split("\n|", 1)[0]
            assert MARK in intro, f"the `{parts[0]}` section does not say it is not acted on yet"
        else:
            rows = [line for line in section.splitlines() if line.startswith(f"| `{parts[-1]}` |")]
            assert rows and all(MARK in row for row in rows), f"{key.pattern} is not marked in the reference"


def test_every_inert_key_pattern_names_real_settings() -> None:
    # a renamed key must not leave a pattern that can never match
    config = Config.model_validate(INERT_CONFIG | {"providers": {"default": {"memory_maintenance_timeout_secs": 5}},
                                                   "gateway": {"session_ttl_secs": 60}})
    matched = {key.pattern for key in UNUSED_KEYS
               for path, _ in unused_settings(config, SHIPPED) if key.matches(tuple(path.split(".")))}
    assert matched == {key.pattern for key in UNUSED_KEYS}


def test_deeply_nested_free_form_values_do_not_break_the_warnings() -> None:
    deep: dict = {}
    for _ in range(5000):  # model options pass through as-is, however deep
        deep = {"x": deep}
    # built without validation: the walk over what was set is under test, not pydantic's own limits
    config = Config.model_construct(models={"default": ModelConfig.model_construct(model_id="m", options=deep)},
                                    agents={"default": AgentConfig.model_construct()},
                                    channels={"matrix": ChannelConfig.model_construct(type="matrix")})
    assert warning_lines(config, SHIPPED) == [warning_lines(config, SHIPPED)[0]] and "channels.matrix" in warning_lines(config, SHIPPED)[0]
