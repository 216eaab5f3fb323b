"""Logging with secrets redacted from every record, whoever logs it."""

from __future__ import annotations

import logging
import sys

from picobot.config import Config
from picobot.config.secrets import secret_values
from picobot.logs.settings import log_format, log_level
from picobot.observability.logs import TraceContextFilter, formatter
from picobot.logstream.capture import install_capture
from picobot.security.redact import redact


class RedactingFilter(logging.Filter):
    def __init__(self, secrets: set[str]):
        super().__init__()
        self.secrets = sorted(secrets, key=len, reverse=True)  # sorted once, not per record

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:
            return True
        clean = redact(message, self.secrets)
        if clean != message or record.exc_info:
            if record.exc_info:
                # formatters print exc_text when it is set, so the traceback goes out redacted; exc_info
                # stays for the handlers that come after this one (pytest's caplog, an error tracker)
                record.exc_text = redact(logging.Formatter().formatException(record.exc_info), self.secrets)
            record.msg, record.args = clean, None
        return True


class _StderrHandler(logging.StreamHandler):
    """The root handler setup_logging installs, found again when it runs a second time."""


def setup_logging(config: Config, level: str | None = None) -> None:
    """Root handler to stderr with the redacting filter on it (handlers see every logger's records)."""
    level = level or log_level()
    root = logging.getLogger()
    secrets = secret_values(config)
    install_capture(config, RedactingFilter(secrets))  # recent lines to Redis for the Logs page
    for handler in root.handlers:
        if isinstance(handler, _StderrHandler):
            handler.filters[:] = _filters(config, secrets)
            handler.setFormatter(formatter(log_format(config)))
            return
    handler = _StderrHandler(sys.stderr)
    handler.setFormatter(formatter(log_format(config)))  # text, or json (logging.format, PICOBOT_LOG_FORMAT)
    handler.filters[:] = _filters(config, secrets)
    root.addHandler(handler)
    root.setLevel(level.upper())
    # httpx2 (the SDKs' HTTP client) logs every request at INFO: a line per model call, through the
    # redacting filter and into the captured stream
    for noisy in ("httpx", "httpx2", "httpcore", "openai", "anthropic"):
        logging.getLogger(noisy).setLevel(logging.WARNING)




def _filters(config: Config, secrets: set[str]) -> list[logging.Filter]:
    """Redaction first (what is formatted is masked); the trace ids when tracing is on."""
    found: list[logging.Filter] = [RedactingFilter(secrets)]
    if config.tracing.enabled:
        found.append(TraceContextFilter())
    return found

