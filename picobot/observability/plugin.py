"""The observability plugins: metrics and traces, each registered only when switched on.

    MetricsPlugin   (`metrics.enabled`, default on)  counts inputs, turns, model and tool calls;
                    a worker publishes its samples with each heartbeat; the gateway serves /metrics
    TracingPlugin   (`tracing.enabled`, default off) one trace per turn: intake span (web) -> task
                    span -> turn span -> a span per model call (GenAI conventions) and tool call

With neither on, no observation hook has an implementation and the core skips every call.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import Any, Callable

from picobot.observability import keys, publish, tracing
from picobot.observability.metrics import Metrics
from picobot.plugins import hookimpl

log = logging.getLogger("picobot.observability")

LAST_TRACE_TTL_SECS = 7 * 24 * 3600


def observability_plugins(config: Any) -> list[tuple[str, Any]]:
    """(name, plugin) for the composition root, each only when its config switches it on."""
    found: list[tuple[str, Any]] = []
    if config.metrics.enabled:
        found.append(("metrics", MetricsPlugin(config)))
    if config.tracing.enabled:
        found.append(("tracing", TracingPlugin(config)))
    return found


class MetricsPlugin:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.metrics = Metrics()
        self._last_publish = 0.0
        self._publish_failing = False

    @hookimpl
    def picobot_input_received(self, ctx: Any) -> Callable[..., None]:
        channel = ctx.channel

        def done(session_id: str | None, fate: str | None) -> None:
            self.metrics.input(channel, fate or "error")

        return done

    @hookimpl
    def picobot_turn_started(self, ctx: Any, queued_at: float | None) -> None:
        self.metrics.turn_started(ctx.turn_id, ctx.channel, queued_at or time.time())

    @hookimpl
    def picobot_turn_ended(self, ctx: Any, status: str) -> None:
        self.metrics.turn_ended(ctx.turn_id, ctx.channel, status, time.time())

    @hookimpl
    def picobot_model_call(self, ctx: Any, call: Any) -> None:
        self.metrics.model_call(ctx.turn_id, call)

    @hookimpl
    def picobot_tool_call(self, call: Any) -> None:
        self.metrics.tool_call(call)

    @hookimpl
    def picobot_heartbeat(self, ports: Any) -> None:
        interval = self.config.metrics.publish_interval_secs
        now = time.monotonic()
        if now - self._last_publish < interval - 0.05:
            return
        self._last_publish = now
        try:
            publish.publish(ports.redis, ports.worker_name, self.metrics.registry, interval)
        except Exception as exc:  # Redis away: the heartbeat says so already; one line per outage here
            if not self._publish_failing:
                log.warning("metrics: this worker's samples could not be published (%s); retrying every %gs",
                            type(exc).__name__, interval)
            self._publish_failing = True
        else:
            self._publish_failing = False


class _Open:
    """A span this process opened and made current in the thread that will close it."""

    __slots__ = ("span", "token")

    def __init__(self, span: Any, token: Any) -> None:
        self.span, self.token = span, token


class TracingPlugin:
    def __init__(self, config: Any) -> None:
        self.config = config
        self._turns: dict[str, _Open] = {}
        self._lock = threading.Lock()

    def _tracer(self) -> Any:
        return tracing.setup(self.config)  # built on first use: after gunicorn's fork, not in `picobot config`

    @hookimpl
    def picobot_input_received(self, ctx: Any, ports: Any) -> Callable[..., None] | None:
        tracer = self._tracer()
        if tracer is None:
            return None
        from opentelemetry import context, trace

        span = tracer.start_span(f"intake {ctx.channel}", kind=trace.SpanKind.SERVER,
                                 attributes={"picobot.channel": ctx.channel, "picobot.chat_id": ctx.chat_id})
        opened = _Open(span, context.attach(trace.set_span_in_context(span)))

        def done(session_id: str | None, fate: str | None) -> None:
            try:
                span.set_attribute("picobot.fate", fate or "error")
                if session_id:
                    span.set_attribute("picobot.session_id", session_id)
                    _remember_trace(ports, session_id, span)
            finally:
                _close(opened)

        return done

    @hookimpl
    def picobot_turn_started(self, ctx: Any) -> None:
        tracer = self._tracer()
        if tracer is None:
            return
        from opentelemetry import context, trace

        span = tracer.start_span(f"invoke_agent {ctx.agent}", attributes={
            "gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": ctx.agent,
            "picobot.session_id": ctx.session_id, "picobot.turn_id": ctx.turn_id, "picobot.channel": ctx.channel})
        with self._lock:
            self._turns[ctx.turn_id] = _Open(span, context.attach(trace.set_span_in_context(span)))

    @hookimpl
    def picobot_turn_ended(self, ctx: Any, status: str) -> None:
        with self._lock:
            opened = self._turns.pop(ctx.turn_id, None)
        if opened is None:
            return
        opened.span.set_attribute("picobot.turn.status", status)
        if status == "failed":
            from opentelemetry.trace import Status, StatusCode

            opened.span.set_status(Status(StatusCode.ERROR, "the turn failed"))
        _close(opened)

    @hookimpl
    def picobot_model_call(self, ctx: Any, call: Any) -> None:
        provider_cfg = self.config.providers.get(call.provider)
        system = provider_cfg.type if provider_cfg is not None else call.provider
        attributes = {
            "gen_ai.operation.name": "chat", "gen_ai.provider.name": system, "gen_ai.system": system,
            "gen_ai.request.model": call.model, "gen_ai.usage.input_tokens": call.input_tokens,
            "gen_ai.usage.output_tokens": call.output_tokens, "picobot.provider": call.provider,
        }
        if call.cached_input_tokens:
            attributes["gen_ai.usage.cache_read.input_tokens"] = call.cached_input_tokens
        if call.finish_reason:
            attributes["gen_ai.response.finish_reasons"] = (call.finish_reason,)
        if call.first_token_secs is not None:
            attributes["picobot.first_token_secs"] = round(call.first_token_secs, 6)
        self._child(ctx, f"chat {call.model}", call.started_at, call.duration_secs, attributes, call.error, True)

    @hookimpl
    def picobot_tool_call(self, ctx: Any, call: Any) -> None:
        attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": call.name,
                      "gen_ai.tool.call.id": call.id, "picobot.tool.outcome": call.outcome}
        error = None if call.outcome == "ok" else call.outcome
        self._child(ctx, f"execute_tool {call.name}", call.started_at, call.duration_secs, attributes, error, False)

    def _child(self, ctx: Any, name: str, started: float, duration: float, attributes: dict[str, Any],
               error: str | None, client: bool) -> None:
        """A finished span under the turn's span (made after the fact, so nothing is held open)."""
        tracer = self._tracer()
        if tracer is None:
            return
        from opentelemetry import trace
        from opentelemetry.trace import Status, StatusCode

        with self._lock:
            opened = self._turns.get(ctx.turn_id)
        parent = trace.set_span_in_context(opened.span) if opened is not None else None
        kind = trace.SpanKind.CLIENT if client else trace.SpanKind.INTERNAL
        span = tracer.start_span(name, context=parent, kind=kind, attributes=attributes, start_time=tracing.ns(started))
        if error:
            span.set_attribute("error.type", error)
            span.set_status(Status(StatusCode.ERROR, error))
        span.end(end_time=tracing.ns(started + duration))

    @hookimpl
    def picobot_session_info(self, session_id: str, ports: Any) -> dict[str, Any] | None:
        try:
            trace_id = ports.redis.get(keys.last_trace(session_id))
        except Exception:  # Redis away: /info answers without it
            return None
        return {"last_trace_id": trace_id} if trace_id else None

    @hookimpl
    def picobot_close(self) -> None:
        tracing.shutdown()


def _remember_trace(ports: Any, session_id: str, span: Any) -> None:
    """The dialog's latest trace id, for /info (any web process may answer it)."""
    ctx = span.get_span_context()
    if not ctx.trace_flags.sampled:
        return
    try:
        ports.redis.set(keys.last_trace(session_id), format(ctx.trace_id, "032x"), ex=LAST_TRACE_TTL_SECS)
    except Exception as exc:  # never fails the input: the trace is a by-product
        log.debug("tracing: last trace id not stored (%s)", type(exc).__name__)


def _close(opened: _Open) -> None:
    from opentelemetry import context

    try:
        context.detach(opened.token)
    finally:
        opened.span.end()
