"""/api/plugins: the Plugins page's list of the plugins this web process loaded, and each live
worker's (from its heartbeat), so a hook that failed while a worker ran a turn shows too (docs/PLUGINS.md).

Read-only: plugins are installed (entry points, `$PICOBOT_HOME/plugins/`) and switched off
(`plugins.disabled`) on the server.
"""

from __future__ import annotations

from flask import Blueprint, Response, current_app, jsonify

bp = Blueprint("plugins", __name__, url_prefix="/api/plugins")


@bp.get("")
def list_plugins() -> Response:
    from picobot.runtime.heartbeat import worker_facts

    rt = current_app.extensions["picobot"]
    try:
        workers = {name: found for name, found in worker_facts(rt.redis, "plugins").items() if isinstance(found, list)}
    except Exception:  # Redis down: the web process's own list still answers
        workers = {}
    return jsonify({"plugins": rt.plugins.statuses(), "workers": workers})
