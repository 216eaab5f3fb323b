"""GET /metrics through a real stack: the gateway's own samples, the worker's (through Redis),
scrape-time gauges, and who may scrape."""

from __future__ import annotations

from types import SimpleNamespace

import ipaddress
import json
import time
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import add_rule
from tests.stack import Stack, wait_for
from tests.http_client import HTTP

PROBE = "metrics-probe please"


@pytest.fixture(scope="module")
def mstack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    # one trusted proxy: X-Forwarded-For is believed, so a test can pose as an outside client
    s = Stack(tmp_path_factory.mktemp("metrics"), fake_llm.url, gateway={"trusted_proxies": 1})
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def scrape(stack: Stack, **headers: str) -> httpx.Response:
    return HTTP.get(stack.http + "/metrics", headers=headers, timeout=10)


def samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    return [(s.name, s.labels, s.value) for f in text_string_to_metric_families(text) for s in f.samples]


def total(found: list[tuple[str, dict[str, str], float]], name: str, **labels: str) -> float:
    return sum(v for n, l, v in found if n == name and all(l.get(k) == want for k, want in labels.items()))


def test_a_tool_using_turn_moves_the_worker_counters(mstack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    before = samples(scrape(mstack).text)
    add_rule(llm, "metrics-probe",
             {"tool_calls": [{"name": "calculator", "arguments": {"expression": "2+3"}}],
              "usage": {"input_tokens": 100, "output_tokens": 7, "cached_input_tokens": 40}},
             {"content": "five", "usage": {"input_tokens": 120, "output_tokens": 3}})
    client = mstack.client()
    try:
        done = client.ask(PROBE)
        assert done["status"] == "completed" and done["final_text"] == "five"

        def moved() -> list | None:
            now = samples(scrape(mstack).text)
            turns = total(now, "picobot_turns_total", channel="cli_chat", status="completed")
            return now if turns > total(before, "picobot_turns_total", channel="cli_chat", status="completed") else None

        after = wait_for(moved, 30, "the worker's turn count never reached /metrics")
        delta = lambda name, **labels: total(after, name, **labels) - total(before, name, **labels)  # noqa: E731
        assert delta("picobot_turns_total", channel="cli_chat", status="completed") == 1
        assert delta("picobot_model_calls_total", provider="default", model="fake-model", outcome="ok") == 2
        assert delta("picobot_model_tokens_total", model="fake-model", kind="input") == 220
        assert delta("picobot_model_tokens_total", model="fake-model", kind="output") == 10
        assert delta("picobot_model_tokens_total", model="fake-model", kind="cached") == 40
        assert delta("picobot_tool_calls_total", tool="calculator", outcome="ok") == 1
        assert delta("picobot_turn_duration_seconds_count", channel="cli_chat") == 1
        assert delta("picobot_first_token_seconds_count", channel="cli_chat") == 1
        assert delta("picobot_inputs_total", channel="cli_chat", fate="started") == 1
        worker_turns = [l for n, l, v in after if n == "picobot_turns_total" and v]
        assert all(l["process"].startswith("w1@") and l["host"] for l in worker_turns)
        inputs = [l for n, l, v in after if n == "picobot_inputs_total" and v]
        assert inputs and all(l["process"].startswith("web:") for l in inputs)
        assert total(after, "picobot_websockets_open") >= 1  # this client's socket
    finally:
        client.close()


def test_scrape_time_gauges_and_process_memory(mstack: Stack) -> None:
    found = samples(scrape(mstack).text)
    depths = {l["queue"]: v for n, l, v in found if n == "picobot_queue_depth"}
    assert set(depths) == {"turns", "maintenance", "subagents", "scheduled", "outbound"}
    rss = {l["process"]: v for n, l, v in found if n == "picobot_process_resident_memory_bytes"}
    assert any(p.startswith("web:") for p in rss) and any(p.startswith("w1@") for p in rss)
    assert all(v > 1_000_000 for v in rss.values())
    assert {n for n, _, _ in found} >= {"picobot_metrics_processes", "picobot_scrape_errors"}
    assert total(found, "picobot_metrics_processes") >= 1
    assert total(found, "picobot_scrape_errors") == 0


def test_queue_depth_reads_what_celery_stored(redis_url: str) -> None:
    """Tasks sent by the real Celery app to a broker no worker reads, priorities included."""
    import redis

    from picobot.config.schema import Config
    from picobot.observability.scrape import queue_depths
    from worker.celery_app import make_celery

    app = make_celery(Config(redis_url=redis_url))
    app.send_task("picobot.turn", args=["s1"], queue="turns")
    app.send_task("picobot.turn", args=["s2"], queue="turns", priority=6)
    app.send_task("picobot.deliver", args=["feishu", "c"], queue="outbound", priority=9)
    r = redis.Redis.from_url(redis_url, decode_responses=True)
    ports = SimpleNamespace(config=app.picobot_config, redis=r)
    depths = {s.labels["queue"]: s.value for s in queue_depths(ports).samples}
    assert depths == {"turns": 2, "maintenance": 0, "subagents": 0, "scheduled": 0, "outbound": 1}


def test_who_may_scrape(mstack: Stack) -> None:
    assert scrape(mstack).status_code == 200  # loopback, no token
    outside = scrape(mstack, **{"X-Forwarded-For": "203.0.113.7"})
    assert outside.status_code == 401 and outside.json()["error"] == "not_paired"
    assert "picobot_" not in outside.text
    assert scrape(mstack, **{"X-Forwarded-For": "203.0.113.7", "Authorization": "Bearer nope"}).status_code == 401
    paired = scrape(mstack, **{"X-Forwarded-For": "203.0.113.7", "Authorization": f"Bearer {mstack.token}"})
    assert paired.status_code == 200 and "picobot_queue_depth" in paired.text
    # the proxy on this machine reports a loopback client: that one is local
    assert scrape(mstack, **{"X-Forwarded-For": "127.0.0.1"}).status_code == 200


def test_garbage_in_redis_never_breaks_a_scrape(mstack: Stack) -> None:
    r = mstack.redis()
    r.zadd("picobot:metrics:index", {"evil": time.time(), "evil2": time.time(), "evil3": time.time()})
    r.set("picobot:metrics:evil", "{not json")
    r.set("picobot:metrics:evil2", json.dumps({"process": "evil2", "at": 1, "families": [
        {"name": "picobot_turns", "type": "counter", "help": "x",
         "samples": [["picobot_turns_total", {"a": 1}, "NaN-text"], [1, 2], "x"]},
        {"name": 5, "type": "counter", "samples": []}]}))
    r.set("picobot:metrics:evil3", json.dumps({"process": "evil3", "at": 1, "families": [
        {"name": "picobot_turns", "type": "gauge", "help": "another type", "samples": [["picobot_turns", {}, 1]]}]}))
    try:
        resp = scrape(mstack)
        assert resp.status_code == 200
        found = samples(resp.text)  # still parses
        assert not [l for n, l, v in found if l.get("process", "").startswith("evil")]
    finally:
        r.delete("picobot:metrics:evil", "picobot:metrics:evil2", "picobot:metrics:evil3")
        r.zrem("picobot:metrics:index", "evil", "evil2", "evil3")


def test_worker_samples_come_back_after_a_redis_flush(mstack: Stack) -> None:
    def worker_rss() -> bool:
        return any(n == "picobot_process_resident_memory_bytes" and l["process"].startswith("w1@")
                   for n, l, v in samples(scrape(mstack).text))

    wait_for(worker_rss, 20, "no worker samples before the flush")
    mstack.redis().flushall()  # the samples go with it (a publish may land right after: no check of that)
    wait_for(worker_rss, 20, "the worker's samples did not come back after a flush")


# --- the loopback decision, with hostile input ---------------------------------------------------

from web.auth import local_client  # noqa: E402


@pytest.mark.parametrize("addr", ["127.0.0.1", "127.8.9.1", "::1", "::ffff:127.0.0.1"])
def test_loopback_is_local_unless_forwarded_untrusted(addr: str) -> None:
    assert local_client(addr, forwarded=False, trusted_proxies=0)
    assert not local_client(addr, forwarded=True, trusted_proxies=0)  # a proxy on this machine
    assert local_client(addr, forwarded=True, trusted_proxies=1)  # the proxies say: this machine


@pytest.mark.parametrize("addr", ["10.0.0.1", "192.168.1.2", "203.0.113.7", "::ffff:10.1.1.1", "fe80::1", "",
                                  None, "localhost", "127.0.0.1, 10.0.0.1", "0.0.0.0"])
def test_anything_else_is_not_local(addr: Any) -> None:
    assert not local_client(addr, forwarded=False, trusted_proxies=1)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=60), st.none(), st.ip_addresses().map(str)), st.booleans(), st.integers(0, 8))
def test_local_client_never_raises_and_only_loopback_passes(addr: Any, forwarded: bool, trusted: int) -> None:
    verdict = local_client(addr, forwarded, trusted)
    if verdict:
        ip = ipaddress.ip_address(addr.strip())
        assert (getattr(ip, "ipv4_mapped", None) or ip).is_loopback
        assert not forwarded or trusted > 0


@pytest.mark.parametrize("enabled", [False, True])
def test_metrics_enabled_switches_the_route(tmp_path, redis_url: str, enabled: bool) -> None:  # type: ignore[no-untyped-def]
    """The real app factory, in process: `metrics.enabled: false` is a 404 and records nothing."""
    from picobot.config.loader import load_config
    from web.app import create_app

    (tmp_path / "config.json").write_text(json.dumps({"metrics": {"enabled": enabled}}))
    config = load_config(home=tmp_path, environ={"REDIS_URL": redis_url}, cwd=tmp_path, path=tmp_path / "config.json")
    app = create_app(config)
    rt = app.extensions["picobot"]
    try:
        resp = app.test_client().get("/metrics")  # the test client's address is 127.0.0.1
        assert resp.status_code == (200 if enabled else 404)
        # no metrics plugin, so none of its hooks (the budgets plugin still hears model calls: the usage ledger)
        assert any(st["name"] == "metrics" for st in rt.plugins.statuses()) is enabled
        assert rt.plugins.has("picobot_turn_started") is enabled
        if enabled:
            names = {f.name for f in text_string_to_metric_families(resp.get_data(as_text=True))}
            assert {"picobot_queue_depth", "picobot_process_resident_memory_bytes"} <= names
            assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
            assert app.test_client().post("/metrics").status_code == 401  # the local exception is GET/HEAD only
    finally:
        app.extensions["picobot.hub"].close()
        rt.close()
