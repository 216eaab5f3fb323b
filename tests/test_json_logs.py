"""JSON logs (`logging.format: json` / PICOBOT_LOG_FORMAT): one object a line, secrets masked.

The trace id in JSON lines is checked through a real stack in tests/test_tracing.py.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from picobot.observability.logs import JsonFormatter

SECRET = "sk-live-" + "Z9y8X7w6" * 3

PROGRAM = r"""
import logging, sys
from picobot.config import load_config
from picobot.logs.setup import setup_logging
setup_logging(load_config())
log = logging.getLogger("picobot.probe")
log.warning("calling with key %s and\nsecond line", sys.argv[1])
try:
    raise RuntimeError("boom " + sys.argv[1])
except RuntimeError:
    log.exception("it failed")
logging.getLogger("httpx2").info("HTTP Request: POST http://model/v1 200 OK")  # one per model call: kept quiet
logging.getLogger("other.lib").info("plain %d%% fine", 100)
"""


def run(tmp_path: Path, log_format: str | None, config_format: str | None = None) -> subprocess.CompletedProcess:
    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg: dict = {"providers": {"default": {"type": "openai", "api_key": SECRET}},
                 "models": {"default": {"model_id": "m"}}, "agents": {"default": {"provider": "default", "model": "default"}}}
    if config_format:
        cfg["logging"] = {"format": config_format}
    (home / "config.json").write_text(json.dumps(cfg))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "PICOBOT_"))}
    env["PICOBOT_HOME"] = str(home)
    if log_format is not None:
        env["PICOBOT_LOG_FORMAT"] = log_format
    return subprocess.run([sys.executable, "-c", PROGRAM, SECRET], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)


def test_every_line_is_json_and_the_secret_is_masked(tmp_path: Path) -> None:
    proc = run(tmp_path, "json")
    assert proc.returncode == 0, proc.stderr
    lines = [json.loads(line) for line in proc.stderr.splitlines()]  # each line parses on its own
    assert [line["message"].split(" ")[0] for line in lines] == ["calling", "it", "plain"]
    first, failed, plain = lines
    assert first["level"] == "WARNING" and first["logger"] == "picobot.probe"
    assert first["ts"].endswith("Z") and "T" in first["ts"]
    assert "\nsecond line" in first["message"]  # kept inside the one line's JSON string
    assert "RuntimeError: boom" in failed["exc"] and "Traceback" in failed["exc"]
    assert plain["message"] == "plain 100% fine" and "exc" not in plain
    assert SECRET not in proc.stderr
    assert "trace_id" not in first  # no tracing here


def test_config_sets_json_and_the_environment_wins(tmp_path: Path) -> None:
    by_config = run(tmp_path, None, config_format="json")
    assert all(line.startswith("{") for line in by_config.stderr.splitlines())
    overridden = run(tmp_path, "text", config_format="json")
    assert overridden.returncode == 0
    assert "WARNING picobot.probe: calling with key" in overridden.stderr
    assert SECRET not in overridden.stderr and SECRET not in by_config.stderr


def test_a_bad_format_is_a_clear_error(tmp_path: Path) -> None:
    proc = run(tmp_path, "xml")
    assert proc.returncode != 0
    assert "PICOBOT_LOG_FORMAT" in proc.stderr and "must be text or json" in proc.stderr
    home = tmp_path / "home"
    (home / "config.json").write_text(json.dumps({"logging": {"format": "yaml"}}))
    env = {k: v for k, v in os.environ.items() if not k.startswith("PICOBOT_")}
    env["PICOBOT_HOME"] = str(home)
    bad = subprocess.run([sys.executable, "-m", "picobot", "config"], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert bad.returncode != 0 and "logging.format" in (bad.stderr + bad.stdout)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300), st.text(max_size=40))
def test_any_message_is_one_line_of_json_that_reads_back(message: str, name: str) -> None:
    record = logging.LogRecord(name or "x", logging.INFO, __file__, 1, message, None, None)
    line = JsonFormatter().format(record)
    assert "\n" not in line
    assert json.loads(line)["message"] == message


def test_a_record_logged_inside_a_span_carries_its_ids_in_both_formats() -> None:
    from opentelemetry.sdk.trace import TracerProvider

    from picobot.observability.logs import TextFormatter, TraceContextFilter

    tracer = TracerProvider().get_tracer("test")  # a provider of its own: the process-wide one is untouched
    outside = logging.LogRecord("picobot.x", logging.INFO, "f.py", 1, "before", None, None)
    TraceContextFilter().filter(outside)
    assert not hasattr(outside, "trace_id")
    assert TextFormatter().format(outside).endswith("picobot.x: before")
    with tracer.start_as_current_span("turn") as span:
        record = logging.LogRecord("picobot.x", logging.INFO, "f.py", 1, "inside %s", ("it",), None)
        assert TraceContextFilter().filter(record)
    trace_id = format(span.get_span_context().trace_id, "032x")
    assert TextFormatter().format(record).endswith(f"picobot.x: inside it trace_id={trace_id}")
    line = json.loads(JsonFormatter().format(record))
    assert line["trace_id"] == trace_id and line["span_id"] == format(span.get_span_context().span_id, "016x")


def test_the_log_level_is_a_levels_name() -> None:
    from picobot.errors import ConfigError
    from picobot.logs.settings import log_level

    assert log_level({}) == "INFO" and log_level({"PICOBOT_LOG_LEVEL": " debug "}) == "DEBUG"
    assert log_level({"PICOBOT_LOG_LEVEL": ""}) == "INFO"
    for bad in ("LOUD", "10", "info,debug", "\udc80", "x" * 5000, "NOTSET"):
        with pytest.raises(ConfigError, match="PICOBOT_LOG_LEVEL") as caught:
            log_level({"PICOBOT_LOG_LEVEL": bad})
        assert len(str(caught.value)) < 200


@pytest.mark.parametrize("name,value", [("PICOBOT_LOG_LEVEL", "LOUD"), ("PICOBOT_LOG_FORMAT", "xml")])
@pytest.mark.parametrize("command", ["worker", "web", "beat", "up"])
def test_bad_logging_settings_stop_every_process_with_one_line(tmp_path: Path, command: str, name: str,
                                                               value: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICOBOT_", "OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(home), REDIS_URL="redis://127.0.0.1:1/0", **{name: value})
    proc = subprocess.run([sys.executable, "-m", "picobot", command], env=env, capture_output=True, text=True,
                          timeout=60, cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout[-500:], proc.stderr[-2000:])
    assert name in proc.stderr and "Traceback" not in proc.stderr, proc.stderr
