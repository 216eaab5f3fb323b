"""The operator pages' API: deliveries filtered and paged, sub-agent runs as trees and one run in full.

Through the real Flask app (create_app, as `picobot web` builds it: the Celery task queue on a private
Redis) on a real SQLite database; rows are written with the storage modules the workers use.
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from urllib.parse import quote
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from picobot.config import Config
from picobot.domain.messages import Usage
from picobot.storage import agent_runs, outbox, sessions
from picobot.storage.agent_runs import NewRun
from picobot.storage.models import RUN_CANCELLED
from tests.stack import issue_token

SECRET = "op-secret-" + "Q7x" * 8  # the provider's api_key: must never leave through the API
KEY_SHAPED = "sk-" + "abcdefghij" * 3


@pytest.fixture
def web(tmp_path: Path, redis_url: str) -> Iterator[tuple[Any, Any, dict[str, str]]]:
    from web.app import create_app

    config = Config.model_validate({
        "home": str(tmp_path / "home"), "redis_url": redis_url,
        "providers": {"default": {"type": "openai", "base_url": "http://127.0.0.1:9/v1", "api_key": SECRET}},
        "models": {"default": {"model_id": "m"}}, "agents": {"default": {"provider": "default", "model": "default"}}})
    app = create_app(config=config)
    rt = app.extensions["picobot"]
    token = issue_token(rt.config.database_url, "operator pages test")
    yield app.test_client(), rt, {"Authorization": f"Bearer {token}"}
    rt.close()


# --- deliveries ------------------------------------------------------------------------------


def _delivery(rt: Any, channel: str, chat_id: str, text: str, end: str | None = None, error: str = "") -> int:
    key = uuid.uuid4().hex
    with rt.db.begin() as conn:
        outbox.add(conn, channel, chat_id, {"text": text}, key, kind="reply")
    with rt.db.begin() as conn:
        [row] = [r for r in outbox.latest(conn, None, 5) if r.idempotency_key == key]
        if end == "failed":
            assert outbox.mark_failed(conn, row.id, error or "the platform said no", "400")
        elif end == "sent":
            assert outbox.mark_sent(conn, row.id, {"message_ids": ["m1"]})
        elif end == "deferred":
            assert outbox.mark_deferred(conn, row.id, "outside the 24 h window", "window")
    return row.id


def _ids(client: Any, auth: dict[str, str], **params: Any) -> list[int]:
    r = client.get("/api/deliveries", headers=auth, query_string=params)
    assert r.status_code == 200, r.get_json()
    return [d["id"] for d in r.get_json()["deliveries"]]


def test_deliveries_filter_by_status_channel_and_chat(web: Any) -> None:
    client, rt, auth = web
    a1 = _delivery(rt, "alpha", "c1", "one", "failed")
    a2 = _delivery(rt, "alpha", "c2", "two", "sent")
    b1 = _delivery(rt, "beta", "c1", "three", "deferred")
    b2 = _delivery(rt, "beta", "c1", "four")
    assert _ids(client, auth) == [b2, b1, a2, a1]  # newest first
    assert _ids(client, auth, status="failed") == [a1]
    assert _ids(client, auth, status="deferred") == [b1]
    assert _ids(client, auth, status="pending") == [b2]
    assert _ids(client, auth, channel="alpha") == [a2, a1]
    assert _ids(client, auth, channel="beta", chat_id="c1") == [b2, b1]
    assert _ids(client, auth, chat_id="c1") == [b2, b1, a1]
    assert _ids(client, auth, channel="alpha", status="sent") == [a2]
    assert _ids(client, auth, channel="gamma") == []
    body = client.get("/api/deliveries", headers=auth).get_json()
    assert body["channels"] == ["alpha", "beta"] and body["counts"]["beta"] == {"deferred": 1, "pending": 1}
    row = body["deliveries"][0]
    assert {"channel", "chat_id", "kind", "status", "attempts", "error", "created_at", "updated_at",
            "sent_at", "next_attempt_at"} <= set(row)
    assert row["kind"] == "reply" and row["channel"] == "beta"
    assert client.get("/api/deliveries").status_code == 401  # behind the pairing guard


def test_deliveries_page_newest_first_with_next_before(web: Any) -> None:
    client, rt, auth = web
    made = [_delivery(rt, "alpha", f"c{i % 3}", f"row {i}", "failed" if i % 2 else None) for i in range(7)]
    seen: list[int] = []
    before = None
    for _ in range(10):
        params = {"limit": 3} | ({"before": before} if before else {})
        body = client.get("/api/deliveries", headers=auth, query_string=params).get_json()
        seen += [d["id"] for d in body["deliveries"]]
        before = body["next_before"]
        if before is None:
            break
    assert seen == sorted(made, reverse=True)
    failed = _ids(client, auth, status="failed", limit=2)
    rest = client.get("/api/deliveries", headers=auth,
                      query_string={"status": "failed", "limit": 2, "before": failed[-1]}).get_json()
    assert failed + [d["id"] for d in rest["deliveries"]] == [i for i in sorted(made, reverse=True)
                                                              if i in made[1::2]]
    assert rest["next_before"] is None
    first = client.get("/api/deliveries", headers=auth, query_string={"status": "failed", "limit": 2}).get_json()
    assert "counts" not in rest and first["counts"] == {"alpha": {"failed": 3, "pending": 4}}  # once per listing


@pytest.mark.parametrize("params, says", [
    ({"status": "gave_up"}, "status must be one of pending, sent, failed, deferred"),
    ({"channel": "a b"}, "channel must be"),
    ({"channel": "x" * 65}, "channel must be"),
    ({"chat_id": "a\x00b"}, "chat_id must be"),
    ({"chat_id": "c" * 257}, "chat_id must be"),
    ({"before": "-1"}, "before must be"),
    ({"before": "ten"}, "before must be"),
    ({"before": "9" * 19}, "before must be"),
    ({"limit": "0"}, "limit must be a whole number from 1 to 200"),
    ({"limit": "201"}, "limit must be"),
    ({"limit": "1e3"}, "limit must be"),
])
def test_deliveries_bad_params_are_400_with_what_to_fix(web: Any, params: dict[str, str], says: str) -> None:
    client, _, auth = web
    r = client.get("/api/deliveries", headers=auth, query_string=params)
    assert r.status_code == 400
    assert r.get_json()["error"] == "bad_request" and says in r.get_json()["message"]


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["status", "channel", "chat_id", "before", "limit"]), st.text(max_size=300)))
def test_any_delivery_query_is_answered_200_or_400(web: Any, params: dict[str, str]) -> None:
    client, _, auth = web
    r = client.get("/api/deliveries", headers=auth, query_string=params)
    assert r.status_code in (200, 400), (params, r.status_code)
    body = r.get_json()
    assert "deliveries" in body if r.status_code == 200 else body["message"]


def test_deliveries_mask_secrets_in_errors_and_texts(web: Any) -> None:
    client, rt, auth = web
    error = f"upstream said 401 for key {SECRET}; Authorization: Bearer tok_{'z' * 20}; {KEY_SHAPED}"
    row_id = _delivery(rt, "alpha", "c1", f"here is {SECRET}", "failed", error)
    raw = client.get("/api/deliveries", headers=auth).get_data(as_text=True)
    assert SECRET not in raw and KEY_SHAPED not in raw and "z" * 20 not in raw
    [d] = client.get("/api/deliveries", headers=auth).get_json()["deliveries"]
    assert d["id"] == row_id and d["error"].startswith("upstream said 401 for key ********")
    assert d["text"] == "here is ********"
    long_id = _delivery(rt, "alpha", "c2", "t" * 195 + SECRET + " and more" * 500)
    [d] = [d for d in client.get("/api/deliveries", headers=auth).get_json()["deliveries"] if d["id"] == long_id]
    assert d["text"] == "t" * 195 + "*****"  # the preview's cut never shows half a secret
    retried = client.post(f"/api/deliveries/{row_id}/retry", headers=auth)
    assert retried.status_code == 200 and SECRET not in retried.get_data(as_text=True)


def test_retry_puts_a_failed_row_back_and_wakes_its_lane(web: Any) -> None:
    client, rt, auth = web
    row_id = _delivery(rt, "alpha", "c9", "again", "failed")
    before = rt.redis.llen("outbound")
    r = client.post(f"/api/deliveries/{row_id}/retry", headers=auth)
    assert r.status_code == 200 and r.get_json()["status"] == "pending" and r.get_json()["attempts"] == 0
    assert rt.redis.llen("outbound") == before + 1  # a delivery task for the lane is on the broker
    task = json.loads(rt.redis.lindex("outbound", 0))
    assert task["headers"]["task"] == "picobot.deliver" and "alpha" in task["headers"]["argsrepr"]
    again = client.post(f"/api/deliveries/{row_id}/retry", headers=auth)
    assert again.status_code == 409 and "is pending" in again.get_json()["message"]
    assert client.post("/api/deliveries/987654/retry", headers=auth).status_code == 404
    assert _ids(client, auth, status="failed") == []


# --- sub-agent runs --------------------------------------------------------------------------


def _session(rt: Any, chat_id: str) -> str:
    with rt.db.begin() as conn:
        return sessions.current_or_create_id(conn, "web", chat_id)


def _run(rt: Any, session_id: str, turn_id: str, parent: str | None = None, status: str = "completed",
         result: str | None = "done", error: str | None = None, description: str = "a task",
         prompt: str = "do it") -> str:
    run_id = uuid.uuid4().hex
    depth = 1 if parent is None else 2
    definition = {"name": "general", "source": "builtin", "read_only": False, "allowed_tools": None,
                  "run": {"tools": ["read", "task"], "system_prompt": "You are a sub-agent.", "timeout_secs": 60,
                          "max_iterations": 3, "provider": "default", "task_text": f"Task: {description}"}}
    with rt.db.begin() as conn:
        agent_runs.insert_run(conn, NewRun(run_id, session_id, turn_id, parent, depth, False, "general",
                                           definition, description, prompt, "owner"), worker="w1@test")
        if status in ("completed", "failed"):
            assert agent_runs.finish(conn, run_id, session_id, status, result, error, Usage(100, 7))
        elif status == RUN_CANCELLED:
            assert agent_runs.end_active(conn, run_id, RUN_CANCELLED, "stopped")
    time.sleep(0.002)  # distinct creation times: the tree orders by them
    return run_id


def test_runs_tree_nests_children_per_turn_and_filters_by_status(web: Any) -> None:
    client, rt, auth = web
    sid = _session(rt, "tree-chat")
    root = _run(rt, sid, "turn-a")
    child = _run(rt, sid, "turn-a", parent=root, status="failed", result=None, error="child broke")
    grandchild = _run(rt, sid, "turn-a", parent=child, status="running")
    other = _run(rt, sid, "turn-b")
    body = client.get("/api/subagents/tree", headers=auth).get_json()
    assert [t["turn_id"] for t in body["turns"]] == ["turn-b", "turn-a"] and body["next_before"] is None
    turn_a = body["turns"][1]
    assert turn_a["session_id"] == sid and turn_a["active"] == 1 and body["active"] == 1
    [top] = turn_a["runs"]
    assert top["id"] == root and [c["id"] for c in top["children"]] == [child]
    assert top["children"][0]["children"][0]["id"] == grandchild
    assert top["children"][0]["error"] == "child broke" and top["input_tokens"] == 100
    assert body["turns"][0]["runs"][0]["id"] == other
    failed = client.get("/api/subagents/tree?status=failed", headers=auth).get_json()["turns"]
    assert [t["turn_id"] for t in failed] == ["turn-a"]  # whole turns: the failed run with its parent
    assert failed[0]["runs"][0]["matches"] is False and failed[0]["runs"][0]["children"][0]["matches"] is True
    page = client.get("/api/subagents/tree?limit=1", headers=auth).get_json()
    assert [t["turn_id"] for t in page["turns"]] == ["turn-b"] and page["next_before"]
    rest = client.get(f"/api/subagents/tree?limit=1&before={page['next_before']!r}", headers=auth).get_json()
    assert [t["turn_id"] for t in rest["turns"]] == ["turn-a"]
    assert client.get("/api/subagents/tree").status_code == 401


def test_a_tree_of_looping_parents_still_lists_every_run_once(web: Any) -> None:
    from web.agent_runs import nest

    base = {"depth": 1, "background": False, "subagent_type": "general", "definition": {}, "description": "",
            "status": "completed", "error": None, "input_tokens": 0, "output_tokens": 0, "created_at": 1.0,
            "started_at": None, "finished_at": None}
    runs = [base | {"id": "a", "parent_run_id": "b"}, base | {"id": "b", "parent_run_id": "a"},
            base | {"id": "c", "parent_run_id": "c"}, base | {"id": "d", "parent_run_id": "gone"}]
    with web[0].application.app_context():
        trees = nest(runs, None)

    def ids(nodes: list[dict[str, Any]]) -> list[str]:
        return [n["id"] for n in nodes] + [i for n in nodes for i in ids(n["children"])]

    assert sorted(ids(trees)) == ["a", "b", "c", "d"]


@pytest.mark.parametrize("query, says", [
    ("status=gave_up", "status must be one of queued, running, completed, failed, cancelled, interrupted"),
    ("limit=0", "limit must be a whole number from 1 to 100"),
    ("limit=101", "limit must be"),
    ("limit=%D9%A3", "limit must be"),  # an Arabic-Indic digit is a digit to str.isdigit
    ("before=nan", "before must be"),
    ("before=inf", "before must be"),
    ("before=-5", "before must be"),
    ("before=yesterday", "before must be"),
])
def test_runs_tree_bad_params_are_400(web: Any, query: str, says: str) -> None:
    client, _, auth = web
    r = client.get(f"/api/subagents/tree?{query}", headers=auth)
    assert r.status_code == 400 and says in r.get_json()["message"], r.get_json()


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.dictionaries(st.sampled_from(["status", "before", "limit"]), st.text(max_size=60)),
       st.text(max_size=80))
def test_any_tree_query_or_run_id_is_answered_never_a_500(web: Any, params: dict[str, str], run_id: str) -> None:
    client, _, auth = web
    r = client.get("/api/subagents/tree", headers=auth, query_string=params)
    assert r.status_code in (200, 400), (params, r.status_code)
    assert "turns" in r.get_json() if r.status_code == 200 else r.get_json()["message"]
    assume(run_id.strip(" ./") != "tree")  # the tree's own path
    one = client.get("/api/subagents/" + quote(run_id, safe=""), headers=auth)
    assert one.status_code in (400, 404), (run_id, one.status_code)
    assert one.get_json()["error"] in ("bad_request", "not_found")


def test_run_detail_has_the_result_masked_and_capped(web: Any) -> None:
    client, rt, auth = web
    sid = _session(rt, "detail-chat")
    long_result = f"found {SECRET} and {KEY_SHAPED} " + "x" * 30_000
    root = _run(rt, sid, "turn-d", result=long_result, prompt=f"use {SECRET}", description="look around")
    child = _run(rt, sid, "turn-d", parent=root, status=RUN_CANCELLED, result=None)
    r = client.get(f"/api/subagents/{root}", headers=auth)
    assert r.status_code == 200
    raw = r.get_data(as_text=True)
    assert SECRET not in raw and KEY_SHAPED not in raw
    run = r.get_json()
    assert run["result"].startswith("found ******** and ******** x") and len(run["result"]) == 20_000
    assert run["result_truncated"] is True and run["result_chars"] > 30_000
    assert run["prompt"] == "use ********" and run["description"] == "look around"
    assert run["status"] == "completed" and run["session_id"] == sid and run["turn_id"] == "turn-d"
    assert run["definition"]["tools"] == ["read", "task"] and run["definition"]["source"] == "builtin"
    assert "system_prompt" not in run["definition"]
    assert run["children"] == [{"id": child, "status": "cancelled", "subagent_type": "general",
                                "description": "a task"}]
    straddling = _run(rt, sid, "turn-e", result="x" * 19_995 + SECRET + "y" * 50_000)
    cut = client.get(f"/api/subagents/{straddling}", headers=auth).get_json()
    assert cut["result"] == "x" * 19_995 + "*****"  # a secret across the cut is masked, not half shown
    assert cut["result_truncated"] is True
    cancelled = client.get(f"/api/subagents/{child}", headers=auth).get_json()
    assert cancelled["result"] is None and cancelled["error"] == "stopped" and cancelled["parent_run_id"] == root


def test_run_detail_404_and_400(web: Any) -> None:
    client, _, auth = web
    missing = client.get(f"/api/subagents/{'0' * 32}", headers=auth)
    assert missing.status_code == 404 and missing.get_json()["error"] == "not_found"
    for bad in ("nope", "0" * 33, "A" * 32, "../" + "0" * 29, "%00" + "0" * 31):
        r = client.get(f"/api/subagents/{bad}", headers=auth)
        assert r.status_code in (400, 404) and r.get_json()["error"] in ("bad_request", "not_found"), bad
    assert client.get("/api/subagents/nope", headers=auth).status_code == 400
    assert client.get(f"/api/subagents/{'0' * 32}").status_code == 401


def test_tree_pages_skip_a_turn_already_shown_even_when_it_has_older_runs(web: Any) -> None:
    client, rt, auth = web
    sid = _session(rt, "paging-chat")
    _run(rt, sid, "turn-a")  # oldest run of turn-a
    b = _run(rt, sid, "turn-b")
    _run(rt, sid, "turn-a", status="failed", result=None, error="late")  # turn-a's newest: after turn-b's

    def pages(query: str) -> list[list[str]]:
        out, before = [], None
        for _ in range(5):
            extra = f"&before={before!r}" if before is not None else ""
            body = client.get(f"/api/subagents/tree?limit=1{query}{extra}", headers=auth).get_json()
            out.append([t["turn_id"] for t in body["turns"]])
            before = body["next_before"]
            if before is None:
                return out
        raise AssertionError(out)

    assert pages("") == [["turn-a"], ["turn-b"], []]
    assert pages("&status=completed") == [["turn-b"], ["turn-a"], []]  # by their newest completed runs
    assert pages("&status=failed") == [["turn-a"], []]
    [turn_b] = client.get("/api/subagents/tree?limit=5&status=completed", headers=auth).get_json()["turns"][:1]
    assert turn_b["runs"][0]["id"] == b


@pytest.fixture
def runs_db(db_url: str) -> Iterator[Any]:
    """A migrated database (SQLite, and PostgreSQL when it answers) with one session for runs."""
    from picobot.storage.db import Database

    db = Database(db_url)
    db.migrate()
    with db.begin() as conn:
        sessions.current_or_create_id(conn, "web", "p")
    yield db
    db.dispose()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.integers(0, 7), st.sampled_from(["completed", "failed", "running"])), min_size=1,
                max_size=40),
       st.integers(1, 4), st.sampled_from([None, "completed", "failed"]))
def test_paging_the_turns_lists_each_matching_turn_once_newest_first(
        runs_db: Any, runs: list[tuple[int, str]], limit: int, status: str | None) -> None:
    from sqlalchemy import delete, insert

    from picobot.storage.models import AgentRunRow

    table = AgentRunRow.__table__
    with runs_db.begin() as conn:
        sid = sessions.current_or_create_id(conn, "web", "p")
        conn.execute(insert(table), [
            {"id": f"{i:032x}", "session_id": sid, "turn_id": f"t{turn}", "parent_run_id": None, "depth": 1,
             "background": False, "subagent_type": "general", "definition": {}, "description": "",
             "prompt": "", "sender_id": "", "status": st_, "input_tokens": 0, "output_tokens": 0,
             "worker": "", "created_at": 1000.0 + i} for i, (turn, st_) in enumerate(runs)])
    try:
        newest: dict[str, float] = {}
        for i, (turn, st_) in enumerate(runs):
            if status is None or st_ == status:
                newest[f"t{turn}"] = 1000.0 + i
        expected = sorted(newest, key=lambda t: -newest[t])
        listed: list[str] = []
        before = None
        with runs_db.connect() as conn:
            for _ in range(len(expected) + 2):
                page = agent_runs.turns_page(conn, status, before, limit)
                listed += [t.turn_id for t in page]
                if len(page) < limit:
                    break
                before = page[-1].newest
        assert listed == expected
    finally:
        with runs_db.begin() as conn:
            conn.execute(delete(table))
