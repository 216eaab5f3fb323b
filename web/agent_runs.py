"""/api/subagents/…: the Sub-agent runs page — runs as trees per turn, and one run with its result.

GET /api/subagents/tree[?status=&before=&limit=20]  the newest turns that started runs (with a run of
                                                    `status`, if given), each with all its runs nested
                                                    parent -> children; `next_before` continues
GET /api/subagents/<run_id>                         one run: prompt, result, error, definition, children

The flat list `GET /api/subagents` lives in web/api.py. Texts are masked (web/masking.py) and capped:
a result can be long and can quote whatever a tool read.
"""

from __future__ import annotations

import math
import re
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.storage import agent_runs
from picobot.storage.models import RUN_ACTIVE, RunStatus
from web.masking import MARGIN, shown, shown_tree

bp = Blueprint("agent_runs", __name__, url_prefix="/api/subagents")

STATUSES = tuple(s.value for s in RunStatus)
RUN_ID = re.compile(r"[0-9a-f]{32}")
TURNS = 20
MAX_TURNS = 100
PREVIEW_CHARS = 300  # description and error in the tree
TEXT_CHARS = 20_000  # prompt, result and error of one run
_DEFINITION_KEYS = ("name", "source", "read_only", "allowed_tools", "max_execution_secs", "requested_type")
_RUN_KEYS = ("tools", "timeout_secs", "max_iterations", "provider")


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _summary(r: dict[str, Any]) -> dict[str, Any]:
    return {"id": r["id"], "parent_run_id": r["parent_run_id"], "depth": r["depth"], "background": bool(r["background"]),
            "subagent_type": r["subagent_type"], "source": (r["definition"] or {}).get("source"),
            "description": shown(r["description"], PREVIEW_CHARS), "status": r["status"],
            "error": shown(r["error"], PREVIEW_CHARS), "input_tokens": r["input_tokens"],
            "output_tokens": r["output_tokens"], "created_at": r["created_at"], "started_at": r["started_at"],
            "finished_at": r["finished_at"]}


def nest(runs: list[dict[str, Any]], status: str | None) -> list[dict[str, Any]]:
    """A turn's runs (oldest first) as trees: roots are runs whose parent is not among them.

    Every run appears exactly once, even in data that loops (a run that names a descendant as its
    parent): a run not reached from a root becomes a root of its own.
    """
    by_parent: dict[str | None, list[dict[str, Any]]] = {}
    ids = {r["id"] for r in runs}
    for r in runs:
        parent = r["parent_run_id"] if r["parent_run_id"] in ids and r["parent_run_id"] != r["id"] else None
        by_parent.setdefault(parent, []).append(r)
    seen: set[str] = set()

    def build(r: dict[str, Any]) -> dict[str, Any]:
        seen.add(r["id"])
        node = _summary(r) | {"matches": status is None or r["status"] == status, "children": []}
        stack = [(node, r["id"])]
        while stack:  # iterative: a deep chain of runs never hits the recursion limit
            parent_node, parent_id = stack.pop()
            for child in by_parent.get(parent_id, []):
                if child["id"] in seen:
                    continue
                seen.add(child["id"])
                child_node = _summary(child) | {"matches": status is None or child["status"] == status,
                                                "children": []}
                parent_node["children"].append(child_node)
                stack.append((child_node, child["id"]))
        return node

    trees = [build(r) for r in by_parent.get(None, [])]
    trees += [build(r) for r in runs if r["id"] not in seen]
    return trees


def _float_arg(name: str) -> float | None:
    raw = request.args.get(name) or None
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0 or len(raw) > 32:
        raise ValueError(f"{name} must be a positive number of seconds since the epoch, as next_before gave it.")
    return value


def _tree_params() -> tuple[str | None, float | None, int]:
    status = request.args.get("status") or None
    if status is not None and status not in STATUSES:
        raise ValueError(f"status must be one of {', '.join(STATUSES)}.")
    limit = request.args.get("limit") or str(TURNS)
    if not (limit.isascii() and limit.isdigit() and len(limit) <= 3 and 1 <= int(limit) <= MAX_TURNS):
        raise ValueError(f"limit must be a whole number from 1 to {MAX_TURNS}.")
    return status, _float_arg("before"), int(limit)


@bp.get("/tree")
def tree() -> Response:
    try:
        status, before, limit = _tree_params()
    except ValueError as exc:
        return _error(400, "bad_request", str(exc))
    with current_app.extensions["picobot"].db.connect() as conn:
        turns = agent_runs.turns_page(conn, status, before, limit)
        runs = agent_runs.of_turns(conn, [t.turn_id for t in turns])
    of_turn: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in runs:
        of_turn.setdefault((r["session_id"], r["turn_id"]), []).append(r)
    out = [{"session_id": t.session_id, "turn_id": t.turn_id, "newest": t.newest,
            "active": sum(r["status"] in RUN_ACTIVE for r in of_turn.get((t.session_id, t.turn_id), [])),
            "runs": nest(of_turn.get((t.session_id, t.turn_id), []), status)} for t in turns]
    return jsonify({"turns": out, "active": sum(t["active"] for t in out),
                    "next_before": turns[-1].newest if len(turns) == limit else None})


def _definition(d: dict[str, Any] | None) -> dict[str, Any]:
    d = d or {}
    found = d.get("run")
    run = found if isinstance(found, dict) else {}
    return shown_tree({k: d.get(k) for k in _DEFINITION_KEYS} | {k: run.get(k) for k in _RUN_KEYS})


def _long(text: str | None) -> dict[str, Any]:
    """A long text capped at TEXT_CHARS, masked. Only what can be shown is masked (plus MARGIN, so a
    secret that starts in the shown part is still seen whole): masking 100 KB costs more than the query."""
    if text is None:
        return {"text": None, "chars": 0, "truncated": False}
    clean = shown(text[:TEXT_CHARS + MARGIN]) or ""
    return {"text": clean[:TEXT_CHARS], "chars": len(text),
            "truncated": len(clean) > TEXT_CHARS or len(text) > TEXT_CHARS + MARGIN}


@bp.get("/<run_id>")
def run_detail(run_id: str) -> Response:
    if not RUN_ID.fullmatch(run_id):
        return _error(400, "bad_request", "run_id must be a run's id: 32 lowercase hex digits.")
    with current_app.extensions["picobot"].db.connect() as conn:
        run = agent_runs.get(conn, run_id)
        children = agent_runs.children_of(conn, run) if run is not None else []
    if run is None:
        return _error(404, "not_found", f"No sub-agent run {run_id}.")
    result, prompt, error = _long(run["result"]), _long(run["prompt"]), _long(run["error"])
    return jsonify(_summary(run) | {
        "session_id": run["session_id"], "turn_id": run["turn_id"], "worker": run["worker"],
        "error": error["text"], "prompt": prompt["text"], "prompt_truncated": prompt["truncated"],
        "result": result["text"], "result_chars": result["chars"], "result_truncated": result["truncated"],
        "definition": _definition(run["definition"]),
        "children": [{"id": c["id"], "status": c["status"], "subagent_type": c["subagent_type"],
                      "description": shown(c["description"], PREVIEW_CHARS)} for c in children]})
