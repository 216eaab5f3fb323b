"""/api/jobs: the Jobs page's list, create, edit, delete, pause, resume and run now (docs/API.md).

Thin: every rule (job JSON, schedules, runs) lives in picobot/scheduler; this module turns
requests into JobService calls as the install's owner (the pairing guard in front of /api
admits only paired devices) and JobError into a 400 naming the field.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.scheduler.jobs import JobError
from picobot.scheduler.manage import Actor, JobAccessError, JobNotFound, JobService

bp = Blueprint("jobs", __name__, url_prefix="/api/jobs")

OWNER = Actor(channel="web", chat_id="jobs-page", owner=True)  # never a default target: see _body
ACTIONS = ("pause", "resume", "run")
MAX_RUNS = 200


def _error(status: int, code: str, text: str, field: str | None = None) -> Response:
    body: dict[str, Any] = {"error": code, "message": text}
    if field is not None:
        body["field"] = field
    resp = jsonify(body)
    resp.status_code = status
    return resp


def _service() -> JobService:
    return JobService(current_app.extensions["picobot"])


def _body() -> dict[str, Any]:
    data = request.get_json(silent=True)  # None for bad JSON, deep nesting included (web.app.JsonSafeRequest)
    if not isinstance(data, dict):
        raise JobError("body", "send the job as a JSON object: {id, kind, schedule, target, payload}")
    if data.get("kind") != "internal_event" and "target" not in data:
        # the page has no chat of its own to default to: say where the job delivers
        raise JobError("target", "say which chat the job is for: {\"channel\": \"web\", \"chat_id\": \"…\"}")
    return data


@bp.errorhandler(JobError)
def _bad(exc: JobError) -> Response:
    return _error(400, "bad_request", str(exc), field=exc.field)


@bp.errorhandler(JobAccessError)
def _refused(exc: JobAccessError) -> Response:
    if isinstance(exc, JobNotFound):
        return _error(404, "not_found", f"No job {exc.job_id[:128]!r}.")
    return _error(403, "forbidden", str(exc))  # e.g. deleting a job that comes from config.json


def _call(method: str, job_id: str, *args: Any) -> Response:
    return jsonify(getattr(_service(), method)(OWNER, job_id, *args))


@bp.get("")
def list_jobs() -> Response:
    return jsonify({"enabled": current_app.extensions["picobot"].config.scheduler.enabled,
                    "jobs": _service().list(OWNER)})


@bp.post("")
def create_job() -> Response:
    job = _service().put(OWNER, _body())
    resp = jsonify(job)
    resp.status_code = 201
    return resp


@bp.get("/<job_id>")
def get_job(job_id: str) -> Response:
    raw = request.args.get("runs", "20")
    if not raw.isdigit() or not 0 <= int(raw) <= MAX_RUNS:
        raise JobError("runs", f"a whole number from 0 to {MAX_RUNS}")
    return _call("get", job_id, int(raw))


@bp.put("/<job_id>")
def replace_job(job_id: str) -> Response:
    data = _body()
    if data.get("id", job_id) != job_id:
        raise JobError("id", f"the body's id differs from the URL's ({job_id[:128]!r}); a job cannot be renamed")
    _service().get(OWNER, job_id, 0)  # replaces an existing job only: 404 otherwise
    return jsonify(_service().put(OWNER, {**data, "id": job_id}))


@bp.delete("/<job_id>")
def delete_job(job_id: str) -> Response:
    return _call("delete", job_id)


@bp.post("/<job_id>/<action>")
def act(job_id: str, action: str) -> Response:
    if action not in ACTIONS:
        return _error(404, "not_found", f"No action {action[:40]!r}; use pause, resume or run.")
    return _call("run_now" if action == "run" else action, job_id)
