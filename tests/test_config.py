"""Config loading, validation errors, .env layering and secret masking.

Every test gets its own home and working directory under tmp_path and an explicit
environment dict, so nothing here reads the developer's real ~/.picobot or env.
"""

from __future__ import annotations

import json
import os
from datetime import timezone
from pathlib import Path
from typing import Any

import pytest

from picobot.config import (
    MASK,
    AtSchedule,
    Config,
    CronSchedule,
    apply_dotenv,
    load_config,
    load_dotenv_layers,
    masked,
    picobot_home,
    redact,
    secret_values,
)
from picobot.errors import ConfigError


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def cwd(tmp_path: Path) -> Path:
    path = tmp_path / "work"
    path.mkdir()
    return path


def write_json(path: Path, data: Any) -> Path:
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def load(home: Path, cwd: Path, env: dict[str, str] | None = None, data: Any = None) -> Config:
    if data is not None:
        write_json(home / "config.json", data)
    return load_config(home=home, environ=env or {}, cwd=cwd)


def load_error(home: Path, cwd: Path, data: Any, env: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        load(home, cwd, env, data)
    return info.value


PROVIDER_FILE: dict[str, Any] = {
    "providers": {"default": {"type": "openai", "api_key": "sk-test-0123456789abcdef"}},
    "models": {"default": {"model_id": "gpt-test"}},
}


# --- defaults and environment fallbacks ---------------------------------------------


def test_defaults_with_no_file_and_no_env(home: Path, cwd: Path) -> None:
    cfg = load(home, cwd)
    assert cfg.config_path is None
    assert cfg.home == home
    assert cfg.providers == {} and cfg.models == {}
    assert cfg.agents["default"].provider == "default"
    assert not cfg.provider_configured()
    assert cfg.gateway.host == "127.0.0.1" and cfg.gateway.port == 19876
    assert cfg.gateway.max_message_chars == 32000 and cfg.gateway.max_turn_attempts == 2
    assert cfg.scheduler.misfire_policy == "skip" and cfg.scheduler.jobs == []
    assert cfg.time.timezone == "UTC"
    assert cfg.database_url == f"sqlite:///{home}/data/picobot.db"
    assert cfg.redis_url is None
    assert cfg.workspace_path() == home.parent / "home-workspace"  # beside the home, not in it
    with pytest.raises(ConfigError) as info:
        cfg.agent()
    assert info.value.key_path == "agents.default.provider"


def test_openai_env_fallback(home: Path, cwd: Path) -> None:
    env = {"OPENAI_API_KEY": "sk-abc123456789", "OPENAI_BASE_URL": "http://127.0.0.1:9/v1"}
    cfg = load(home, cwd, env)
    resolved = cfg.agent()
    assert resolved.provider.type == "openai"
    assert resolved.provider.api_key == "sk-abc123456789"
    assert resolved.provider.base_url == "http://127.0.0.1:9/v1"
    assert resolved.model.model_id == "gpt-4o-mini"
    assert cfg.provider_configured()


def test_openai_base_url_alone_counts_as_configured(home: Path, cwd: Path) -> None:
    cfg = load(home, cwd, {"OPENAI_BASE_URL": "http://localhost:11434/v1", "OPENAI_MODEL": "qwen3"})
    assert cfg.provider_configured()
    assert cfg.agent().provider.api_key is None
    assert cfg.agent().model.model_id == "qwen3"


def test_anthropic_env_fallback(home: Path, cwd: Path) -> None:
    cfg = load(home, cwd, {"ANTHROPIC_API_KEY": "sk-ant-0123456789"})
    resolved = cfg.agent()
    assert resolved.provider.type == "anthropic"
    assert resolved.model.model_id == "claude-sonnet-4-5"


def test_env_fallback_does_not_override_file_providers(home: Path, cwd: Path) -> None:
    cfg = load(home, cwd, {"ANTHROPIC_API_KEY": "sk-ant-0123456789"}, PROVIDER_FILE)
    assert cfg.agent().provider.type == "openai"


def test_database_and_redis_urls_from_env(home: Path, cwd: Path) -> None:
    env = {"DATABASE_URL": "postgresql://u:p@db/picobot", "REDIS_URL": "redis://r:6379/0"}
    cfg = load(home, cwd, env)
    assert cfg.database_url == "postgresql://u:p@db/picobot"
    assert cfg.redis_url == "redis://r:6379/0"


def test_picobot_home_from_env(tmp_path: Path) -> None:
    assert picobot_home({"PICOBOT_HOME": str(tmp_path)}) == tmp_path
    assert picobot_home({}) == Path("~/.picobot").expanduser()


def test_relative_workspace_is_under_home(home: Path, cwd: Path) -> None:
    cfg = load(home, cwd, data={"tools": {"workspace": "ws"}})
    assert cfg.workspace_path() == home / "ws"
    cfg = load(home, cwd, data={"tools": {"workspace": "~/elsewhere"}})
    assert cfg.workspace_path() == Path("~/elsewhere").expanduser()


# --- where the file comes from ------------------------------------------------------


def test_home_file_beats_cwd_file(home: Path, cwd: Path) -> None:
    write_json(cwd / "config.json", {"gateway": {"port": 1111}})
    assert load(home, cwd).gateway.port == 1111
    write_json(home / "config.json", {"gateway": {"port": 2222}})
    cfg = load(home, cwd)
    assert cfg.gateway.port == 2222
    assert cfg.config_path == home / "config.json"


def test_explicit_path_must_exist(home: Path, cwd: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_config(home=home, environ={}, cwd=cwd, path=cwd / "nope.json")


# --- placeholders -------------------------------------------------------------------


def test_placeholders_both_syntaxes(home: Path, cwd: Path) -> None:
    data = {
        "providers": {"default": {"api_key": "<KEY>", "base_url": "${URL}"}},
        "models": {"default": {"model_id": "<MODEL>"}},
        "mcpServers": {
            "web": {"baseUrl": "https://mcp.example/mcp", "headers": {"Authorization": "Bearer ${TOKEN}"}}
        },
        "agents": {"default": {"system_prompt": "Use <b>bold</b> and ${HOME} verbatim"}},
        "channels": {"x": {"note": "literal $${KEEP}"}},
    }
    env = {"KEY": "k-1234", "URL": "https://llm.example/v1", "MODEL": "m1", "TOKEN": "t-5678"}
    cfg = load(home, cwd, env, data)
    assert cfg.providers["default"].api_key == "k-1234"
    assert cfg.providers["default"].base_url == "https://llm.example/v1"
    assert cfg.models["default"].model_id == "m1"
    assert cfg.mcp_servers["web"].headers["Authorization"] == "Bearer t-5678"
    assert cfg.agents["default"].system_prompt == "Use <b>bold</b> and ${HOME} verbatim"
    assert cfg.channels["x"].note == "literal ${KEEP}"  # type: ignore[attr-defined]


def test_missing_dollar_variable_names_path_and_variable(home: Path, cwd: Path) -> None:
    data = {"mcpServers": {"web": {"baseUrl": "https://x/mcp", "headers": {"Authorization": "Bearer ${NOPE}"}}}}
    err = load_error(home, cwd, data)
    assert err.key_path == "mcpServers.web.headers.Authorization"
    assert "NOPE" in err.reason


def test_unset_whole_angle_placeholder_is_left_out_of_optional_keys(home: Path, cwd: Path) -> None:
    data = {
        "providers": {"default": {"type": "openai", "base_url": "<OPENAI_BASE_URL>", "api_key": "<OPENAI_API_KEY>"}},
        "models": {"default": {"model_id": "gpt-x"}},
    }
    cfg = load(home, cwd, {"OPENAI_API_KEY": "sk-0123456789"}, data)
    assert cfg.providers["default"].base_url is None
    assert cfg.providers["default"].api_key == "sk-0123456789"


def test_unset_whole_angle_placeholder_in_required_key_names_variable(home: Path, cwd: Path) -> None:
    data = {**PROVIDER_FILE, "models": {"default": {"model_id": "<OPENAI_MODEL_NAME>"}}}
    err = load_error(home, cwd, data)
    assert err.key_path == "models.default.model_id"
    assert "OPENAI_MODEL_NAME" in err.reason


def test_embedded_unset_angle_placeholder_is_an_error(home: Path, cwd: Path) -> None:
    data = {**PROVIDER_FILE, "gateway": {"public_url": "https://<HOST>/bot"}}
    err = load_error(home, cwd, data)
    assert err.key_path == "gateway.public_url" and "HOST" in err.reason


# --- .env layering ------------------------------------------------------------------


def test_dotenv_layering_precedence(home: Path, cwd: Path) -> None:
    (home / ".env").write_text("A=home\nB=home\nC=home\n", encoding="utf-8")
    (cwd / ".env").write_text("B=cwd\nC=cwd\n", encoding="utf-8")
    merged = load_dotenv_layers(home, cwd, {"C": "process"})
    assert (merged["A"], merged["B"], merged["C"]) == ("home", "cwd", "process")


def test_load_config_sees_dotenv_values(home: Path, cwd: Path) -> None:
    (home / ".env").write_text("OPENAI_API_KEY=sk-fromhome1234\n", encoding="utf-8")
    (cwd / ".env").write_text("OPENAI_MODEL=from-cwd\n", encoding="utf-8")
    cfg = load(home, cwd, {})
    assert cfg.agent().provider.api_key == "sk-fromhome1234"
    assert cfg.agent().model.model_id == "from-cwd"


def test_apply_dotenv_fills_only_missing_keys(
    home: Path, cwd: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PICOBOT_TEST_KEEP", "process")
    monkeypatch.delenv("PICOBOT_TEST_NEW", raising=False)
    (home / ".env").write_text("PICOBOT_TEST_KEEP=home\nPICOBOT_TEST_NEW=home\n", encoding="utf-8")
    try:
        added = apply_dotenv(home, cwd)
        assert added == {"PICOBOT_TEST_NEW": "home"}
        assert os.environ["PICOBOT_TEST_KEEP"] == "process"
        assert os.environ["PICOBOT_TEST_NEW"] == "home"
    finally:
        os.environ.pop("PICOBOT_TEST_NEW", None)


# --- errors -------------------------------------------------------------------------


def test_bad_json_reports_line_and_column(home: Path, cwd: Path) -> None:
    (home / "config.json").write_text('{\n  "gateway": {\n    "port": 1\n    "host": "x"\n  }\n}\n')
    with pytest.raises(ConfigError) as info:
        load_config(home=home, environ={}, cwd=cwd)
    message = str(info.value)
    assert "config.json" in message and "line 4" in message and "column 5" in message


def test_wrong_type_names_key_path(home: Path, cwd: Path) -> None:
    data = {"providers": {"default": {"api_key": "k-1234", "llm_timeout_secs": "soon"}},
            "models": {"default": {"model_id": "m"}}}
    err = load_error(home, cwd, data)
    assert err.key_path == "providers.default.llm_timeout_secs"
    assert "number" in err.reason


def test_unknown_key_is_named_with_suggestion(home: Path, cwd: Path) -> None:
    err = load_error(home, cwd, {"gateway": {"prot": 80}})
    assert err.key_path == "gateway.prot"
    assert "unknown key 'prot'" in err.reason and "'port'" in err.reason


def test_several_errors_are_all_listed(home: Path, cwd: Path) -> None:
    err = load_error(home, cwd, {"gateway": {"port": "x", "hots": "y"}, "time": {"timezone": "Mars/Base"}})
    assert err.key_path == "gateway.port"
    message = str(err)
    assert "gateway.hots" in message and "time.timezone" in message and "Mars/Base" in message


def test_unknown_top_level_and_runtime_keys(home: Path, cwd: Path) -> None:
    assert load_error(home, cwd, {"gatway": {}}).key_path == "gatway"
    assert load_error(home, cwd, {"database_url": "sqlite://"}).key_path == "database_url"


def test_unknown_provider_reference(home: Path, cwd: Path) -> None:
    data = {**PROVIDER_FILE, "agents": {"default": {"provider": "x"}}}
    err = load_error(home, cwd, data)
    assert err.key_path == "agents.default.provider"
    assert "unknown provider 'x' (known: default)" in err.reason


def test_unknown_model_and_channel_agent_references(home: Path, cwd: Path) -> None:
    err = load_error(home, cwd, {**PROVIDER_FILE, "agents": {"default": {"model": "big"}}})
    assert err.key_path == "agents.default.model"
    err = load_error(home, cwd, {**PROVIDER_FILE, "channels": {"feishu": {"agent": "ops"}}})
    assert err.key_path == "channels.feishu.agent"


def test_agent_without_provider_is_rejected_when_a_file_names_one(home: Path, cwd: Path) -> None:
    err = load_error(home, cwd, {"agents": {"default": {"provider": "local"}}})
    assert err.key_path == "agents.default.provider"


def test_timezone_validated(home: Path, cwd: Path) -> None:
    assert load(home, cwd, data={"time": {"timezone": "Asia/Shanghai"}}).time.timezone == "Asia/Shanghai"
    err = load_error(home, cwd, {"time": {"timezone": "Nowhere/City"}})
    assert err.key_path == "time.timezone" and "Nowhere/City" in err.reason


def test_tools_max_parallel_bounds(home: Path, cwd: Path) -> None:
    assert load(home, cwd, data={}).tools.max_parallel == 8
    assert load(home, cwd, data={"tools": {"max_parallel": 2}}).tools.max_parallel == 2
    for bad in (0, -1, 65, True, 2.5, "many", None, float("nan")):
        err = load_error(home, cwd, {"tools": {"max_parallel": bad}})
        assert err.key_path == "tools.max_parallel", bad


# --- sections -----------------------------------------------------------------------


def test_channels_keep_their_own_keys(home: Path, cwd: Path) -> None:
    data = {"channels": {"feishu": {"app_id": "cli_1", "app_secret": "s3cret-value", "enabled": True,
                                    "verification_token": "t0ken-value"}}}
    channel = load(home, cwd, data=data).channels["feishu"]
    assert channel.type == "feishu" and channel.enabled and channel.allow_from == ["*"]
    assert channel.model_extra == {"app_id": "cli_1", "app_secret": "s3cret-value", "verification_token": "t0ken-value"}


def test_mcp_servers_aliases_and_transport_rules(home: Path, cwd: Path) -> None:
    data = {
        "mcpServers": {
            "fs": {"type": "stdio", "command": "npx", "args": ["-y", "srv"], "isActive": False},
            "web": {"type": "streamableHttp", "baseUrl": "https://mcp.example/mcp", "name": "Web"},
            "snake": {"type": "http", "base_url": "https://a.example/mcp", "is_active": True},
            "claude": {"command": "uvx", "args": ["mcp-server-time"]},
        }
    }
    servers = load(home, cwd, data=data).mcp_servers
    assert servers["fs"].is_active is False and servers["fs"].command == "npx"
    assert servers["web"].base_url == "https://mcp.example/mcp" and servers["web"].is_active
    assert servers["snake"].base_url == "https://a.example/mcp"
    assert servers["claude"].type == "stdio"
    snake_case = load(home, cwd, data={"mcp_servers": {"fs": {"type": "stdio", "command": "x"}}})
    assert "fs" in snake_case.mcp_servers

    err = load_error(home, cwd, {"mcpServers": {"bad": {"type": "stdio"}}})
    assert err.key_path == "mcpServers.bad" and "command" in err.reason
    err = load_error(home, cwd, {"mcpServers": {"bad": {"type": "sse"}}})
    assert err.key_path == "mcpServers.bad" and "baseUrl" in err.reason


def test_masked_uses_file_spelling(home: Path, cwd: Path) -> None:
    data = {"mcpServers": {"web": {"type": "http", "baseUrl": "https://x.example/mcp"}}}
    out = masked(load(home, cwd, data=data))
    assert out["mcpServers"]["web"]["baseUrl"] == "https://x.example/mcp"
    assert out["mcpServers"]["web"]["isActive"] is True


def job(**fields: Any) -> dict[str, Any]:
    return {"scheduler": {"jobs": [{"id": "j", "kind": "internal_event", **fields}]}}


def test_scheduler_job_schedules(home: Path, cwd: Path) -> None:
    data = {"time": {"timezone": "Asia/Shanghai"}, "scheduler": {"jobs": [
        {"id": "a", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 300},
         "payload": {"event": "session_cleanup"}},
        {"id": "b", "kind": "agent_task", "schedule": {"type": "cron", "expression": " 30  18 * * mon-fri "},
         "target": {"channel": "feishu", "chat_id": "oc_x"}, "payload": {"prompt": "summarise"}},
        {"id": "c", "kind": "outbound_message", "schedule": {"type": "at", "at": "2030-01-02T03:04:05"},
         "target": {"channel": "feishu", "chat_id": "oc_x"}, "payload": {"content": "hi"}},
        {"id": "d", "kind": "internal_event", "schedule": {"type": "at", "at": "2030-01-02T03:04:05Z"}},
    ]}}
    jobs = load(home, cwd, data=data).scheduler.jobs
    assert isinstance(jobs[1].schedule, CronSchedule)
    assert jobs[1].schedule.expression == "30 18 * * mon-fri"
    assert isinstance(jobs[2].schedule, AtSchedule)
    assert str(jobs[2].schedule.at.tzinfo) == "Asia/Shanghai"  # naive: read in time.timezone
    assert isinstance(jobs[3].schedule, AtSchedule) and jobs[3].schedule.at.tzinfo == timezone.utc


@pytest.mark.parametrize(
    ("fields", "key_path", "needle"),
    [
        ({"schedule": {"type": "cron", "expression": "* * *"}}, "scheduler.jobs[0].schedule.expression", "5 fields"),
        ({"schedule": {"type": "cron", "expression": "61 * * * *"}}, "scheduler.jobs[0].schedule.expression", "minute"),
        ({"schedule": {"type": "weekly"}}, "scheduler.jobs[0].schedule", "weekly"),
        ({"schedule": {"type": "delay", "seconds": 0}}, "scheduler.jobs[0].schedule.seconds", "greater than 0"),
        ({"schedule": {"type": "delay", "seconds": 5, "minutes": 1}}, "scheduler.jobs[0].schedule.minutes", "unknown key"),
        ({"schedule": {"type": "at", "at": "tomorrow"}}, "scheduler.jobs[0].schedule.at", "datetime"),
        ({"schedule": {"type": "interval", "seconds": 5}, "kind": "agent_task",
          "target": {"channel": "c", "chat_id": "x"}}, "scheduler.jobs[0]", "payload.prompt"),
        ({"schedule": {"type": "interval", "seconds": 5}, "kind": "outbound_message"}, "scheduler.jobs[0]", "target"),
    ],
)
def test_scheduler_job_validation(
    home: Path, cwd: Path, fields: dict[str, Any], key_path: str, needle: str
) -> None:
    err = load_error(home, cwd, job(**fields))
    assert err.key_path == key_path
    assert needle in err.reason


def test_duplicate_job_ids(home: Path, cwd: Path) -> None:
    one = {"id": "same", "kind": "internal_event", "schedule": {"type": "interval", "seconds": 5}}
    err = load_error(home, cwd, {"scheduler": {"jobs": [one, one]}})
    assert err.key_path == "scheduler.jobs" and "twice" in err.reason


# --- secrets ------------------------------------------------------------------------

SECRETS = {
    "api_key": "sk-live-0123456789abcdef",
    "header": "hdr-token-998877",
    "app_secret": "feishu-app-secret-42",
    "mcp_token": "ghp-like-token-value",
    "env_token": "env-secret-31337",
    "db_pass": "dbpass-0001",
    "redis_pass": "redispw-777",
    "query_key": "qkey-5555",
}


def secret_config(home: Path, cwd: Path) -> Config:
    data = {
        "providers": {"default": {
            "api_key": SECRETS["api_key"],
            "base_url": f"https://llm.example/v1?api_key={SECRETS['query_key']}&region=eu",
            "extra_headers": {"X-Custom-Auth": SECRETS["header"], "X-Trace": "visible-trace"},
        }},
        "models": {"default": {"model_id": "gpt-visible", "max_tokens": 1000}},
        "channels": {"feishu": {"app_id": "cli_visible", "app_secret": SECRETS["app_secret"]}},
        "mcpServers": {
            "web": {"type": "http", "baseUrl": "https://mcp.example/mcp",
                    "headers": {"Authorization": f"Bearer {SECRETS['mcp_token']}"}},
            "gh": {"type": "stdio", "command": "gh-mcp", "env": {"GITHUB_TOKEN": SECRETS["env_token"]}},
        },
    }
    env = {
        "DATABASE_URL": f"postgresql://picobot:{SECRETS['db_pass']}@db:5432/picobot",
        "REDIS_URL": f"redis://:{SECRETS['redis_pass']}@cache:6379/0",
    }
    return load(home, cwd, env, data)


def test_masked_hides_every_secret(home: Path, cwd: Path) -> None:
    cfg = secret_config(home, cwd)
    out = masked(cfg)
    text = json.dumps(out)
    for value in SECRETS.values():
        assert value not in text
    assert out["providers"]["default"]["api_key"] == MASK
    assert out["_runtime"]["database_url"] == f"postgresql://picobot:{MASK}@db:5432/picobot"
    assert out["providers"]["default"]["base_url"] == f"https://llm.example/v1?api_key={MASK}&region=eu"
    # Ordinary values stay readable, including numbers under token-ish names.
    assert "visible-trace" in text and "gpt-visible" in text and "cli_visible" in text
    assert out["models"]["default"]["max_tokens"] == 1000


def test_repr_does_not_leak_secrets(home: Path, cwd: Path) -> None:
    text = repr(secret_config(home, cwd))
    for value in SECRETS.values():
        assert value not in text


def test_secret_values_and_redact(home: Path, cwd: Path) -> None:
    cfg = secret_config(home, cwd)
    found = secret_values(cfg)
    assert set(SECRETS.values()) <= found
    line = f"calling with key={SECRETS['api_key']} and {SECRETS['redis_pass']} done"
    assert redact(line, found) == f"calling with key={MASK} and {MASK} done"


def test_redact_patterns_without_known_secrets() -> None:
    text = (
        "Authorization: Bearer abc.def-ghi_123 "
        "key sk-proj-ABCDEFGH12345678 "
        "url https://bob:hunter22@host/x?token=t0k3n&page=2 "
        "Authorization: Basic dXNlcjpwYXNz "
        "max_tokens=10 task-runner; Basic setup done"
    )
    out = redact(text, [])
    for leaked in ("abc.def-ghi_123", "sk-proj-ABCDEFGH12345678", "hunter22", "t0k3n", "dXNlcjpwYXNz"):
        assert leaked not in out
    assert "page=2" in out and "max_tokens=10" in out and "task-runner" in out
    assert "Basic setup done" in out
    assert "https://bob:" in out


def test_url_user_names_stay_but_token_users_are_masked() -> None:
    assert redact("postgresql://picobot@db/x", []) == "postgresql://picobot@db/x"
    token = "ghs0123456789abcdefXYZ"
    assert redact(f"https://{token}@github.com/o/r.git", []) == f"https://{MASK}@github.com/o/r.git"


def test_redact_ignores_tiny_values() -> None:
    assert redact("a b c", ["a", ""]) == "a b c"


def test_beat_lock_must_span_three_ticks(home: Path, cwd: Path) -> None:
    err = load_error(home, cwd, {"scheduler": {"tick_resolution_ms": 2000, "beat_lock_secs": 5}})
    assert err.key_path == "scheduler"
    assert "beat_lock_secs (5)" in err.reason and "three ticks (6 s" in err.reason
    # a tick is at most 5 s whatever the resolution says, so 15 s always suffices
    write_json(home / "config.json", {"scheduler": {"tick_resolution_ms": 60000, "beat_lock_secs": 15}})
    assert load_config(home=home, environ={}, cwd=cwd).scheduler.beat_lock_secs == 15
    assert load_error(home, cwd, {"scheduler": {"beat_lock_secs": 0}}).key_path == "scheduler.beat_lock_secs"


@pytest.mark.parametrize("value", ["soon", "", None, True, 1.5, [30], {"secs": 30}, -1, 10**30, "NaN"])
def test_beat_lock_of_a_wrong_type_or_range_is_named(home: Path, cwd: Path, value: Any) -> None:
    err = load_error(home, cwd, {"scheduler": {"beat_lock_secs": value}})
    assert err.key_path in ("scheduler.beat_lock_secs", "scheduler"), err
    assert "beat_lock_secs" in str(err)
