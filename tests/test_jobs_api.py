"""/api/jobs against a real stack (web, worker, beat): create, list, read, edit, pause, resume, run now,
delete; hostile bodies get a 400 naming the field and change nothing; unknown jobs are 404s."""

from __future__ import annotations

from typing import Any, Iterator

import httpx
import pytest

from tests.stack import Stack, wait_for
from tests.http_client import HTTP

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {stack.token}"}, timeout=20) as c:
        yield c


def job(job_id: str, **more: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "outbound_message", "schedule": {"type": "interval", "seconds": 3600},
            "target": {"channel": "web", "chat_id": "api-jobs"}, "payload": {"text": f"hello from {job_id}"}, **more}


def ids(http: httpx.Client) -> list[str]:
    r = http.get("/api/jobs")
    assert r.status_code == 200, r.text
    return sorted(j["id"] for j in r.json()["jobs"] if j["source"] == "user")


def test_create_list_edit_pause_resume_delete(http: httpx.Client) -> None:
    r = http.post("/api/jobs", json=job("api.one"))
    assert r.status_code == 201, r.text
    created = r.json()
    assert created["state"] == "active" and created["schedule_text"] and created["next_due_at"] > 0
    listed = {j["id"]: j for j in http.get("/api/jobs").json()["jobs"]}
    assert listed["api.one"]["schedule_text"] == created["schedule_text"]
    got = http.get("/api/jobs/api.one").json()
    assert got["runs"] == [] and got["payload"] == {"text": "hello from api.one"}

    r = http.put("/api/jobs/api.one", json={**job("api.one"), "schedule": {"type": "cron", "expression": "30 8 * * *"}})
    assert r.status_code == 200, r.text
    assert r.json()["schedule"]["type"] == "cron" and "08:30" in r.json()["schedule_text"]
    assert http.post("/api/jobs/api.one/pause").json()["state"] == "paused"
    assert http.get("/api/jobs/api.one").json()["state"] == "paused"
    assert http.post("/api/jobs/api.one/resume").json()["state"] == "active"
    assert http.delete("/api/jobs/api.one").status_code == 200
    assert http.get("/api/jobs/api.one").status_code == 404
    assert "api.one" not in ids(http)


def test_run_now_records_a_run_in_the_history(http: httpx.Client) -> None:
    assert http.post("/api/jobs", json=job("api.run")).status_code == 201
    r = http.post("/api/jobs/api.run/run")
    assert r.status_code == 200, r.text

    def ran() -> list[dict[str, Any]]:
        runs = http.get("/api/jobs/api.run").json()["runs"]
        return [x for x in runs if x["outcome"] not in ("running",)]

    [run] = wait_for(ran, 30, "the run-now run never finished")
    assert run["outcome"] == "ok" and run["ended_at"] >= run["due_at"], run
    assert http.get("/api/jobs/api.run").json()["last_outcome"] == "ok"


HOSTILE: list[tuple[str, Any, str]] = [
    ("not json", b"{nope", "body"),
    ("an array", b"[1, 2]", "body"),
    ("a string", b'"job"', "body"),
    ("deep nesting", b'{"id": ' + b"[" * 50_000 + b"]" * 50_000 + b"}", "body"),
    ("id not text", job(5), "id"),  # type: ignore[arg-type]
    ("no target", {k: v for k, v in job("h.notarget").items() if k != "target"}, "target"),
    ("bad id", job("../../etc/passwd"), "id"),
    ("lone surrogate id", job("bad\ud800"), "id"),
    ("schedule not an object", job("h.sched", schedule="every day"), "schedule"),
    ("bad cron", job("h.cron", schedule={"type": "cron", "expression": "61 * * * *"}), "schedule.expression"),
    ("interval under the tick", job("h.tick", schedule={"type": "interval", "seconds": 0.001}), "schedule.seconds"),
    ("at in the past", job("h.past", schedule={"type": "at", "at": "2001-01-01T00:00:00+00:00"}), "schedule.at"),
    ("unknown zone", job("h.tz", timezone="Mars/Olympus"), "timezone"),
    ("unknown kind", job("h.kind", kind="rocket"), "kind"),
    ("unknown channel", job("h.chan", target={"channel": "pigeon", "chat_id": "x"}), "target.channel"),
    ("unknown agent", job("h.agent", kind="agent_task", payload={"prompt": "p", "agent": "ghost"}), "payload.agent"),
]


@pytest.mark.parametrize("name,body,field", HOSTILE, ids=[h[0] for h in HOSTILE])
def test_hostile_bodies_get_400_naming_the_field(http: httpx.Client, name: str, body: Any, field: str) -> None:
    before = ids(http)
    if isinstance(body, bytes):
        r = http.post("/api/jobs", content=body, headers={"Content-Type": "application/json"})
    else:
        import json

        r = http.post("/api/jobs", content=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    assert r.status_code == 400, (name, r.status_code, r.text)
    data = r.json()
    assert data["error"] == "bad_request" and data["field"] == field and data["message"].startswith(field), data
    assert ids(http) == before


def test_put_cannot_rename_and_unknown_jobs_are_404(http: httpx.Client) -> None:
    assert http.post("/api/jobs", json=job("api.keep")).status_code == 201
    r = http.put("/api/jobs/api.keep", json=job("api.other"))
    assert r.status_code == 400 and r.json()["field"] == "id"
    assert "api.other" not in ids(http)
    assert http.put("/api/jobs/api.ghost", json=job("api.ghost")).status_code == 404
    assert "api.ghost" not in ids(http)
    for method, path in (("GET", "/api/jobs/api.ghost"), ("DELETE", "/api/jobs/api.ghost"),
                         ("POST", "/api/jobs/api.ghost/pause"), ("POST", "/api/jobs/api.ghost/resume"),
                         ("POST", "/api/jobs/api.ghost/run"), ("POST", "/api/jobs/api.keep/explode")):
        r = http.request(method, path)
        assert r.status_code == 404 and r.json()["error"] == "not_found", (method, path, r.text)
    for bad in ("x", "-1", "1e3", "999"):
        r = http.get(f"/api/jobs/api.keep?runs={bad}")
        assert r.status_code == 400 and r.json()["field"] == "runs"
    assert http.delete("/api/jobs/api.keep").status_code == 200


def test_the_api_is_behind_pairing_and_refuses_cross_site_writes(stack: Stack, http: httpx.Client) -> None:
    assert HTTP.get(stack.http + "/api/jobs").status_code == 401
    assert HTTP.post(stack.http + "/api/jobs", json=job("anon.job")).status_code == 401
    r = http.post("/api/jobs", json=job("xsite.job"), headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"})
    assert r.status_code == 403
    assert "anon.job" not in ids(http) and "xsite.job" not in ids(http)
