"""GET /api/logs against real processes: lines of the worker, web and beat reach one capped Redis stream,
masked, and come back newest first through the filters; a Redis that goes away never holds up logging.

The worker's line comes from a home plugin file that logs the provider's API key after every turn (a
careless plugin): the key must arrive masked.
"""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import given, settings, strategies as st

from picobot.logstream import STREAM_KEY
from picobot.logstream.capture import CaptureHandler, CaptureSettings
from picobot.logstream.process import ProcessLabel, process_label
from picobot.logstream.query import MAX_LIMIT, QueryError, decode, parse_query
from scripts.fake_llm import FakeLLM
from tests.stack import API_KEY, Stack, wait_for
from tests.http_client import HTTP

CARELESS_PLUGIN = '''
import logging

from picobot.plugins import hookimpl

log = logging.getLogger("picobot_home_plugins.careless")


@hookimpl
def picobot_turn_finished(turn, ports):
    log.warning("logtest-marker turn %s said %s with key %s", turn.turn_id, turn.final_text,
                ports.config.providers["default"].api_key)
'''


@pytest.fixture(scope="module")
def lstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("logs"), fake_llm.url)
    (s.home / "plugins").mkdir()
    (s.home / "plugins" / "careless.py").write_text(CARELESS_PLUGIN)
    try:
        s.start()
        yield s
    finally:
        s.stop()


def get_logs(stack: Stack, **params: Any) -> httpx.Response:
    return HTTP.get(stack.http + "/api/logs", params=params, headers={"Authorization": f"Bearer {stack.token}"},
                     timeout=10)


def lines(stack: Stack, **params: Any) -> list[dict[str, Any]]:
    r = get_logs(stack, **params)
    assert r.status_code == 200, r.text
    return r.json()["lines"]


def test_a_workers_line_shows_up_with_its_secret_masked(lstack: Stack) -> None:
    marker = uuid.uuid4().hex[:10]
    client = lstack.client()
    done = client.ask(f"echo {marker} <b>bold</b>")
    assert done["type"] == "turn_completed"
    wait_for(lambda: lines(lstack, q=marker), 30, "the worker's line did not reach /api/logs")
    [line] = lines(lstack, q=marker)
    assert line["process"] == "worker" and line["name"].startswith("w1@") and line["level"] == "WARNING"
    assert line["logger"] == "picobot_home_plugins.careless" and isinstance(line["pid"], int) and line["host"]
    assert "logtest-marker" in line["message"] and "<b>bold</b>" in line["message"]  # text as logged; the page escapes
    assert API_KEY not in line["message"] and "S3CRETKEY" not in line["message"] and "********" in line["message"]
    raw = "".join(str(fields) for _, fields in lstack.redis().xrange(STREAM_KEY))
    assert "logtest-marker" in raw and API_KEY not in raw  # masked before it left the worker, not only on reading
    r = get_logs(lstack, q="S3CRETKEY")
    assert r.status_code == 200 and r.json()["lines"] == [] and API_KEY not in r.text


def test_web_worker_and_beat_share_the_stream_and_filters_narrow_it(lstack: Stack) -> None:
    client = lstack.client()
    assert client.say("x" * 40_000)["type"] == "rejected"  # the web process logs the rejection
    client.close()
    for process in ("web", "worker", "beat"):
        wait_for(lambda: lines(lstack, process=process), 30, f"no line of {process} in /api/logs")
        assert {x["process"] for x in lines(lstack, process=process)} == {process}
    worker_names = {x["name"] for x in lines(lstack, process="worker", limit=MAX_LIMIT)}
    assert any(n.startswith("w1@") for n in worker_names)
    name = next(n for n in worker_names if n.startswith("w1@"))
    assert {x["name"] for x in lines(lstack, process=name)} == {name}  # a node name filters too

    warnings = lines(lstack, level="warning", limit=MAX_LIMIT)
    assert warnings and {x["level"] for x in warnings} <= {"WARNING", "ERROR", "CRITICAL"}
    everything = lines(lstack, limit=MAX_LIMIT)
    assert any(x["level"] == "INFO" for x in everything)
    assert [x["id"] for x in everything] == sorted((x["id"] for x in everything),
                                                   key=lambda i: tuple(map(int, i.split("-"))), reverse=True)
    scoped = lines(lstack, logger="picobot_home_plugins", limit=MAX_LIMIT)
    assert scoped and all(x["logger"].startswith("picobot_home_plugins.") for x in scoped)
    assert lines(lstack, logger="picobot_home") == []  # a prefix of a name segment is not a parent logger
    assert lines(lstack, q="LOGTEST-MARKER")  # case-insensitive


def _key(entry_id: str) -> tuple[int, int]:
    ms, seq = entry_id.split("-")
    return int(ms), int(seq)


def test_pages_go_back_in_time_without_gaps_or_repeats(lstack: Stack) -> None:
    everything = [x["id"] for x in lines(lstack, limit=MAX_LIMIT)]
    assert len(everything) >= 4
    oldest = _key(everything[-1])
    seen: list[str] = []
    before = None
    for _ in range(1000):  # pages of 3 from the newest line (more may have arrived) back past `everything`
        page = get_logs(lstack, limit=3, **({"before": before} if before else {})).json()
        seen += [x["id"] for x in page["lines"]]
        before = page["next_before"]
        if before is None or _key(seen[-1]) <= oldest:
            break
    keys = [_key(i) for i in seen]
    assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys)  # newest first, no repeats
    assert set(everything) <= set(seen)  # no gaps


@pytest.mark.parametrize("params, param", [
    ({"level": "LOUD"}, "level"), ({"limit": "0"}, "limit"), ({"limit": str(MAX_LIMIT + 1)}, "limit"),
    ({"limit": "ten"}, "limit"), ({"limit": "１０"}, "limit"), ({"before": "yesterday"}, "before"),
    ({"before": "99999999999999999999-0"}, "before"), ({"q": "x" * 201}, "q"), ({"process": "web'; DROP"}, "process"),
    ({"logger": "a" * 129}, "logger"),
])
def test_bad_filters_get_a_400_naming_the_parameter(lstack: Stack, params: dict[str, str], param: str) -> None:
    r = get_logs(lstack, **params)
    assert r.status_code == 400 and r.json()["error"] == "bad_query" and r.json()["param"] == param, r.text


def test_logs_need_a_paired_device(lstack: Stack) -> None:
    assert HTTP.get(lstack.http + "/api/logs", timeout=10).status_code == 401


# --- the parsers, with hostile input -----------------------------------------------------------


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(["level", "q", "process", "logger", "limit", "before", "x"]), st.text(max_size=300)))
def test_parse_query_accepts_or_names_the_parameter(args: dict[str, str]) -> None:
    try:
        query = parse_query(args)
    except QueryError as exc:
        assert exc.param in args and str(exc)
        return
    assert 1 <= query.limit <= MAX_LIMIT and len(query.q) <= 200 * 3


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.text(max_size=10), st.one_of(st.text(max_size=50), st.none(), st.integers(), st.binary(max_size=8))))
def test_decode_never_fails_on_what_is_in_the_stream(fields: dict[str, Any]) -> None:
    line = decode("1-0", fields)
    assert set(line) >= {"id", "ts", "level", "logger", "process", "name", "host", "pid", "message", "truncated"}
    assert isinstance(line["message"], str) and (line["ts"] is None or isinstance(line["ts"], float))


@pytest.mark.parametrize("argv, role, name", [
    (["/v/bin/gunicorn", "-k", "gthread", "web.app:create_app()"], "web", "web@h1"),
    (["/v/lib/python3/site-packages/gunicorn/__main__.py", "-b", "x"], "web", "web@h1"),
    (["/v/lib/celery/__main__.py", "-A", "worker.app", "worker", "-n", "w1@%h"], "worker", "w1@h1"),
    (["/v/bin/celery", "-A", "worker.app", "worker", "--hostname=a@%n.%d"], "worker", "a@h1."),
    (["/v/bin/celery", "-A", "worker.app", "worker"], "worker", "worker@h1"),
    (["/v/bin/celery", "-A", "worker.app", "beat", "-S", "x"], "beat", "beat@h1"),
    (["/v/lib/picobot/__main__.py", "telegram", "--channel", "t"], "telegram", "telegram@h1"),
    ([], "python", "python@h1"),
])
def test_each_process_is_named_as_an_operator_looks_for_it(argv: list[str], role: str, name: str) -> None:
    assert process_label(argv, {}, host="h1") == ProcessLabel(role, name, "h1")
    assert process_label(argv, {"PICOBOT_PROCESS": "feishu-2"}, host="h1").role == "feishu-2"


# --- Redis going away -----------------------------------------------------------------------------


def _handler(url: str, **kw: Any) -> tuple[logging.Logger, CaptureHandler]:
    handler = CaptureHandler(url, CaptureSettings(**kw), ProcessLabel("test", "test@here", "here"))
    logger = logging.getLogger(f"picobot.test.capture.{uuid.uuid4().hex[:8]}")
    logger.propagate = False
    logger.setLevel(logging.INFO)
    logger.addHandler(handler)
    return logger, handler


def test_redis_down_never_holds_up_logging_and_the_loss_is_reported(tmp_path: Path) -> None:
    import redis

    from picobot.cli.embedded_redis import free_port, start_embedded

    port = free_port()
    proc, url = start_embedded(tmp_path / "r1", port)
    client = redis.Redis.from_url(url, decode_responses=True)
    logger, handler = _handler(url, buffer_lines=1000)
    try:
        logger.info("before the outage")
        wait_for(lambda: client.xlen(STREAM_KEY) == 1, 10, "the first line was not shipped")
        proc.terminate()
        proc.wait(timeout=10)
        for i in range(20_000):  # far more than the buffer: a blocking handler would never get through
            logger.info("during the outage %d", i)
        logger.debug("below the level, never captured")
        assert handler.dropped_total >= 20_000 - 1000 - 500  # the buffer (and a batch in flight) held the rest
        proc, url = start_embedded(tmp_path / "r2", port)  # Redis back, empty (no persistence kept)
        client = redis.Redis.from_url(url, decode_responses=True)
        wait_for(lambda: client.xlen(STREAM_KEY) > 0, 60, "the buffered lines did not go out after Redis came back")
        logger.info("after the outage")
        wait_for(lambda: any(f["msg"] == "after the outage" for _, f in client.xrange(STREAM_KEY)), 60,
                 "logging did not resume after Redis came back")
        entries = [f for _, f in client.xrange(STREAM_KEY)]
        report = [f for f in entries if f["logger"] == "picobot.logstream"]
        assert len(report) == 1 and "were not captured" in report[0]["msg"] and report[0]["level"] == "WARNING"
        assert not any("below the level" in f["msg"] for f in entries)
        assert any(f["msg"].startswith("during the outage") for f in entries)  # the buffered ones came through
    finally:
        handler.close()
        proc.terminate()
        proc.wait(timeout=10)


def test_the_stream_is_capped_and_long_messages_are_cut(redis_url: str) -> None:
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    logger, handler = _handler(redis_url, max_lines=100, max_message_chars=200)
    try:
        for i in range(3000):
            logger.info("line %d", i)
        logger.info("x" * 5000)
        wait_for(lambda: any(len(f["msg"]) == 200 for _, f in client.xrevrange(STREAM_KEY, count=1)), 20,
                 "the last line was not shipped")
        assert client.xlen(STREAM_KEY) < 500  # MAXLEN ~ 100 (Redis trims whole nodes, so a little more stays)
        [(_, last)] = client.xrevrange(STREAM_KEY, count=1)
        assert last["truncated"] == "1"
    finally:
        handler.close()


def test_records_of_the_shipper_thread_itself_are_not_captured(redis_url: str) -> None:
    """The Redis client logging from inside the shipper must not feed lines back into the stream."""
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    logger, handler = _handler(redis_url)
    noisy = logging.getLogger("redis")
    old = noisy.level
    noisy.setLevel(logging.DEBUG)
    noisy.addHandler(handler)  # the client library's records reach the capture handler, as on the root logger
    try:
        original = handler._ship

        def ship_and_log(batch: list[dict[str, str]]) -> bool:
            noisy.warning("redis client chatter from the shipper thread")
            return original(batch)

        handler._ship = ship_and_log  # type: ignore[method-assign]
        logger.info("one real line")
        wait_for(lambda: client.xlen(STREAM_KEY) >= 1, 10, "the line was not shipped")
        logger.info("a second real line")
        wait_for(lambda: client.xlen(STREAM_KEY) >= 2, 10, "the second line was not shipped")
        assert [f["msg"] for _, f in client.xrange(STREAM_KEY)] == ["one real line", "a second real line"]
    finally:
        noisy.removeHandler(handler)
        noisy.setLevel(old)
        handler.close()


def test_a_traceback_reaches_the_stream_redacted(redis_url: str) -> None:
    import redis

    from picobot.logs.setup import RedactingFilter

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    logger, handler = _handler(redis_url)
    handler.addFilter(RedactingFilter({"hunter2-the-secret"}))
    try:
        try:
            raise RuntimeError("login failed with hunter2-the-secret")
        except RuntimeError:
            logger.exception("could not reach %s", "https://user:pw-in-url@example.com/x")
        wait_for(lambda: client.xlen(STREAM_KEY) == 1, 10, "the line was not shipped")
        [(_, fields)] = client.xrange(STREAM_KEY)
        assert fields["level"] == "ERROR" and "Traceback" in fields["msg"] and "RuntimeError" in fields["msg"]
        assert "hunter2-the-secret" not in fields["msg"] and "pw-in-url" not in fields["msg"]
    finally:
        handler.close()


def test_celery_per_task_chatter_stays_out_of_the_stream(redis_url: str) -> None:
    """A sweep every few seconds logs "received"/"succeeded": those would push everything else out."""
    import redis

    client = redis.Redis.from_url(redis_url, decode_responses=True)
    _, handler = _handler(redis_url)
    chatty = [logging.getLogger(name) for name in ("celery.app.trace", "celery.worker.strategy", "celery.beat")]
    try:
        for lg in chatty:
            lg.addHandler(handler)
            lg.info("Task picobot.sweep[x] succeeded in 0.002s")
        chatty[0].error("Task picobot.turn[y] raised unexpected: RuntimeError()")
        wait_for(lambda: client.xlen(STREAM_KEY) >= 1, 10, "the error line was not shipped")
        assert [f["msg"] for _, f in client.xrange(STREAM_KEY)] == ["Task picobot.turn[y] raised unexpected: RuntimeError()"]
    finally:
        for lg in chatty:
            lg.removeHandler(handler)
        handler.close()
