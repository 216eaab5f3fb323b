"""The `metrics`, `tracing` and `logging` sections of config.json (picobot/observability reads them).

Kept out of schema.py so the observability capability's settings read in one place; schema.py only
names the three sections.
"""

from __future__ import annotations

from typing import Iterator, Literal, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

from picobot.security.redact import masked_value
from picobot.config.log_capture import LogCaptureConfig


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, protected_namespaces=())

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)


class MetricsConfig(_Strict):
    """Prometheus metrics: `GET /metrics` on the gateway, workers' samples through Redis."""

    enabled: bool = True
    publish_interval_secs: float = Field(default=2.0, ge=1.0, le=60.0)  # a worker's samples to Redis


class TracingConfig(_Strict):
    """OpenTelemetry traces (needs the `picobot[otel]` extra): one trace per turn."""

    enabled: bool = False
    exporter: Literal["otlp", "console", "file", "none"] = "otlp"
    endpoint: str = "http://127.0.0.1:4318/v1/traces"  # OTLP/HTTP (protobuf) traces endpoint
    headers: dict[str, str] = Field(default_factory=dict, repr=False)  # e.g. an API key of the backend
    file_path: str = "logs/traces.jsonl"  # exporter "file": one JSON span a line, relative to the home
    service_name: str = "picobot"
    sample_ratio: float = Field(default=1.0, ge=0.0, le=1.0)

    @field_validator("endpoint")
    @classmethod
    def _http(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")  # never echoed: it may carry a token
        return value


class LoggingConfig(_Strict):
    """How log lines are written (PICOBOT_LOG_FORMAT overrides `format`)."""

    format: Literal["text", "json"] = "text"
    capture: LogCaptureConfig = Field(default_factory=LogCaptureConfig)  # recent lines for the Logs page
