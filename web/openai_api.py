"""/v1: the OpenAI-compatible API (`POST /v1/chat/completions`, `GET /v1/models`), a thin HTTP edge.

The pairing guard (web/auth.py) leaves /v1 to this module, as it does a platform webhook: a
request proves itself with `Authorization: Bearer` — an API key (`picobot apikeys`) or a paired
device token — and every answer, errors too, is in OpenAI's shape. The work happens in
picobot/openai_api/; docs/API.md describes the wire.
"""

from __future__ import annotations

import logging
import secrets
import time
from typing import Any, Iterator

import redis
from flask import Blueprint, Flask, Response, current_app, jsonify, request
from sqlalchemy.exc import SQLAlchemyError
from werkzeug.exceptions import RequestEntityTooLarge

from picobot.auth.apikeys import ApiKeys, looks_like_key
from picobot.app import App as Runtime
from picobot.gateway.intake import Gateway
from picobot.openai_api import chunks, service
from picobot.openai_api.answer import Answer
from picobot.openai_api.errors import AUTH, NOT_FOUND, SERVER, ApiError
from picobot.openai_api.models import model_list, model_object
from picobot.openai_api.request import parse_body, parse_request, session_name
from picobot.openai_api.watch import TurnWatch
from web.auth import client_address, pairing

log = logging.getLogger("picobot.web.openai_api")

PREFIX = "/v1"
PATHS = "picobot.webhook_paths"  # app.extensions key: paths the pairing guard leaves to their own checks
SESSION_HEADER = "X-PicoBot-Session"
DRAIN_MAX_BYTES = 16 * 1024 * 1024  # a larger body is not read: the connection is dropped instead
STARTED = int(time.time())  # `created` of the model objects
NO_KEY = ("Incorrect or missing API key. Send `Authorization: Bearer <key>` with a key from "
          "`picobot apikeys create NAME` or a paired device token.")

bp = Blueprint("openai_api", __name__, url_prefix=PREFIX)


def init_app(app: Flask) -> None:
    rt: Runtime = app.extensions["picobot"]
    app.extensions.setdefault(PATHS, set()).add(PREFIX)
    app.extensions["picobot.apikeys"] = ApiKeys(rt.db)
    app.extensions["picobot.openai_watch"] = TurnWatch(rt.redis)
    app.register_blueprint(bp)


def _runtime() -> Runtime:
    return current_app.extensions["picobot"]


def error_response(exc: ApiError, session: str | None = None) -> Response:
    resp = jsonify(exc.body())
    resp.status_code = exc.status
    if exc.status == 401:
        resp.headers["WWW-Authenticate"] = 'Bearer realm="picobot"'
    if exc.retry_after is not None:
        resp.headers["Retry-After"] = str(exc.retry_after)
    if exc.status == 413:  # the body was left unread: this connection cannot carry another request
        resp.headers["Connection"] = "close"
    if session:
        resp.headers[SESSION_HEADER] = session
    return resp


def _principal(rt: Runtime) -> service.Principal:
    header = request.headers.get("Authorization", "")
    token = header[7:].strip() if header[:7].lower() == "bearer " else ""
    open_server = not rt.config.gateway.pairing_required
    if not token:
        if open_server:
            return _anonymous()
        raise ApiError(401, NO_KEY, AUTH, code="invalid_api_key")
    if looks_like_key(token):
        key = current_app.extensions["picobot.apikeys"].verify(token)
        if key is not None:
            return service.Principal("key", key.id, key.name, key.agent)
        # a PicoBot key that is wrong or revoked fails loudly, open server or not
    else:
        device = pairing().verify(token)
        if device is not None:
            return service.Principal("device", device.id, device.name, None)
        if open_server:  # the SDKs always send some api_key ("none", "sk-..."): an open server takes it, as Ollama does
            return _anonymous()
    raise ApiError(401, NO_KEY, AUTH, code="invalid_api_key")


def _anonymous() -> service.Principal:
    """A client of an open server (pairing off) with no PicoBot credential: its dialogs belong to its address."""
    return service.Principal("open", "addr_" + client_address().replace(":", "_")[:48], "", None)


def _checked(rt: Runtime) -> service.Principal:
    if not rt.config.gateway.openai_api.enabled:
        raise ApiError(404, "The OpenAI-compatible API is not enabled on this PicoBot "
                            "(gateway.openai_api.enabled).", NOT_FOUND, code="not_enabled")
    return _principal(rt)


def _failure(exc: Exception, what: str) -> ApiError:
    """Log an infrastructure failure with its first line; the client gets a clear text without it."""
    detail = (str(exc).splitlines() or [""])[0][:200]
    log.error("/v1 %s failed: %s: %s", what, type(exc).__name__, detail,
              exc_info=not isinstance(exc, (SQLAlchemyError, redis.RedisError)))
    if isinstance(exc, (SQLAlchemyError, redis.RedisError)):
        return ApiError(503, "PicoBot's database or Redis is unavailable right now; retry in a moment.", SERVER,
                        code="unavailable")
    return ApiError(500, "PicoBot failed to handle this request; retry, or report it if it persists.", SERVER,
                    code="internal")


@bp.get("/models")
def models() -> Response:
    rt = _runtime()
    try:
        principal = _checked(rt)
    except ApiError as exc:
        return error_response(exc)
    return jsonify(model_list(rt.config, principal.agent, STARTED))


@bp.get("/models/<path:model>")
def model(model: str) -> Response:
    rt = _runtime()
    try:
        principal = _checked(rt)
        agent = service.resolve_agent(rt, principal, model)
    except ApiError as exc:
        return error_response(exc)
    return jsonify(model_object(agent, STARTED))


@bp.route("/", defaults={"rest": ""}, methods=["GET", "POST", "PUT", "PATCH", "DELETE"], strict_slashes=False)
@bp.route("/<path:rest>", methods=["GET", "POST", "PUT", "PATCH", "DELETE"])
def unknown(rest: str) -> Response:
    """Every other /v1 path or method: OpenAI-shaped, never the HTML 404 (the guard let it through)."""
    known = {"chat/completions": "POST", "models": "GET"}
    if rest in known:
        return error_response(ApiError(405, f"Use {known[rest]} for {PREFIX}/{rest}.", code="method_not_allowed"))
    return error_response(ApiError(404, f"Unknown path {PREFIX}/{rest[:100]}; PicoBot serves "
                                        f"{PREFIX}/chat/completions and {PREFIX}/models.", NOT_FOUND,
                                   code="unknown_url"))


def _body() -> Any:
    limit = _runtime().config.gateway.max_frame_bytes
    too_big = ApiError(413, f"The body is over {limit} bytes (gateway.max_frame_bytes).", code="too_large")
    if (request.content_length or 0) > limit:
        _drain(request.content_length or 0)
        raise too_big
    try:
        raw = request.get_data(cache=False)
    except RequestEntityTooLarge:
        raise too_big from None
    return parse_body(raw)


def _drain(length: int) -> None:
    """Read and drop a body that is too large but not absurd: a server that answers while the client
    is still sending resets the connection, and the client may never see the 413."""
    if length > DRAIN_MAX_BYTES:
        return
    stream = request.environ.get("wsgi.input")
    while stream is not None and length > 0:
        piece = stream.read(min(length, 65536))
        if not piece:
            return
        length -= len(piece)


@bp.post("/chat/completions")
def chat_completions() -> Response:
    rt = _runtime()
    dialog: service.Dialog | None = None
    try:
        principal = _checked(rt)
        req = parse_request(_body())
        agent = service.resolve_agent(rt, principal, req.model)
        name = session_name(request.headers.get(SESSION_HEADER), req.user)
        dialog = service.open_dialog(rt, principal, agent, name)
        watch: TurnWatch = current_app.extensions["picobot.openai_watch"]
        events = watch.subscribe(dialog.session_id)
        try:
            seq = service.submit(rt, Gateway(rt, current_app.extensions.get("picobot.rate_limits")), principal,
                                 dialog, req)
        except BaseException:
            watch.unsubscribe(dialog.session_id, events)
            raise
    except ApiError as exc:
        return error_response(exc, dialog.name if dialog else None)
    except Exception as exc:
        return error_response(_failure(exc, "chat completion"), dialog.name if dialog else None)
    turn = _Turn(rt, watch, events, dialog, seq, req.model, req.include_usage)
    if req.stream:
        resp = Response(turn.stream(), mimetype="text/event-stream")
        resp.headers["Cache-Control"] = "no-cache"
        resp.headers["X-Accel-Buffering"] = "no"  # a proxy in front must not hold the chunks back
    else:
        resp = turn.complete()
    resp.headers[SESSION_HEADER] = dialog.name
    return resp


class _Turn:
    """One accepted input waiting for its answer, as one completion or as a stream of chunks."""

    def __init__(self, rt: Runtime, watch: TurnWatch, events: Any, dialog: service.Dialog, seq: int, model: str,
                 include_usage: bool):
        self.rt, self.watch, self.events, self.dialog, self.seq = rt, watch, events, dialog, seq
        self.model, self.include_usage = model, include_usage
        self.id = "chatcmpl-" + secrets.token_hex(12)
        self.created = int(time.time())

    def _follow(self) -> Iterator[Any]:
        timeout = self.rt.config.gateway.openai_api.timeout_secs
        try:
            yield from service.follow(self.rt, self.watch, self.events, self.dialog.session_id, self.seq, timeout)
        finally:
            self.watch.unsubscribe(self.dialog.session_id, self.events)

    def complete(self) -> Response:
        try:
            found = next(item for item in self._follow() if isinstance(item, Answer))
        except ApiError as exc:
            return error_response(exc, self.dialog.name)
        except Exception as exc:
            return error_response(_failure(exc, "waiting for an answer"), self.dialog.name)
        problem = service.failure(found)
        if problem is not None:
            return error_response(problem, self.dialog.name)
        return jsonify(chunks.completion(self.id, self.model, self.created, found.text,
                                         chunks.usage(found.input_tokens, found.output_tokens)))

    def stream(self) -> Iterator[str]:
        """SSE chunks. A client that goes away stops only this generator: the turn goes on and its
        answer is stored in the dialog as for any other channel."""
        yield chunks.sse(self._chunk({"role": "assistant", "content": ""}))
        try:
            for item in self._follow():
                if isinstance(item, service.Delta):
                    yield chunks.sse(self._chunk({"content": item.text}))
                elif isinstance(item, service.Progress):
                    yield chunks.sse(chunks.progress_chunk(self.id, self.model, self.created, item.info))
                elif isinstance(item, Answer):
                    yield from self._end(item)
        except ApiError as exc:
            yield chunks.sse(exc.body())
        except Exception as exc:
            yield chunks.sse(_failure(exc, "streaming an answer").body())
        yield chunks.DONE

    def _end(self, found: Answer) -> Iterator[str]:
        problem = service.failure(found)
        if problem is not None:
            yield chunks.sse(problem.body())
            return
        yield chunks.sse(self._chunk({}, "stop"))
        if self.include_usage:
            yield chunks.sse(chunks.usage_chunk(self.id, self.model, self.created,
                                                chunks.usage(found.input_tokens, found.output_tokens)))

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return chunks.chunk(self.id, self.model, self.created, delta, finish)
