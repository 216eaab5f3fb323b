"""OpenTelemetry set-up: one tracer provider per process, from `tracing` in config.json.

The packages are optional (`pip install 'picobot[otel]'`). With `tracing.enabled` and the packages
missing, the process starts anyway, logs one warning, and traces nothing. `setup()` is idempotent:
the composition root's plugin and the task system's edge (worker/tracing.py) both ask for it, and
the first caller builds it. OpenTelemetry's tracer provider is process-wide by design; we set it
once and keep our own handle for shutdown.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from pathlib import Path
from typing import Any

log = logging.getLogger("picobot.observability")

_lock = threading.Lock()
_state: dict[str, Any] = {}  # "tracer", "provider": built once per process (see the docstring)


def setup(config: Any) -> Any:
    """The process's tracer, or None when tracing is off or OpenTelemetry is not installed."""
    if not config.tracing.enabled:
        return None
    with _lock:
        if "tracer" not in _state:
            _state["tracer"], _state["provider"] = _build(config)
        return _state["tracer"]


def _build(config: Any) -> tuple[Any, Any]:
    try:
        from opentelemetry import trace
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.sampling import ParentBased, TraceIdRatioBased
    except ImportError:
        log.warning("tracing.enabled is true but the OpenTelemetry packages are not installed "
                    "(pip install 'picobot[otel]'); this process records no traces")
        return None, None
    t = config.tracing
    resource = Resource.create({"service.name": t.service_name,
                                "service.instance.id": f"{socket.gethostname()}:{os.getpid()}"})
    provider = TracerProvider(resource=resource, sampler=ParentBased(TraceIdRatioBased(t.sample_ratio)))
    processor = _processor(config)
    if processor is not None:
        provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)
    return provider.get_tracer("picobot"), provider


def _processor(config: Any) -> Any:
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter, SimpleSpanProcessor

    t = config.tracing
    if t.exporter == "none":
        return None  # spans are still made: their ids go into log lines and /info
    if t.exporter == "console":
        return BatchSpanProcessor(ConsoleSpanExporter())
    if t.exporter == "file":
        from picobot.observability.file_export import JsonLinesSpanExporter

        path = Path(t.file_path) if Path(t.file_path).is_absolute() else Path(config.home) / t.file_path
        return SimpleSpanProcessor(JsonLinesSpanExporter(path))  # written as each span ends: tests read it
    try:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    except ImportError:
        log.warning("tracing.exporter is otlp but opentelemetry-exporter-otlp-proto-http is not installed "
                    "(pip install 'picobot[otel]'); spans are made but not exported")
        return None
    return BatchSpanProcessor(OTLPSpanExporter(endpoint=t.endpoint, headers=dict(t.headers) or None))


def shutdown() -> None:
    """Flush and stop the exporter (the process is closing)."""
    with _lock:
        provider = _state.get("provider")
    if provider is not None:
        try:
            provider.shutdown()
        except Exception:  # an exporter that cannot reach its endpoint must not hold up the exit
            log.warning("tracing: the exporter did not shut down cleanly")


def ns(epoch_secs: float) -> int:
    return int(epoch_secs * 1e9)
