"""The shipped plugins (audit log, tool policy): off by default, on by config, through a real host."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from picobot.app import build_plugins
from picobot.config import Config
from picobot.errors import ConfigError
from picobot.plugins import Deny
from picobot.plugins.types import StageContext, ToolCallView, TurnView

CTX = StageContext("telegram:c1:d1", "telegram", "c1", "u1", "t1")
SECRET = "sk-live-" + "A1b2C3d4" * 4


def _config(tmp_path: Path, **plugins: object) -> Config:
    return Config.model_validate({"home": str(tmp_path), "plugins": plugins,
                                  "providers": {"default": {"api_key": SECRET, "base_url": "http://127.0.0.1:9/v1"}},
                                  "models": {"default": {"model_id": "m"}}})


def _names(host) -> set[str]:  # type: ignore[no-untyped-def]
    return {p["name"] for p in host.statuses()}


def test_both_are_off_by_default(tmp_path: Path) -> None:
    host = build_plugins(_config(tmp_path), discover=False)
    assert not {"audit_log", "tool_policy"} & _names(host)
    assert host.before_toolcall(CTX, ToolCallView("c", "bash", {"command": "rm -rf /"})) is None


def test_the_policy_denies_by_tool_glob_and_argument_pattern(tmp_path: Path) -> None:
    host = build_plugins(_config(tmp_path, tool_policy={"enabled": True, "deny": [
        {"tool": "bash", "argument": "command", "pattern": r"rm\s+-rf", "reason": "no recursive deletes"},
        {"tool": "mcp_*"},
        {"tool": "http_request", "pattern": "internal\\.example"},
    ]}), discover=False)
    verdict = host.before_toolcall(CTX, ToolCallView("c", "bash", {"command": "cd /tmp && rm  -rf x"}))
    assert isinstance(verdict, Deny) and verdict.reason == "no recursive deletes"
    assert host.before_toolcall(CTX, ToolCallView("c", "bash", {"command": "ls -la"})) is None
    assert isinstance(host.before_toolcall(CTX, ToolCallView("c", "mcp_time_now", {})), Deny)
    assert isinstance(host.before_toolcall(CTX, ToolCallView("c", "http_request",
                                                             {"url": "https://internal.example/x"})), Deny)
    assert host.before_toolcall(CTX, ToolCallView("c", "http_request", {"url": "https://ok.example"})) is None
    # an argument that is absent, or not a string, is matched as JSON text and never crashes
    assert host.before_toolcall(CTX, ToolCallView("c", "bash", {"command": ["rm", "-rf"]})) is None


def test_a_bad_pattern_fails_at_load_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises((ConfigError, ValueError), match=r"pattern"):
        _config(tmp_path, tool_policy={"enabled": True, "deny": [{"tool": "bash", "pattern": "rm ("}]})


def test_the_audit_log_writes_one_masked_json_line_per_event(tmp_path: Path) -> None:
    host = build_plugins(_config(tmp_path, audit_log={"enabled": True, "path": "logs/audit.jsonl"}), discover=False)
    call = ToolCallView("c1", "http_request", {"url": "https://x.example", "headers": {"Authorization": f"Bearer {SECRET}"}})
    assert host.before_toolcall(CTX, call) is None
    assert host.after_toolcall(CTX, call, f"the key is {SECRET} \ud800") == f"the key is {SECRET} \ud800"
    host.after_output(CTX, TurnView("telegram:c1:d1", "t1", "telegram", "c1", "u1", "default", "completed",
                                    "done " + "x" * 10_000))
    text = (tmp_path / "logs" / "audit.jsonl").read_text(encoding="utf-8")
    assert SECRET not in text
    lines = [json.loads(line) for line in text.splitlines()]
    assert [e["event"] for e in lines] == ["tool_call", "tool_result", "answer"]
    assert lines[0]["tool"] == "http_request" and lines[0]["session_id"] == "telegram:c1:d1"
    assert "[10005 characters]" in lines[2]["text"] and lines[2]["status"] == "completed"
