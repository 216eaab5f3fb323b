"""Budgets, piece by piece: the reservation scripts against the real Redis, the ledger's sums in real
SQLite, the refusal text, and hostile `budgets` / `prices` config."""

from __future__ import annotations

import calendar
import math
import threading
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
import redis as redis_lib
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.budgets.counters import Counter, Counters, Over, Reservation
from picobot.budgets.plugin import refusal_text
from picobot.budgets.prices import PriceTable, request_tokens
from picobot.budgets import scopes
from picobot.config.budgets import Price
from picobot.config.loader import load_config
from picobot.domain.messages import ChatMessage
from picobot.errors import ConfigError
from picobot.storage import usage
from picobot.storage.db import Database
from tests.http_client import HTTP


@pytest.fixture
def r() -> Iterator[redis_lib.Redis]:
    client = redis_lib.Redis.from_url("redis://127.0.0.1:6379/0")
    yield client
    client.close()


@pytest.fixture
def prefix(r: redis_lib.Redis) -> Iterator[str]:
    """A key prefix of this test's own; its keys are deleted afterwards."""
    p = f"picobot:test-budget:{uuid.uuid4().hex[:10]}:"
    yield p
    for key in r.scan_iter(p + "*"):
        r.delete(key)


def _counter(prefix: str, name: str, tokens: int | None = None, cost: float | None = None,
             seeded: tuple[int, float] = (0, 0.0), calls: list[str] | None = None) -> Counter:
    def seed() -> tuple[int, float]:
        if calls is not None:
            calls.append(name)
        return seeded

    return Counter(f"budgets.{name}", prefix + name, tokens, cost, 600, seed)


def test_a_reservation_counts_until_the_next_call_would_cross(r, prefix) -> None:  # type: ignore[no-untyped-def]
    c = Counters(r)
    day = _counter(prefix, "user.daily", tokens=1000)
    first = c.reserve([day], 400, 0.0)
    assert isinstance(first, Reservation)
    assert isinstance(c.reserve([day], 400, 0.0), Reservation)  # 800 of 1000
    refused = c.reserve([day], 201, 0.0)
    assert isinstance(refused, Over) and refused.unit == "tokens" and refused.used == 800
    assert int(r.hget(day.key, "t")) == 800  # a refusal reserves nothing
    c.settle(first, 100, 0.0)  # the first call used 100 of its 400
    assert int(r.hget(day.key, "t")) == 500
    assert isinstance(c.reserve([day], 500, 0.0), Reservation)  # exactly the limit is allowed


def test_one_counter_over_reserves_on_none(r, prefix) -> None:  # type: ignore[no-untyped-def]
    c = Counters(r)
    roomy, tight = _counter(prefix, "session", tokens=10_000), _counter(prefix, "global.daily", cost=0.5)
    assert isinstance(c.reserve([roomy, tight], 10, 0.4), Reservation)
    over = c.reserve([roomy, tight], 10, 0.2)
    assert isinstance(over, Over) and over.counter is tight and over.unit == "cost_usd"
    assert math.isclose(over.used, 0.4)
    assert int(r.hget(roomy.key, "t")) == 10  # the roomy one did not take the refused call's estimate


def test_a_missing_counter_is_seeded_from_the_ledger_once(r, prefix) -> None:  # type: ignore[no-untyped-def]
    calls: list[str] = []
    c = Counters(r)
    day = _counter(prefix, "user.daily", tokens=1000, seeded=(900, 0.0), calls=calls)
    assert isinstance(c.reserve([day], 200, 0.0), Over)  # 900 already spent (SQL) + 200 > 1000
    assert calls == ["user.daily"]
    c.reserve([day], 50, 0.0)
    assert calls == ["user.daily"]  # present now: no second SQL sum
    r.delete(day.key)  # a FLUSHALL, an expiry
    assert isinstance(c.reserve([day], 200, 0.0), Over)
    assert calls == ["user.daily", "user.daily"]


def test_settle_skips_a_counter_re_seeded_since_the_reservation(r, prefix) -> None:  # type: ignore[no-untyped-def]
    c = Counters(r)
    day = _counter(prefix, "user.daily", tokens=1000, seeded=(300, 0.0))
    held = c.reserve([day], 200, 0.0)
    assert isinstance(held, Reservation)
    r.delete(day.key)
    c.reserve([day], 10, 0.0)  # re-seeded from the ledger: 300 + 10
    c.settle(held, 50, 0.0)  # would subtract 150 from a counter that never held the 200
    assert int(r.hget(day.key, "t")) == 310


def test_racing_threads_cannot_reserve_past_the_limit(r, prefix) -> None:  # type: ignore[no-untyped-def]
    day = _counter(prefix, "user.daily", tokens=1000)
    granted: list[Any] = []

    def worker() -> None:
        c = Counters(redis_lib.Redis.from_url("redis://127.0.0.1:6379/0"))  # a client each, as two workers
        for _ in range(20):
            granted.append(c.reserve([day], 30, 0.0))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sum(isinstance(g, Reservation) for g in granted) == 1000 // 30
    assert int(r.hget(day.key, "t")) == (1000 // 30) * 30


# --- the ledger and the scopes -------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> Iterator[Database]:
    database = Database(f"sqlite:///{tmp_path / 'picobot.db'}")
    database.migrate()
    yield database
    database.dispose()


def _call(**kw: Any) -> usage.Call:
    base = dict(kind="turn", session_id="web:c:default", turn_id="t1", run_id=None, job_id=None, channel="web",
                user="web:c", agent="default", provider="default", model="m", input_tokens=100, output_tokens=20,
                cached_input_tokens=0, cost_usd=0.5)
    return usage.Call(**{**base, **kw})


def test_ledger_totals_by_scope_and_period(db) -> None:  # type: ignore[no-untyped-def]
    day1 = calendar.timegm((2026, 3, 31, 12, 0, 0, 0, 0, 0))
    day2 = day1 + 86400  # April 1st: a new day and a new month
    with db.begin() as conn:
        usage.record(conn, _call(), now=day1)
        usage.record(conn, _call(kind="subagent", run_id="r1", cost_usd=0.25), now=day1)
        usage.record(conn, _call(session_id="web:c:d2", turn_id="t2", job_id="j1"), now=day2)
        usage.record(conn, _call(user="web:other", session_id="web:o:default"), now=day2)
    with db.connect() as conn:
        assert usage.totals(conn, "session", "web:c:default") == (240, 0.75)  # the sub-agent counts
        assert usage.totals(conn, "user", "web:c", "2026-03-31", "2026-03-31") == (240, 0.75)
        assert usage.totals(conn, "user", "web:c", "2026-04-01", "2026-04-30") == (120, 0.5)
        assert usage.totals(conn, "user", "web:c", "2026-03-01", "2026-03-31") == (240, 0.75)
        assert usage.totals(conn, "run", "j1", turn_id="t2") == (120, 0.5)
        assert usage.totals(conn, "job", "j1", "2026-04-01", "2026-04-01") == (120, 0.5)
        assert usage.totals(conn, "global", "", "2026-04-01", "2026-04-01") == (240, 1.0)


def test_scopes_of_a_job_turn_and_their_reset_times() -> None:
    from picobot.config.budgets import BudgetsConfig
    from picobot.plugins.types import StageContext

    budgets = BudgetsConfig.model_validate({"session": {"tokens": 10}, "user": {"monthly_cost_usd": 1},
                                            "job": {"run_tokens": 5, "daily_tokens": 7}})
    ctx = StageContext("web:c:default", "web", "c", "alice", "turn1", input_ids=("job:nightly:1764720000.0",))
    w = scopes.who(ctx)
    assert (w.user, w.job_id) == ("web:alice", "nightly")
    now = calendar.timegm((2026, 12, 31, 23, 0, 0, 0, 0, 0))
    found = scopes.counters(budgets, None, w, now)
    assert [c.name for c in found] == ["budgets.session", "budgets.user.monthly", "budgets.job.run",
                                       "budgets.job.daily"]
    assert "2027-01-01 00:00 UTC" in scopes.resets(found[1], now)
    assert "next run" in scopes.resets(found[2], now)
    assert "/new" in scopes.resets(found[0], now)
    text = refusal_text(Over(found[3], "tokens", 6), 3, 0.0, now)
    assert "budgets.job.daily_tokens" in text and "6 of 7 tokens" in text and "2027-01-01 00:00 UTC" in text


def test_prices_and_the_request_estimate() -> None:
    table = PriceTable({"mine:gpt-4o": Price(input=1.0, output=2.0)})
    assert table.cost("mine", "gpt-4o", 1_000_000, 500_000) == pytest.approx(2.0)
    assert table.cost("other", "gpt-4o", 1_000_000, 0, cached=1_000_000) == pytest.approx(1.25)  # the default
    assert table.cost("x", "unknown-model", 10**6, 10**6) == 0.0
    msgs = [ChatMessage(role="user", content="a" * 400), ChatMessage(role="user", content=[{"type": "text",
                                                                                            "text": "b" * 400}])]
    assert request_tokens(msgs, 400) == 301


# --- hostile config ------------------------------------------------------------------------------


def _load(tmp_path: Path, data: dict[str, Any]) -> Any:
    import json

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps(data, allow_nan=True))
    return load_config(home=home, environ={}, cwd=tmp_path)


@pytest.mark.parametrize("data, path", [
    ({"budgets": {"session": {"tokens": -1}}}, "budgets.session.tokens"),
    ({"budgets": {"user": {"daily_cost_usd": float("nan")}}}, "budgets.user.daily_cost_usd"),
    ({"budgets": {"user": {"monthly_cost_usd": float("inf")}}}, "budgets.user.monthly_cost_usd"),
    ({"budgets": {"user": {"daily_tokens": "1000"}}}, "budgets.user.daily_tokens"),
    ({"budgets": {"global": {"daily_tokens": True}}}, "budgets.global.daily_tokens"),
    ({"budgets": {"job": {"run_tokens": 10**20}}}, "budgets.job.run_tokens"),
    ({"budgets": {"job": {"daily_cost_usd": 1e300}}}, "budgets.job.daily_cost_usd"),
    ({"budgets": {"job": {"run_tokens": 1.5}}}, "budgets.job.run_tokens"),
    ({"budgets": {"output_estimate_tokens": 0}}, "budgets.output_estimate_tokens"),
    ({"budgets": {"sesion": {}}}, "budgets.sesion"),
    ({"budgets": []}, "budgets"),
    ({"prices": {"gpt-4o": {"input": 1, "output": 1}}}, "prices"),
    ({"prices": {"a:b": {"input": -1, "output": 1}}}, "prices.a:b.input"),
    ({"prices": {"a:b": {"input": 1, "output": float("nan")}}}, "prices.a:b.output"),
    ({"prices": {"a:b": {"input": 1}}}, "prices.a:b.output"),
    ({"prices": {"a:b": "cheap"}}, "prices.a:b"),
    ({"prices": ["a:b"]}, "prices"),
    ({"prices": {"a:b": {"input": 1, "output": 1, "currency": "EUR"}}}, "prices.a:b.currency"),
])
def test_bad_budgets_and_prices_fail_with_their_key_path(tmp_path: Path, data: dict[str, Any], path: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, data)
    assert err.value.key_path == path


@settings(max_examples=60, deadline=None)
@given(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(), st.text(), st.booleans(),
                 st.none(), st.lists(st.integers(), max_size=2)))
def test_any_limit_value_is_a_valid_limit_or_an_error_at_its_path(tmp_path_factory, value: Any) -> None:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("cfg")
    try:
        cfg = _load(tmp, {"budgets": {"user": {"daily_cost_usd": value}}})
    except ConfigError as exc:
        assert exc.key_path == "budgets.user.daily_cost_usd"
        return
    got = cfg.budgets.user.daily_cost_usd
    assert got is None or (math.isfinite(got) and 0 <= got <= 1e9 and not isinstance(value, (bool, str)))


def test_price_keys_with_a_lone_surrogate_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, {"prices": {"\ud800:model": {"input": 1, "output": 1}}})
    assert err.value.key_path == "prices"


# --- a compaction's summary call, in process (real SQL, Redis and the fake LLM) ------------------


class _Queue:
    def enqueue_turn(self, session_id: str) -> None:
        pass

    def enqueue_compaction(self, session_id: str, force: bool = False) -> None:
        pass


def _runtime(tmp_path: Path, llm, redis_url: str, monkeypatch: pytest.MonkeyPatch, budgets: dict) -> Any:  # type: ignore[no-untyped-def]
    import json

    from picobot.app import build_runtime
    from tests.stack import base_config

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    cfg = base_config(llm.url, 1)
    cfg["budgets"] = budgets
    (home / "config.json").write_text(json.dumps(cfg))
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("PICOBOT_TEST_KEY", "sk-test-budgets")
    monkeypatch.setenv("REDIS_URL", redis_url)
    return build_runtime(load_config(), _Queue(), migrate=True)


def _dialog(rt: Any, llm, tag: str) -> str:  # type: ignore[no-untyped-def]
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.runtime.turn_runner import drain_session
    from tests.conftest import add_rule

    add_rule(llm, f"turn-{tag}", {"content": "noted", "usage": {"input_tokens": 100, "output_tokens": 10}},
             repeat=True)
    sid = ""
    for i in range(5):
        reply = Gateway(rt).submit(InboundMessage("telegram", f"c-{tag}", f"u-{tag}", f"turn-{tag} {i}"))
        sid = reply.session_id
        assert drain_session(rt, sid) == 1
    return sid


@pytest.mark.parametrize("refused", [False, True])
def test_a_compaction_summary_is_metered_and_a_budget_can_refuse_it(tmp_path, llm, redis_url, monkeypatch,  # type: ignore[no-untyped-def]
                                                                    refused: bool) -> None:
    from picobot.memory.compactor import compact_session
    from tests.conftest import add_rule

    tag = uuid.uuid4().hex[:6]
    seeding = _runtime(tmp_path, llm, redis_url, monkeypatch, {})
    try:
        sid = _dialog(seeding, llm, tag)  # 5 turns of 110 tokens each, no limits
    finally:
        seeding.close()
    # then a limit the user's 550 tokens leave no room in (refused), or plenty of room
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, {"user": {"daily_tokens": 560 if refused else 100_000}})
    try:
        HTTP.delete(llm.url + "/_fake/rules")
        add_rule(llm, "Conversation to summarise", {"content": f"summary {tag}",
                                                     "usage": {"input_tokens": 300, "output_tokens": 40}})
        before = _summary_requests(llm)
        outcome = compact_session(rt, sid, force=True)
        assert outcome.status == "compacted" and outcome.fallback is refused
        with rt.db.connect() as conn:
            rows = conn.exec_driver_sql("SELECT kind, session_id, user, input_tokens, output_tokens "
                                        "FROM usage_records ORDER BY id").all()
        assert [r[0] for r in rows] == ["turn"] * 5 + ([] if refused else ["compaction"])
        if not refused:
            assert tuple(rows[-1][1:]) == (sid, f"telegram:u-{tag}", 300, 40)
        assert _summary_requests(llm) == before + (0 if refused else 1)  # a refused call was never made
    finally:
        rt.close()


def _summary_requests(llm) -> int:  # type: ignore[no-untyped-def]
    import json

    return sum("Conversation to summarise" in json.dumps(r) for r in llm.requests())


# --- the gate hook itself, for any plugin -------------------------------------------------------


class _Refuser:
    def __init__(self, status: str) -> None:
        self.status = status
        self.seen: list[Any] = []

    from picobot.plugins import hookimpl

    @hookimpl
    def picobot_model_call_gate(self, ctx: Any, request: Any) -> Any:
        from picobot.plugins import Refusal

        self.seen.append(request)
        return Refusal(self.status, f"refused by a test plugin ({self.status})")


@pytest.mark.parametrize("status, stored", [("budget_exceeded", "budget_exceeded"), ("nope", "failed"),
                                            ("running", "failed")])
def test_a_gate_refusal_ends_the_turn_with_its_status_and_sends_nothing(tmp_path, llm, redis_url, monkeypatch,  # type: ignore[no-untyped-def]
                                                                        status: str, stored: str) -> None:
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.runtime.turn_runner import drain_session

    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, {})
    refuser = _Refuser(status)
    rt.plugins.register("refuser", refuser, source="file")
    tag = uuid.uuid4().hex[:6]
    try:
        reply = Gateway(rt).submit(InboundMessage("telegram", f"g-{tag}", "bob", f"gate-{tag}"))
        assert drain_session(rt, reply.session_id) == 1
        with rt.db.connect() as conn:
            [(turn_status, error)] = conn.exec_driver_sql("SELECT status, error FROM turns WHERE session_id = ?",
                                                          (reply.session_id,)).all()
            rows = conn.exec_driver_sql("SELECT COUNT(*) FROM usage_records WHERE session_id = ?",
                                        (reply.session_id,)).scalar()
        assert (turn_status, error) == (stored, f"refused by a test plugin ({status})")
        assert rows == 0  # no call, no ledger row
        assert not any(f"gate-{tag}" in json_text(r) for r in llm.requests())
        [request] = refuser.seen
        assert request.model == "fake-model" and request.kind == "turn" and request.tools_chars > 0
    finally:
        rt.close()


def json_text(value: Any) -> str:
    import json

    return json.dumps(value)


@pytest.mark.parametrize("refused", [False, True])
def test_memory_maintenance_calls_are_charged_to_the_scope_s_user(tmp_path, llm, redis_url, monkeypatch,  # type: ignore[no-untyped-def]
                                                                  refused: bool) -> None:
    from picobot.memory import MemorySource
    from picobot.memory.maintenance import run_maintenance
    from picobot.memory.maintenance_plan import PROMPT_TITLE
    from tests.conftest import add_rule

    tag = uuid.uuid4().hex[:6]
    scope = f"telegram:m{tag}"
    rt = _runtime(tmp_path, llm, redis_url, monkeypatch, {"user": {"daily_tokens": 10 if refused else 100_000}})
    try:
        assert rt.memory is not None
        for key in ("a", "b"):
            rt.memory.put(scope, "facts", key, f"fact {key} {tag}", source=MemorySource(
                session_id="telegram:c:d", channel="telegram", source_type="tool"))
        plan = {"categories": {"facts": [], "preferences": [], "patterns": [], "other": []}, "merges": [],
                "low_value": [], "conflicts": [], "managed_markdown": "- facts"}
        add_rule(llm, PROMPT_TITLE, {"content": json_text(plan), "usage": {"input_tokens": 70, "output_tokens": 7}})
        before = sum(tag in json_text(r) for r in llm.requests())
        [result] = [s for s in run_maintenance(rt).scopes if s.scope_key == scope]
        assert result.status == ("failed" if refused else "maintained"), result
        with rt.db.connect() as conn:
            rows = conn.exec_driver_sql("SELECT kind, user, session_id, input_tokens FROM usage_records").all()
        assert rows == ([] if refused else [("maintenance", scope, None, 70)])
        assert sum(tag in json_text(r) for r in llm.requests()) == before + (0 if refused else 1)
    finally:
        rt.close()
