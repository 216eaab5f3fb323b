"""/api/memories and /api/knowledge: the Memories and Knowledge pages (docs/API.md).

Thin: every rule (scopes, limits, search) lives in picobot/memory; this module turns requests
into those calls and MemoryRejected into a 400 that says what to fix. The install's owner sees
every scope here: the page is behind the same pairing guard as the rest of /api.
"""

from __future__ import annotations

import math
from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.errors import MemoryRejected
from picobot.memory import Memory, MemorySource, MemoryStore
from picobot.memory.knowledge import KnowledgeBase
from picobot.memory.source import source_messages

bp = Blueprint("memories", __name__, url_prefix="/api")


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _off() -> Response:
    return _error(409, "memory_disabled", "Memory is turned off (memory.enabled is false in config.json).")


def _store() -> MemoryStore | None:
    return current_app.extensions["picobot"].memory


def _kb() -> KnowledgeBase | None:
    return current_app.extensions["picobot"].knowledge


@bp.errorhandler(MemoryRejected)
def _rejected(exc: MemoryRejected) -> Response:
    return _error(400, "bad_request", str(exc))


def _number(name: str, low: float, high: float) -> float | None:
    raw = request.args.get(name)
    if raw in (None, ""):
        return None
    try:
        value = float(raw)
    except ValueError:
        raise MemoryRejected(f"{name} must be a number (seconds since the epoch for since/until).") from None
    if not math.isfinite(value) or not low <= value <= high:
        raise MemoryRejected(f"{name} must be between {low:g} and {high:g}.")
    return value


def _memory_dict(m: Memory, **extra: Any) -> dict[str, Any]:
    return {**m.to_dict(), **extra}


@bp.get("/memories")
def list_memories() -> Response:
    store = _store()
    if store is None:
        return _off()
    scope_key = request.args.get("scope_key", "").strip()
    if not scope_key:
        raise MemoryRejected("scope_key is required (GET /api/memories/scopes lists them).")
    filters: dict[str, Any] = {
        "namespace": request.args.get("namespace") or None, "category": request.args.get("category") or None,
        "since": _number("since", 0, 1e11), "until": _number("until", 0, 1e11),
        "session_id": request.args.get("session_id") or None,
    }
    limit = int(_number("limit", 1, 100) or 50)
    query = request.args.get("q", "")
    if query.strip():
        hits = store.search(scope_key, query, limit=limit, **filters)
        rows = [_memory_dict(h.memory, score=round(h.score, 4), matched_by=h.matched_by) for h in hits]
    else:
        offset = int(_number("offset", 0, 1e9) or 0)
        rows = [_memory_dict(m) for m in store.list(scope_key, limit=limit, offset=offset, **filters)]
    return jsonify({"enabled": True, "scope_key": scope_key, "memories": rows})


@bp.get("/memories/scopes")
def list_scopes() -> Response:
    store = _store()
    if store is None:
        return jsonify({"enabled": False, "scopes": []})
    return jsonify({"enabled": True, "scopes": store.scopes()})


@bp.get("/memories/namespaces")
def list_namespaces() -> Response:
    store = _store()
    if store is None:
        return _off()
    return jsonify({"namespaces": store.namespaces(request.args.get("scope_key", ""))})


@bp.get("/memories/<int:memory_id>")
def get_memory(memory_id: int) -> Response:
    store = _store()
    if store is None:
        return _off()
    memory = store.get_by_id(memory_id)
    if memory is None:
        return _error(404, "not_found", f"No memory {memory_id}.")
    return jsonify(_memory_dict(memory, source_messages=source_messages(store.db, memory)))


@bp.put("/memories/<int:memory_id>")
def edit_memory(memory_id: int) -> Response:
    store = _store()
    if store is None:
        return _off()
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise MemoryRejected("Send a JSON object as the request body: {content?, importance?, category?}.")
    importance = data.get("importance")
    memory = store.update_by_id(memory_id, content=data.get("content"), category=data.get("category"),
                                importance=importance, source=MemorySource(source_type="web"))
    if memory is None:
        return _error(404, "not_found", f"No memory {memory_id}.")
    return jsonify(_memory_dict(memory))


@bp.delete("/memories/<int:memory_id>")
def delete_memory(memory_id: int) -> Response:
    store = _store()
    if store is None:
        return _off()
    if not store.delete_by_id(memory_id):
        return _error(404, "not_found", f"No memory {memory_id}.")
    return jsonify({"deleted": memory_id})


@bp.get("/knowledge")
def list_knowledge() -> Response:
    kb = _kb()
    if kb is None:
        return jsonify({"enabled": False, "documents": []})
    query = request.args.get("q", "")
    if query.strip():
        docs = [{**h.doc.to_dict(), "snippet": h.snippet} for h in kb.search(query[:2000], 20)]
    else:
        docs = [d.to_dict() for d in kb.list()]
    return jsonify({"enabled": True, "documents": docs})


@bp.get("/knowledge/<name>")
def get_knowledge(name: str) -> Response:
    kb = _kb()
    if kb is None:
        return _off()
    found = kb.read(name)  # a name that is not allowed is a 400 (the error handler above)
    if found is None:
        return _error(404, "not_found", f"No knowledge document {name[:80]!r}.")
    doc, body = found
    return jsonify({**doc.to_dict(), "content": body})
