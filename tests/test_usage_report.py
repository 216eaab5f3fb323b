"""Usage reports on SQLite and PostgreSQL: grouped totals, the per-day series, a dialog's and a user's
totals, and the shared parsers of since/until/by/limit/filters under hostile input."""

from __future__ import annotations

import time
from datetime import date
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sqlalchemy import insert

from picobot.errors import InputRejected
from picobot.storage import usage_report as ur
from picobot.storage.db import Database
from picobot.storage.models import UsageRow

TODAY = "2026-03-15"


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    d = Database(db_url)
    d.migrate()
    yield d
    d.dispose()


def row(day: str, user: str = "web:alice", agent: str = "default", provider: str = "openai", model: str = "gpt-x",
        kind: str = "turn", session_id: str | None = "web:alice:default", job_id: str | None = None,
        tokens: tuple[int, int, int] = (100, 10, 0), cost: float = 0.01) -> dict[str, Any]:
    return {"created_at": time.time(), "day": day, "kind": kind, "session_id": session_id, "turn_id": "t1",
            "run_id": None, "job_id": job_id, "channel": user.split(":", 1)[0], "user": user, "agent": agent,
            "provider": provider, "model": model, "input_tokens": tokens[0], "output_tokens": tokens[1],
            "cached_input_tokens": tokens[2], "cost_usd": cost}


def seed(db: Database, rows: list[dict[str, Any]]) -> None:
    with db.begin() as conn:
        conn.execute(insert(UsageRow), rows)


LEDGER = [
    row("2026-03-15", tokens=(1000, 200, 300), cost=0.5),
    row("2026-03-15", kind="subagent", model="gpt-mini", tokens=(50, 5, 0), cost=0.001),
    row("2026-03-14", user="telegram:42", agent="helper", provider="anthropic", model="claude-y",
        session_id="telegram:42:default", tokens=(400, 40, 0), cost=0.2),
    row("2026-03-10", user="cli_chat:ops", kind="turn", session_id="cli_chat:ops:d_1", job_id="daily.digest",
        tokens=(10, 1, 0), cost=0.003),
    row("2026-03-01", tokens=(7, 7, 7), cost=0.07),
    row("2026-02-28", tokens=(999, 999, 0), cost=9.0),  # last month: outside "this month" and the 7-day range
]


def test_grouped_totals_by_every_dimension(db: Database) -> None:
    seed(db, LEDGER)
    week = ur.parse_range("7d", None, TODAY)
    assert (week.since, week.until) == ("2026-03-09", "2026-03-15")
    with db.connect() as conn:
        users, more = ur.grouped(conn, ["user"], week)
        assert not more
        assert [(g["key"]["user"], g["calls"], g["input_tokens"], g["output_tokens"], g["cached_input_tokens"])
                for g in users] == [("web:alice", 2, 1050, 205, 300), ("telegram:42", 1, 400, 40, 0),
                                    ("cli_chat:ops", 1, 10, 1, 0)]  # most expensive first
        assert users[0]["cost_usd"] == pytest.approx(0.501) and users[0]["tokens"] == 1255
        models, _ = ur.grouped(conn, ["model"], week)
        assert {g["key"]["model"] for g in models} == {"openai:gpt-x", "openai:gpt-mini", "anthropic:claude-y"}
        jobs, _ = ur.grouped(conn, ["job"], week)
        assert {g["key"]["job"]: g["calls"] for g in jobs} == {None: 3, "daily.digest": 1}
        kinds, _ = ur.grouped(conn, ["kind"], week)
        assert {g["key"]["kind"]: g["calls"] for g in kinds} == {"turn": 3, "subagent": 1}
        days, _ = ur.grouped(conn, ["day"], week)
        assert [g["key"]["day"] for g in days] == ["2026-03-10", "2026-03-14", "2026-03-15"]  # by day: in order
        both, _ = ur.grouped(conn, ["agent", "user"], week)
        assert [g["key"] for g in both][:1] == [{"agent": "default", "user": "web:alice"}]
        sessions, _ = ur.grouped(conn, ["session"], week, ur.Filters(user="web:alice"))
        assert [(g["key"]["session"], g["calls"]) for g in sessions] == [("web:alice:default", 2)]
        helper, _ = ur.grouped(conn, ["model"], week, ur.Filters(agent="helper"))
        assert [g["key"]["model"] for g in helper] == ["anthropic:claude-y"]
        first, more = ur.grouped(conn, ["user"], week, limit=2)
        assert more and [g["key"]["user"] for g in first] == ["web:alice", "telegram:42"]
        assert ur.total(conn, week).to_dict() == {"calls": 4, "input_tokens": 1460, "output_tokens": 246,
                                                  "cached_input_tokens": 300, "cost_usd": 0.704, "tokens": 1706}
        month = ur.parse_range("2026-02-01", "2026-02-28", TODAY)
        assert ur.total(conn, month).cost_usd == 9.0 and ur.grouped(conn, ["user"], month)[0][0]["calls"] == 1


def test_the_daily_series_has_every_day_of_the_range(db: Database) -> None:
    seed(db, LEDGER)
    with db.connect() as conn:
        series = ur.daily(conn, ur.parse_range("7d", None, TODAY))
        empty = ur.daily(conn, ur.parse_range("2020-01-01", "2020-01-03", TODAY))
    assert [d["day"] for d in series] == [f"2026-03-{n:02d}" for n in range(9, 16)]
    assert [d["calls"] for d in series] == [0, 1, 0, 0, 0, 1, 2]
    assert series[-1]["tokens"] == 1255 and series[0]["cost_usd"] == 0.0
    assert [d["tokens"] for d in empty] == [0, 0, 0]


def test_a_dialogs_and_a_users_totals(db: Database) -> None:
    seed(db, LEDGER)
    with db.connect() as conn:
        dialog = ur.for_session(conn, "web:alice:default")
        assert (dialog.calls, dialog.input_tokens) == (4, 999 + 1000 + 50 + 7)  # the sub-agent's call counts
        assert ur.for_session(conn, "nobody:here").to_dict()["calls"] == 0
        alice = ur.for_user(conn, "web:alice", TODAY)
        assert alice["today"] == {"day": TODAY, "calls": 2, "input_tokens": 1050, "output_tokens": 205,
                                  "cached_input_tokens": 300, "cost_usd": 0.501, "tokens": 1255}
        assert alice["month"]["month"] == "2026-03" and alice["month"]["calls"] == 3  # not February's
        assert alice["month"]["cost_usd"] == pytest.approx(0.571)
        ops = ur.for_user(conn, "cli_chat:ops", TODAY)
        assert ops["today"]["calls"] == 0 and ops["month"]["calls"] == 1
        assert ur.for_user(conn, "web:nobody", TODAY)["month"]["tokens"] == 0


def test_stored_text_of_any_kind_comes_back_as_it_went_in(db: Database) -> None:
    odd = "web:<b>ali'ce\"</b>; DROP TABLE usage_records;--  用户 🎉"
    seed(db, [row(TODAY, user=odd, agent="a%_", model="m:with:colons", job_id="j\\1")])
    r = ur.parse_range("today", "today", TODAY)
    with db.connect() as conn:
        [g], _ = ur.grouped(conn, ["user", "agent", "model", "job"], r, ur.Filters(user=odd, agent="a%_"))
        assert ur.grouped(conn, ["user"], r, ur.Filters(agent="a%"))[0] == []  # exact match, not LIKE
        report = ur.report(conn, ["user"], r, series=True)
    assert g["key"] == {"user": odd, "agent": "a%_", "model": "openai:m:with:colons", "job": "j\\1"}
    assert report["days"] == [{"day": TODAY, **{k: v for k, v in report["total"].items()}}]


# --- the parsers: every input either parses to a valid range or is refused with a clear error ----------


def test_ranges_and_their_errors() -> None:
    assert ur.parse_range(None, None, TODAY) == ur.DayRange("2026-02-14", TODAY)  # 30 days by default
    assert ur.parse_range("1d", "today", TODAY) == ur.DayRange(TODAY, TODAY)
    assert ur.parse_range("2026-01-01", "2026-01-31", TODAY).days()[-1] == "2026-01-31"
    for since, until, words in [("2026-02-30", None, "since must be a date"), ("yesterday", None, "since must be"),
                                ("0d", None, "1 to 3660"), ("99999d", None, "1 to 3660"), ("-7d", None, "since"),
                                ("2026-03-16", "2026-03-15", "is after until"), ("7d", "nope", "until must be"),
                                ("0001-01-01", None, "spans more than 3660 days"), ("２０２６-01-01", None, "since"),
                                ("2026-01-01\x00", None, "since"), ("\ud800", None, "since")]:
        with pytest.raises(InputRejected) as err:
            ur.parse_range(since, until, TODAY)
        assert words in str(err.value), (since, until, str(err.value))
    assert ur.parse_by("user, agent,user") == ["user", "agent"]
    assert ur.parse_by(["model", "day,kind"]) == ["model", "day", "kind"]
    with pytest.raises(InputRejected, match="'cost' is not one of user, agent"):
        ur.parse_by("user,cost")
    with pytest.raises(InputRejected, match="limit must be a whole number from 1 to 10000"):
        ur.parse_limit("0")
    with pytest.raises(InputRejected, match="user must be"):
        ur.parse_filter("user", "web:\ud800")


@settings(max_examples=300, deadline=None)
@given(since=st.one_of(st.none(), st.text(max_size=14), st.from_regex(r"[0-9]{1,6}d", fullmatch=True),
                       st.dates().map(date.isoformat)),
       until=st.one_of(st.none(), st.text(max_size=14), st.dates().map(date.isoformat)))
def test_any_since_until_parses_to_a_sane_range_or_is_refused(since: str | None, until: str | None) -> None:
    try:
        r = ur.parse_range(since, until, TODAY)
    except InputRejected as exc:
        assert exc.code == "bad_request" and ("since" in str(exc) or "until" in str(exc))
        return
    days = (date.fromisoformat(r.until) - date.fromisoformat(r.since)).days
    assert 0 <= days < ur.MAX_DAYS and len(r.days()) == days + 1
    if not until:
        assert r.until == TODAY


@settings(max_examples=300, deadline=None)
@given(by=st.lists(st.one_of(st.text(max_size=12), st.sampled_from(list(ur.DIMENSIONS))), max_size=4),
       limit=st.one_of(st.none(), st.text(max_size=8), st.integers(-10, 20000).map(str)))
def test_any_by_and_limit_parse_or_are_refused(by: list[str], limit: str | None) -> None:
    try:
        names = ur.parse_by(by)
        assert set(names) <= set(ur.DIMENSIONS) and len(names) == len(set(names))
    except InputRejected as exc:
        assert str(exc).startswith("by: ")
    try:
        assert 1 <= ur.parse_limit(limit) <= ur.MAX_LIMIT
    except InputRejected as exc:
        assert str(exc).startswith("limit must be")

