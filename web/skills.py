"""/api/skills: the Skills page's list, view, edit and enable/disable (docs/API.md).

Thin: every rule (names, folders, precedence, state files) lives in picobot/skills; this
module turns requests into those calls and SkillError into a 400 that says what to fix.
"""

from __future__ import annotations

from typing import Any

from flask import Blueprint, Response, current_app, jsonify, request

from picobot.errors import SkillError, SkillNotFound
from picobot.skills import SkillCatalog, manage
from picobot.skills.events import SkillEvents
from picobot.skills.tools import list_files

bp = Blueprint("skills", __name__, url_prefix="/api/skills")


def _error(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def _catalog() -> SkillCatalog | None:
    return current_app.extensions["picobot"].skills


def _events() -> SkillEvents:
    return SkillEvents(current_app.extensions["picobot"].db)


def _off() -> Response:
    return _error(409, "skills_disabled", "Skills are turned off (skills.enabled is false in config.json).")


def _body() -> dict[str, Any]:
    data = request.get_json(silent=True)
    if not isinstance(data, dict):
        raise SkillError("Send a JSON object as the request body.")
    return data


@bp.errorhandler(SkillError)
def _skill_error(exc: SkillError) -> Response:
    if isinstance(exc, SkillNotFound):
        return _error(404, "not_found", str(exc))
    return _error(400, "bad_request", str(exc))


@bp.get("")
def list_skills() -> Response:
    catalog = _catalog()
    if catalog is None:
        return jsonify({"enabled": False, "skills": []})
    return jsonify({"enabled": True, "skills": [s.to_dict() for s in catalog.all()],
                    "scopes": {scope: str(catalog.paths.scope_dir(scope)) for scope in ("user", "project")}})


@bp.get("/<name>")
def get_skill(name: str) -> Response:
    catalog = _catalog()
    if catalog is None:
        return _off()
    skill = manage.require(catalog, name)
    return jsonify({**skill.to_dict(), "content": catalog.read_text(skill), "files": list_files(skill),
                    "editable": skill.source in manage.WRITABLE_SOURCES})


@bp.put("/<name>")
def save_skill(name: str) -> Response:
    catalog = _catalog()
    if catalog is None:
        return _off()
    skill = manage.write_text(catalog, name, _body().get("content"))
    _events().record("updated", [skill.name], None, via="web", scope=skill.source)
    return jsonify(skill.to_dict())


@bp.post("/<name>/<action>")
def switch(name: str, action: str) -> Response:
    catalog = _catalog()
    if catalog is None:
        return _off()
    if action not in ("enable", "disable"):
        return _error(404, "not_found", f"No action {action!r}; use enable or disable.")
    data = _body() if request.data else {}
    scope = data.get("scope")
    if scope not in (None, "user", "project"):
        raise SkillError("scope must be \"user\" or \"project\".")
    enabled = action == "enable"
    names = manage.set_enabled(catalog, [name], enabled, scope or (None if enabled else "project"))
    _events().record("enabled" if enabled else "disabled", names, None, via="web", scope=scope or "")
    return jsonify(manage.require(catalog, name).to_dict())
