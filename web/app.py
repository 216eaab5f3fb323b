"""Flask app factory: wires the runtime, the event hub and the blueprints, nothing else."""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

from flask import Flask, Request
from werkzeug.middleware.proxy_fix import ProxyFix

from picobot.config import Config, apply_dotenv, load_config, picobot_home
from picobot.gateway.limits import RateLimits
from picobot.logs.setup import setup_logging
from picobot.app import App as Runtime, build_runtime
from web.hub import EventHub, OutboxLimits

WS_HARD_LIMIT = 16 * 1024 * 1024  # frames above gateway.max_frame_bytes get an error frame, not a close


class JsonSafeRequest(Request):
    """A body that nests too deep for the JSON parser is bad JSON like any other (400, or None when
    silent), not a RecursionError and a 500 in whichever endpoint read it."""

    def get_json(self, force: bool = False, silent: bool = False, cache: bool = True) -> Any:
        try:
            return super().get_json(force=force, silent=silent, cache=cache)
        except RecursionError as exc:
            if silent:
                return None
            return self.on_json_loading_failed(ValueError(f"the JSON nests too deep ({exc})"))


def serve_app() -> Flask:
    """The app as `picobot web`, the Procfile and docker compose serve it (gunicorn's `web.app:serve_app()`):
    `create_app()`, then its start-up objects frozen out of the garbage collector's full passes
    (picobot/heap.py), in gunicorn's worker process. An older `web.app:create_app()` still works."""
    from picobot.heap import settle

    app = create_app()
    settle()
    return app


def _make_celery(config: Config) -> Any:
    from worker.celery_app import make_celery

    return make_celery(config)


def create_app(config: Config | None = None, overrides: dict[str, Any] | None = None,
               runtime: Runtime | None = None) -> Flask:
    if config is None and runtime is None:
        apply_dotenv(picobot_home(), Path.cwd())
        config = load_config()
    if runtime is None:
        from worker.queue import CeleryTaskQueue

        assert config is not None
        # the Celery app is made on the web's first send that needs it: its turns are direct messages
        runtime = build_runtime(config, CeleryTaskQueue.lazy(config, partial(_make_celery, config)), migrate=True)
    setup_logging(runtime.config)
    runtime.db.group_commit = True  # the web acknowledges input while clients wait: commit it in groups

    app = Flask(__name__)
    app.request_class = JsonSafeRequest
    app.config.update(
        # no library pings: web/ws.py queues its own, so a ping never lands inside a half-sent frame
        SOCK_SERVER_OPTIONS={"ping_interval": None, "max_message_size": WS_HARD_LIMIT},
        JSON_SORT_KEYS=False,
        MAX_CONTENT_LENGTH=runtime.config.gateway.max_frame_bytes,
    )
    app.config.update(overrides or {})
    trust_proxies(app, runtime.config.gateway.trusted_proxies)
    app.extensions["picobot"] = runtime
    app.extensions["picobot.rate_limits"] = RateLimits(runtime.redis, runtime.config.gateway.rate_limits)
    gw = runtime.config.gateway
    limits = OutboxLimits(gw.ws_send_queue_frames, gw.ws_send_queue_bytes, gw.ws_send_timeout_secs)
    app.extensions["picobot.hub"] = EventHub(runtime.redis, limits=limits)

    from web import api, auth, health, jobs, memories, plugins, skills, ui, ws

    auth.init_app(app)  # the pairing guard in front of every route (see web/auth.py)
    app.register_blueprint(health.bp)
    app.register_blueprint(ws.bp)
    app.register_blueprint(skills.bp)
    app.register_blueprint(memories.bp)
    app.register_blueprint(jobs.bp)
    app.register_blueprint(plugins.bp)
    app.register_blueprint(api.bp)
    app.register_blueprint(ui.bp)
    from web import agent_runs, channels, deliveries

    app.register_blueprint(deliveries.bp)
    app.register_blueprint(channels.bp)
    from web import metrics

    metrics.init_app(app)  # GET /metrics (metrics.enabled)
    from web import openai_api

    openai_api.init_app(app)  # /v1: OpenAI-compatible API, its own bearer auth (404 unless enabled)
    app.register_blueprint(agent_runs.bp)
    from web import config_edit, logs

    app.register_blueprint(config_edit.bp)  # PATCH /api/config, GET /api/config/editable
    app.register_blueprint(logs.bp)  # GET /api/logs
    from web import usage

    app.register_blueprint(usage.bp)  # GET /api/usage
    from web import settings_api

    app.register_blueprint(settings_api.bp)  # GET /api/settings, PATCH /api/settings/<key> (plugin settings)
    from web import webhooks

    webhooks.init_app(app)  # POST /hooks/<name> (signed), GET /hooks/runs/<id>, GET /api/hooks
    from web import plugin_routes

    plugin_routes.init_app(app)  # what plugins register (picobot_routes), after PicoBot's own paths
    from web import plugin_pages

    app.register_blueprint(plugin_pages.bp)  # the UI pages plugins register (picobot_pages)
    runtime.plugins.plugin("channels").start_web(runtime)  # the platforms' webhooks answer with these ports
    from picobot.channels.live import start_relay

    app.extensions["picobot.live"] = start_relay(runtime)  # reactions / live cards of external channels
    return app


def trust_proxies(app: Flask, hops: int) -> None:
    """Believe X-Forwarded-For/-Proto/-Host/-Port from `hops` reverse proxies (none by default:
    then the headers are ignored, so a client cannot pose as another address)."""
    if hops > 0:
        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=hops, x_proto=hops, x_host=hops, x_port=hops)  # type: ignore[method-assign]
