"""The web UI pages plugins register (`picobot_pages`): `GET /api/ui/pages` lists them for the navigation,
`GET /plugin-pages/<plugin>/<page>.js` serves each page's ES module. Both are behind the pairing guard like
the rest of the UI; a page's script is read from the file the plugin named, and nothing else is served."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from flask import Blueprint, Response, current_app, jsonify

from picobot.plugins.contributions import PageSpec, check_page

bp = Blueprint("plugin_pages", __name__)


def _pages() -> list[PageSpec]:
    return current_app.extensions["picobot"].plugins.contributions("picobot_pages", check_page)


@bp.get("/api/ui/pages")
def list_pages() -> Any:
    """The plugins' pages, in registration order: route id, title, icon, group and the module's URL."""
    seen: set[str] = set()
    pages = []
    for page in _pages():
        if page.route in seen:
            continue
        seen.add(page.route)
        pages.append({"id": page.route, "plugin": page.plugin, "title": page.title, "icon": page.icon,
                      "group": page.group, "src": f"/plugin-pages/{page.plugin}/{page.page_id}.js"})
    return jsonify({"pages": pages})


@bp.get("/plugin-pages/<plugin>/<page_id>.js")
def page_script(plugin: str, page_id: str) -> Any:
    page = next((p for p in _pages() if (p.plugin, p.page_id) == (plugin, page_id)), None)
    if page is None:
        return jsonify({"error": "no such page"}), 404
    try:
        body = Path(page.script).read_bytes()
    except OSError as exc:
        current_app.extensions["picobot"].plugins.report(page.plugin, "picobot_pages",
                                                         f"page {page.page_id}: {type(exc).__name__}: {exc}")
        return jsonify({"error": "the page's script cannot be read"}), 500
    return Response(body, mimetype="text/javascript", headers={"Cache-Control": "no-cache"})
