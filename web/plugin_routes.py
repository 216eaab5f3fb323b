"""The routes plugins register (`picobot_routes`), mounted on the Flask app framework-neutrally.

An HTTP route's handler gets an `HttpRequest` (method, path, params, query, lower-case headers, body
capped at its `max_body_bytes`) and the plugin's `PluginPorts`, and answers an `HttpResponse` or a
(status, headers, body) tuple. A WebSocket route's handler gets a socket that is accepted on its first
`receive` or `send`: a handler that answers an HttpResponse before touching it (a wrong token) refuses
the upgrade with that answer. Routes are left to their own checks by the pairing guard, as a platform
webhook is. A route whose path is taken, or a handler that raises, is reported against its plugin and
answered 500 in JSON; the rest of PicoBot is untouched. What the framework answers on a route's paths
before its handler runs is JSON too, `{"error", "code"}`: 404 under its path, 405, 413 over its
`max_body_bytes` (a platform such as Feishu takes anything else for a failure and redelivers).

PicoBot's own plugins (the channels plugin's Feishu and Telegram webhooks) may mount a path under a
prefix kept from third parties (/hooks, /api, …) when their operator configured it there.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Any, Callable

from flask import Flask, Response, current_app, request
from flask_sock import ConnectionClosed
from simple_websocket import Server  # type: ignore[import-untyped]
from werkzeug.exceptions import HTTPException, RequestEntityTooLarge

from picobot.plugins.contributions import (
    KERNEL_PATH_PREFIXES, ContributionError, HttpRequest, HttpResponse, Route, as_response, check_route,
)
from picobot.runtime.plugin_ports import PluginPorts, ports_for

log = logging.getLogger("picobot.plugins")

PATHS = "picobot.webhook_paths"  # app.extensions key: paths the pairing guard leaves to their own checks
OURS = "picobot.plugin_paths"  # app.extensions key: the plugin routes' prefixes, whose errors are JSON
_STAND_IN = "/builtin"  # checks a built-in's reserved path as if it were not reserved


def init_app(app: Flask) -> None:
    rt = app.extensions["picobot"]
    taken = {rule.rule for rule in app.url_map.iter_rules()}
    for route in rt.plugins.contributions("picobot_routes", _checker(rt.plugins)):
        if route.path in taken:
            rt.plugins.report(route.plugin, "picobot_routes", f"route {route.path}: the path is taken; not mounted")
            continue
        taken.add(route.path)
        ports = ports_for(rt, route.plugin)
        view = _socket_view(route, ports) if route.websocket else _http_view(route, ports)
        endpoint = f"plugin_{route.plugin}_{len(taken)}"
        # websocket=True: werkzeug matches an Upgrade request only to a rule that says so (as flask-sock's do)
        app.add_url_rule(route.path, endpoint=endpoint, view_func=view, methods=[route.method],
                         websocket=route.websocket)
        prefix = route.path.split("<", 1)[0].rstrip("/") or route.path
        app.extensions.setdefault(PATHS, set()).add(prefix)
        app.extensions.setdefault(OURS, set()).add(prefix)
    if app.extensions.get(OURS):
        for code in (404, 405, 413):
            app.register_error_handler(code, _json_error)


def _checker(plugins: Any) -> Callable[..., Route]:
    """check_route, except that a built-in plugin may take a path under a reserved prefix (a Feishu
    webhook_path of /hooks/lark): the reservation keeps third parties off PicoBot's paths, and the path
    came from the operator's config; a path one of PicoBot's own routes has is still refused (`taken`)."""
    builtin = {s["name"] for s in plugins.statuses() if s["source"] == "builtin"}

    def check(plugin: str, method: Any, path: Any, *args: Any, **kwargs: Any) -> Route:
        if plugin not in builtin or not isinstance(path, str) or not _reserved(path):
            return check_route(plugin, method, path, *args, **kwargs)
        try:
            return replace(check_route(plugin, method, _STAND_IN + path, *args, **kwargs), path=path)
        except ContributionError as exc:
            raise ContributionError(str(exc).replace(_STAND_IN + path, path)) from None

    return check


def _reserved(path: str) -> bool:
    return any(path == p or path.startswith(p + "/") for p in KERNEL_PATH_PREFIXES)


def _refused(status: int, reason: str) -> Response:
    return _flask(HttpResponse.json({"error": reason, "code": status}, status))


def _json_error(error: HTTPException) -> Any:
    path = request.path
    if not any(path == p or path.startswith(p.rstrip("/") + "/") for p in current_app.extensions.get(OURS, ())):
        return error  # every other path keeps Flask's answer
    return _refused(error.code or 500, error.name)


def _request(route: Route, params: dict[str, Any], body: bytes) -> HttpRequest:
    return HttpRequest(method=request.method, path=request.path, params={k: str(v) for k, v in params.items()},
                       query={k: v for k, v in request.args.items()},
                       headers={k.lower(): v for k, v in request.headers.items()}, body=body,
                       remote_addr=request.remote_addr or "")


def _flask(answer: HttpResponse) -> Response:
    status, headers, body = answer.encoded()
    return Response(body, status=status, headers=headers)


def _failure(route: Route, exc: BaseException) -> Response:
    rt = current_app.extensions["picobot"]
    rt.plugins.report(route.plugin, "picobot_routes", f"{route.method} {route.path}: {type(exc).__name__}: {exc}"[:300])
    log.error("plugin %s: route %s %s failed", route.plugin, route.method, route.path, exc_info=exc)
    return _flask(HttpResponse.json({"error": "internal error"}, 500))


def _http_view(route: Route, ports: PluginPorts) -> Callable[..., Response]:
    def view(**params: Any) -> Response:
        too_big = f"the body is over {route.max_body_bytes} bytes"
        if (request.content_length or 0) > route.max_body_bytes:
            return _refused(413, too_big)
        request.max_content_length = route.max_body_bytes + 1  # the route's own cap, not gateway.max_frame_bytes
        try:
            body = request.get_data(cache=False)
        except RequestEntityTooLarge:
            return _refused(413, too_big)
        if len(body) > route.max_body_bytes:
            return _refused(413, too_big)
        try:
            return _flask(as_response(route.handler(_request(route, params, body), ports)))
        except Exception as exc:
            return _failure(route, exc)

    return view


class PluginSocket:
    """A WebSocket as a plugin sees it: accepted on first use; `receive` returns None on a timeout and
    raises ConnectionError once the peer is gone."""

    def __init__(self, environ: dict[str, Any], options: dict[str, Any]) -> None:
        self._environ, self._options = environ, options
        self._ws: Any = None

    @property
    def accepted(self) -> bool:
        return self._ws is not None

    def _server(self) -> Any:
        if self._ws is None:
            self._ws = Server(self._environ, **self._options)
        return self._ws

    def receive(self, timeout: float | None = None) -> str | bytes | None:
        try:
            return self._server().receive(timeout)
        except ConnectionClosed as exc:
            raise ConnectionError(f"the socket closed ({exc})") from None

    def send(self, data: str | bytes) -> None:
        try:
            self._server().send(data)
        except ConnectionClosed as exc:
            raise ConnectionError(f"the socket closed ({exc})") from None

    def close(self, reason: int | None = None, message: str | None = None) -> None:
        if self._ws is not None:
            try:
                self._ws.close(reason=reason, message=message)
            except Exception:  # closed already
                pass


class _Upgraded(Response):
    """What the view returns once the socket was taken over: nothing more is written (flask-sock's way)."""

    def __init__(self, mode: str) -> None:
        super().__init__()
        self._mode = mode

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._mode == "gunicorn":
            raise StopIteration()
        if self._mode == "werkzeug":
            return super().__call__(*args, **kwargs)
        return []


def _socket_view(route: Route, ports: PluginPorts) -> Callable[..., Response]:
    def view(**params: Any) -> Response:
        socket = PluginSocket(request.environ, current_app.config.get("SOCK_SERVER_OPTIONS", {}))
        answer: Any = None
        try:
            answer = route.handler(socket, _request(route, params, b""), ports)
        except ConnectionError:
            pass
        except Exception as exc:
            if not socket.accepted:
                return _failure(route, exc)
            current_app.extensions["picobot"].plugins.report(
                route.plugin, "picobot_routes", f"socket {route.path}: {type(exc).__name__}: {exc}"[:300])
            log.error("plugin %s: socket %s failed", route.plugin, route.path, exc_info=exc)
        if not socket.accepted:
            try:
                return _flask(as_response(answer) if answer is not None else
                              HttpResponse.json({"error": "the WebSocket was not accepted"}, 400))
            except ContributionError as exc:
                return _failure(route, exc)
        socket.close()
        return _Upgraded(socket._ws.mode)

    return view
