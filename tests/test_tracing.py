"""One trace per turn, through a real stack: intake (web) -> task -> turn -> model and tool calls.

Spans go to the `file` exporter (one JSON span a line); every process appends to the same file.
The stack also writes JSON logs, so the trace id can be found in the worker's log lines.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest

from tests.conftest import add_rule
from tests.stack import API_KEY, Stack, base_config, wait_for


@pytest.fixture(scope="module")
def tstack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("tracing")
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["tracing"] = {"enabled": True, "exporter": "file", "file_path": str(tmp / "spans.jsonl"),
                      "service_name": "picobot-test"}
    cfg["logging"] = {"format": "json"}
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    s.spans_path = tmp / "spans.jsonl"  # type: ignore[attr-defined]
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def spans(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def trace_of_turn(stack: Stack, turn_id: str) -> list[dict[str, Any]]:
    """Every span of the trace whose turn span has this turn id, once its task span was written too
    (the task ends after the turn: `turn_completed` reaches the client before either is written)."""
    def found() -> list[dict[str, Any]] | None:
        all_spans = spans(stack.spans_path)  # type: ignore[attr-defined]
        turn = [s for s in all_spans if s["attributes"].get("picobot.turn_id") == turn_id]
        trace = [s for s in all_spans if s["trace_id"] == turn[0]["trace_id"]] if turn else []
        return trace if any(s["name"] == "task picobot.turn" for s in trace) else None

    return wait_for(found, 20, f"no turn span for {turn_id}")


def test_a_turn_is_one_trace_from_intake_to_each_call(tstack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "trace-probe",
             {"tool_calls": [{"name": "calculator", "arguments": {"expression": "6*7"}}],
              "usage": {"input_tokens": 50, "output_tokens": 5}},
             {"content": "forty-two", "usage": {"input_tokens": 60, "output_tokens": 2}})
    client = tstack.client()
    try:
        done = client.ask("trace-probe now")
        assert done["status"] == "completed"
        info = client.command("/info")
    finally:
        client.close()
    trace = trace_of_turn(tstack, done["turn_id"])
    by_name = {s["name"]: s for s in trace}
    intake = by_name["intake cli_chat"]
    task = by_name["task picobot.turn"]
    turn = by_name["invoke_agent default"]
    chats = [s for s in trace if s["name"] == "chat fake-model"]
    tool = by_name["execute_tool calculator"]
    assert len({s["trace_id"] for s in trace}) == 1
    assert intake["parent_span_id"] is None and intake["kind"] == "SERVER"
    assert task["parent_span_id"] == intake["span_id"] and task["kind"] == "CONSUMER"
    assert turn["parent_span_id"] == task["span_id"]
    assert len(chats) == 2 and all(c["parent_span_id"] == turn["span_id"] for c in chats)
    assert tool["parent_span_id"] == turn["span_id"]
    first, second = sorted(chats, key=lambda s: s["start_time_unix_nano"])
    assert first["attributes"] == {**first["attributes"], "gen_ai.operation.name": "chat",
                                   "gen_ai.provider.name": "openai", "gen_ai.system": "openai",
                                   "gen_ai.request.model": "fake-model", "gen_ai.usage.input_tokens": 50,
                                   "gen_ai.usage.output_tokens": 5}
    assert first["attributes"]["gen_ai.response.finish_reasons"] == ["tool_calls"]
    assert second["attributes"]["gen_ai.response.finish_reasons"] == ["stop"]
    assert tool["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert tool["attributes"]["gen_ai.tool.name"] == "calculator"
    assert tool["attributes"]["picobot.tool.outcome"] == "ok"
    assert turn["attributes"]["picobot.turn.status"] == "completed"
    assert intake["attributes"]["picobot.fate"] == "started"
    assert turn["start_time_unix_nano"] <= first["start_time_unix_nano"] <= tool["start_time_unix_nano"]
    assert all(s["resource"]["service.name"] == "picobot-test" for s in trace)
    # /info names the dialog's latest trace
    assert info["data"]["last_trace_id"] == intake["trace_id"]
    assert f"last_trace_id: {intake['trace_id']}" in info["text"]
    # the worker's log lines written inside the turn carry its trace id
    def traced_lines() -> list[dict[str, Any]]:
        return [line for line in json_lines(tstack.logs / "w1.log") if line.get("trace_id") == intake["trace_id"]]

    lines = wait_for(traced_lines, 10, "no worker log line with the turn's trace id")
    assert all(line["span_id"] and line["logger"] and line["level"] for line in lines)


def test_a_failed_model_call_is_an_error_span_and_its_log_line_masks_the_key(tstack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "trace-fail", {"error": {"status": 400, "message": f"rejected key {API_KEY} here"}})
    client = tstack.client()
    try:
        done = client.ask("trace-fail now")
    finally:
        client.close()
    assert done["status"] == "failed"
    trace = trace_of_turn(tstack, done["turn_id"])
    chat = next(s for s in trace if s["name"] == "chat fake-model")
    assert chat["status"]["code"] == "ERROR" and chat["attributes"]["error.type"]
    turn = next(s for s in trace if s["name"] == "invoke_agent default")
    assert turn["status"]["code"] == "ERROR" and turn["attributes"]["picobot.turn.status"] == "failed"
    def warning() -> list[dict[str, Any]]:
        return [line for line in json_lines(tstack.logs / "w1.log")
                if line.get("trace_id") == chat["trace_id"] and "failed" in line["message"]]

    found = wait_for(warning, 10, "no failure log line in the turn's trace")
    assert "rejected key" in found[0]["message"]
    assert API_KEY not in (tstack.logs / "w1.log").read_text()
    assert API_KEY not in tstack.spans_path.read_text()  # type: ignore[attr-defined]


def test_untraced_background_tasks_make_no_spans(tstack: Stack) -> None:
    # the sweep marks its start in Redis (Celery's per-task log lines are DEBUG only); it takes a few
    # statements, so a span of its task would be in the file a second later
    wait_for(lambda: tstack.redis().get("picobot:sweep:last"), 20, "the worker never ran its start-up sweep")
    time.sleep(1.0)
    assert not [s for s in spans(tstack.spans_path) if s["name"] == "task picobot.sweep"]  # type: ignore[attr-defined]


def json_lines(path: Path) -> list[dict[str, Any]]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return out


# --- configuration and a missing OpenTelemetry ------------------------------------------------------

MISSING_OTEL = r"""
import logging, sys
sys.modules["opentelemetry"] = None  # as if the otel extra were not installed
logging.basicConfig(level=logging.INFO)
from picobot.config.schema import Config
from picobot.observability import propagation, tracing
from picobot.observability.logs import TraceContextFilter
config = Config(tracing={"enabled": True, "exporter": "otlp"})
assert tracing.setup(config) is None and tracing.setup(config) is None
headers = {}
propagation.inject(headers)
propagation.task_started(config, "t", "picobot.turn", {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"})
propagation.task_finished("t", "SUCCESS")
record = logging.LogRecord("x", logging.INFO, "f.py", 1, "m", None, None)
assert TraceContextFilter().filter(record) and not hasattr(record, "trace_id")
print("HEADERS", headers)
"""


def test_tracing_without_the_packages_starts_with_one_warning(tmp_path: Path) -> None:
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", MISSING_OTEL], capture_output=True, text=True, timeout=60,
                          cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "HEADERS {}" in proc.stdout
    assert proc.stderr.count("OpenTelemetry packages are not installed") == 1
    assert "pip install 'picobot[otel]'" in proc.stderr


@pytest.mark.parametrize("tracing, where", [
    ({"enabled": True, "exporter": "zipkin"}, "tracing.exporter"),
    ({"endpoint": "ftp://collector/v1/traces"}, "tracing.endpoint"),
    ({"sample_ratio": 1.5}, "tracing.sample_ratio"),
    ({"sample_ratio": "half"}, "tracing.sample_ratio"),
    ({"headers": {"x-key": 5}}, "tracing.headers"),
    ({"enabled": True, "colour": "red"}, "tracing.colour"),
])
def test_bad_tracing_config_names_its_key(tmp_path: Path, tracing: dict, where: str) -> None:
    from picobot.config.loader import load_config
    from picobot.errors import ConfigError

    (tmp_path / "config.json").write_text(json.dumps({"tracing": tracing}))
    with pytest.raises(ConfigError) as caught:
        load_config(home=tmp_path, environ={}, cwd=tmp_path, path=tmp_path / "config.json")
    assert caught.value.key_path.startswith(where)
    assert "ftp://collector" not in str(caught.value)


# --- the delivery to an external channel joins the turn's trace ---------------------------------------


@pytest.fixture(scope="module")
def feishu_fake():  # type: ignore[no-untyped-def]
    from scripts.fake_feishu import FakeFeishu

    f = FakeFeishu(app_id="cli_trace", app_secret="secret_trace", rate_limit_qps=None).start()
    yield f
    f.stop()


@pytest.fixture(scope="module")
def fstack(tmp_path_factory: pytest.TempPathFactory, fake_llm, feishu_fake) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("tracing-feishu")
    s = Stack(tmp, fake_llm.url)
    cfg = json.loads((s.home / "config.json").read_text())
    cfg["tracing"] = {"enabled": True, "exporter": "file", "file_path": str(tmp / "spans.jsonl")}
    cfg["channels"] = {"feishu": {"enabled": True, "app_id": feishu_fake.app_id, "app_secret": feishu_fake.app_secret,
                                  "domain": feishu_fake.base_url, "verification_token": "vtok", "encrypt_key": "ekey"}}
    (s.home / "config.json").write_text(json.dumps(cfg))
    s.spans_path = tmp / "spans.jsonl"  # type: ignore[attr-defined]
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def test_the_reply_delivery_is_a_span_of_the_turns_trace(fstack: Stack, feishu_fake, llm) -> None:  # type: ignore[no-untyped-def]
    from scripts.fake_feishu import EventSender

    sender = EventSender(f"{fstack.http}/feishu/events", "vtok", "ekey", app_id=feishu_fake.app_id, fake=feishu_fake)
    try:
        chat_id = "oc_trace0001"
        assert sender.post(sender.message(chat_id=chat_id, text="hello trace", sender_open_id="ou_x")).status_code == 200
        feishu_fake.wait_sent(1, chat_id, timeout=60)
    finally:
        sender.close()

    def chain() -> list[str]:
        """The delivery span's name and its ancestors', as far as they were written."""
        all_spans = spans(fstack.spans_path)  # type: ignore[attr-defined]
        by_id = {s["span_id"]: s for s in all_spans}
        span = next((s for s in all_spans if s["name"] == "task picobot.deliver"), None)
        names = []
        while span is not None:
            names.append(span["name"])
            span = by_id.get(span["parent_span_id"])
        return names

    # each process writes its spans as they end: the delivery may end before the turn that sent it
    wait_for(lambda: len(chain()) >= 4, 20, "the delivery span and its ancestors were not all written")
    all_spans = spans(fstack.spans_path)  # type: ignore[attr-defined]
    deliver = next(s for s in all_spans if s["name"] == "task picobot.deliver")
    names = chain()
    assert names[:3] == ["task picobot.deliver", "invoke_agent default", "task picobot.turn"]
    assert names[3].startswith("intake feishu")
    turn = next(s for s in all_spans if s["name"] == "invoke_agent default" and s["trace_id"] == deliver["trace_id"])
    assert turn["attributes"]["picobot.channel"] == "feishu"
