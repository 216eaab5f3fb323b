"""The same-origin JSON API under /api/ that the management pages read (docs/API.md).

Every route here sits behind web.auth's guard: a paired device, and no cross-site writes.
Each management page reads one small endpoint, so a later page (memories, jobs, skills,
sub-agents, MCP servers, channels) adds its own endpoint beside these without touching them.
"""

from __future__ import annotations


from flask import Blueprint, Response, current_app, jsonify, request

from picobot.config.secrets import masked
from picobot.runtime.health import check_health
from picobot.app import App as Runtime
from picobot.storage import sessions
from web.auth import COOKIE, current_device, pairing
from web.ws import CHANNELS, CHAT_ID

bp = Blueprint("api", __name__, url_prefix="/api")

def _rt() -> Runtime:
    return current_app.extensions["picobot"]


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


@bp.get("/me")
def me() -> Response:
    device = current_device()
    return jsonify({"paired": device is not None, "device": device.to_dict() if device else None,
                    "pairing_required": _rt().config.gateway.pairing_required})


@bp.get("/health")
def health() -> Response:
    report = check_health(_rt())
    report["connections"] = current_app.extensions["picobot.hub"].connections()
    return jsonify(report)


@bp.get("/config")
def config() -> Response:
    cfg = _rt().config
    return jsonify({"config": masked(cfg), "source": str(cfg.config_path) if cfg.config_path else None})


@bp.get("/mcp")
def mcp_servers() -> Response:
    from picobot.mcp import status

    rt = _rt()
    return jsonify({"servers": status.summary(rt.config, status.read(rt.redis))})


@bp.get("/agents")
def agents() -> Response:
    """Every agent, from config and from agent files, and the files that could not be loaded."""
    from picobot.config.agent_files import report

    return jsonify(report(_rt().config))


_RUN_FIELDS = ("id", "session_id", "turn_id", "parent_run_id", "depth", "background", "subagent_type", "description",
               "status", "error", "input_tokens", "output_tokens", "created_at", "started_at", "finished_at")


@bp.get("/subagents")
def subagent_runs() -> Response:
    """The newest sub-agent runs, read-only (results are left out: `task action=get_result` has them)."""
    from picobot.storage import agent_runs

    limit = request.args.get("limit", "50")
    if not limit.isdigit() or not 1 <= int(limit) <= 200:
        return _error(400, "bad_limit", "limit must be a whole number from 1 to 200.")
    with _rt().db.connect() as conn:
        runs = agent_runs.recent(conn, int(limit))
    return jsonify({"runs": [{k: r[k] for k in _RUN_FIELDS} | {"source": (r["definition"] or {}).get("source")}
                             for r in runs]})


@bp.get("/sessions")
def list_sessions() -> Response:
    chat_id = request.args.get("chat_id", "")
    channel = request.args.get("channel", "web")
    if channel not in CHANNELS or not CHAT_ID.match(chat_id):
        return _error(400, "bad_request", f"chat_id must match {CHAT_ID.pattern}; channel one of {sorted(CHANNELS)}.")
    archived = request.args.get("archived", "") in ("1", "true", "yes")
    limit = min(max(request.args.get("limit", 50, type=int) or 50, 1), 200)
    with _rt().db.read() as s:
        current = sessions.current(s, channel, chat_id)
        rows = sessions.list_for_chat(s, channel, chat_id, include_archived=archived, limit=limit)
        previews = sessions.previews(s, [r.id for r in rows])
        items = [{"session_id": r.id, "dialog_id": r.dialog_id, "title": r.title, "title_source": r.title_source,
                  "preview": previews.get(r.id, ""),
                  "archived": r.archived_at is not None, "current": current is not None and r.id == current.id,
                  "created_at": r.created_at, "updated_at": r.updated_at,
                  "input_tokens": r.input_tokens, "output_tokens": r.output_tokens} for r in rows]
    return jsonify({"channel": channel, "chat_id": chat_id, "sessions": items})


@bp.get("/voice")
def voice() -> Response:
    """What the chat page offers: a voice message button (always: without voice.stt the user is told why it
    is not heard) and a spoken copy of answers to voice messages (voice.tts)."""
    cfg = _rt().config
    return jsonify({"stt": cfg.voice.stt is not None, "tts": cfg.voice.tts is not None,
                    "max_audio_bytes": cfg.gateway.max_audio_bytes, "max_frame_bytes": cfg.gateway.max_frame_bytes})


@bp.get("/speech/<int:message_id>")
def speech(message_id: int) -> Response:
    """An answer of a web or terminal dialog as speech (voice.tts), made when asked (docs/VOICE.md)."""
    from picobot.domain.messages import text_of
    from picobot.storage.models import MessageRow

    rt = _rt()
    if rt.config.voice.tts is None:
        return _error(404, "no_tts", "Spoken answers need `voice.tts` in config.json (docs/VOICE.md).")
    with rt.db.read() as s:
        row = s.get(MessageRow, message_id)
        found = (row.session_id, row.role, row.marker, text_of(row.content or "")) if row is not None else None
    if found is None or found[0].split(":", 1)[0] not in CHANNELS or found[1] != "assistant" or found[2] \
            or not found[3].strip():
        return _error(404, "not_found", "No answer with this id to speak.")
    clip = rt.plugins.first("picobot_speech", text=found[3], ports=rt)
    if clip is None:
        return _error(404, "no_tts", "Spoken answers need `voice.tts` in config.json (docs/VOICE.md).")
    if isinstance(clip, str) or not isinstance(getattr(clip, "data", None), bytes):
        return _error(502, "speech_failed", f"The speech could not be made: {clip if isinstance(clip, str) else '?'}")
    resp = Response(clip.data, mimetype=clip.mime)
    resp.headers["Cache-Control"] = "private, max-age=86400"  # an answer never changes
    return resp


@bp.get("/pairing/devices")
def devices() -> Response:
    me_id = getattr(current_device(), "id", None)
    include = request.args.get("revoked", "") in ("1", "true", "yes")
    items = [{**d.to_dict(), "current": d.id == me_id} for d in pairing().devices(include_revoked=include)]
    return jsonify({"devices": items})


@bp.delete("/pairing/devices/<device_id>")
def revoke(device_id: str) -> Response:
    if not pairing().revoke(device_id):
        return _error(404, "not_found", f"No paired device {device_id!r} (or it is already revoked).")
    own = getattr(current_device(), "id", None) == device_id
    resp = jsonify({"revoked": device_id, "self": own})
    if own:
        resp.delete_cookie(COOKIE, path="/", samesite="Strict")
    return resp


@bp.route("/<path:_rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def unknown(_rest: str) -> Response:
    return _error(404, "not_found", f"No API endpoint {request.method} {request.path} (see docs/API.md).")
