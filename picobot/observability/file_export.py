"""A span exporter that appends one JSON object per span to a file (`tracing.exporter: file`).

For tests and demos on one machine: every process appends to the same file, one line per write,
so lines never interleave. The shape follows OTLP/JSON's span fields, flattened:
trace_id, span_id, parent_span_id (hex), name, kind, start/end_time_unix_nano, attributes, status,
resource (its attributes).
"""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path
from typing import Any, Sequence

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult


class JsonLinesSpanExporter(SpanExporter):
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        data = "".join(json.dumps(span_dict(s), ensure_ascii=False, default=str) + "\n" for s in spans)
        try:
            with self._lock:
                fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
                try:
                    os.write(fd, data.encode())
                finally:
                    os.close(fd)
        except OSError:
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        return None


def span_dict(span: ReadableSpan) -> dict[str, Any]:
    ctx = span.get_span_context()
    if ctx is None:  # the SDK gives every span it exports one
        raise ValueError(f"span {span.name!r} has no context")
    parent = span.parent
    return {
        "trace_id": format(ctx.trace_id, "032x"), "span_id": format(ctx.span_id, "016x"),
        "parent_span_id": format(parent.span_id, "016x") if parent is not None else None,
        "name": span.name, "kind": span.kind.name if span.kind is not None else None,
        "start_time_unix_nano": span.start_time, "end_time_unix_nano": span.end_time,
        "attributes": dict(span.attributes or {}),
        "status": {"code": span.status.status_code.name, "description": span.status.description},
        "resource": dict(span.resource.attributes) if span.resource is not None else {},
    }
