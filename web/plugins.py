"""/api/plugins: the Plugins page's list of the plugins this web process loaded (docs/PLUGINS.md).

Read-only: plugins are installed (entry points, `$PICOBOT_HOME/plugins/`) and switched off
(`plugins.disabled`) on the server. Every process loads the same plugins, so a plugin that
failed to load shows here; a hook that failed while a worker ran a turn is recorded in that
worker (and its log), not in this list.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

bp = Blueprint("plugins", __name__, url_prefix="/api/plugins")


@bp.get("")
def list_plugins() -> Response:
    return jsonify({"plugins": current_app.extensions["picobot"].plugins.statuses()})
