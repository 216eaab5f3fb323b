"""Log line formats: `text` (the default) and `json` (one object a line), and the trace-id filter.

The redacting filter (picobot/logs/setup.py) runs first on the handler, so what these format is
already masked: the message, and the traceback in `exc_text`.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class TraceContextFilter(logging.Filter):
    """Adds `trace_id` and `span_id` (hex) to a record logged while a sampled span is current."""

    def __init__(self) -> None:
        super().__init__()
        try:
            from opentelemetry import trace
        except ImportError:
            self._current = None
        else:
            self._current = trace.get_current_span

    def filter(self, record: logging.LogRecord) -> bool:
        if self._current is not None:
            ctx = self._current().get_span_context()
            if ctx.is_valid:
                record.trace_id = format(ctx.trace_id, "032x")
                record.span_id = format(ctx.span_id, "016x")
        return True


class TextFormatter(logging.Formatter):
    """The text format, with ` trace_id=…` after the message while a span is current."""

    def __init__(self) -> None:
        super().__init__(TEXT_FORMAT)

    def formatMessage(self, record: logging.LogRecord) -> str:
        line = super().formatMessage(record)
        trace_id = getattr(record, "trace_id", None)
        return f"{line} trace_id={trace_id}" if trace_id else line


class JsonFormatter(logging.Formatter):
    """One JSON object a line: ts, level, logger, message, process, thread; trace_id/span_id; exc."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": _iso(record.created), "level": record.levelname, "logger": record.name,
            "message": record.getMessage(), "process": record.process, "thread": record.threadName,
        }
        for key in ("trace_id", "span_id"):
            value = getattr(record, key, None)
            if value:
                out[key] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            out["exc"] = record.exc_text
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return json.dumps(out, ensure_ascii=False, default=str)


def _iso(created: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(created)) + f".{int(created % 1 * 1000):03d}Z"


def formatter(fmt: str) -> logging.Formatter:
    return JsonFormatter() if fmt == "json" else TextFormatter()
