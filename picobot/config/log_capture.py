"""`logging.capture`: how many recent log lines every process copies to Redis for the Logs page."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class LogCaptureConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    enabled: bool = True
    level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = "INFO"  # and above (never below PICOBOT_LOG_LEVEL)
    max_lines: int = Field(default=10_000, ge=100, le=1_000_000)  # the stream keeps about this many, all processes
    max_message_chars: int = Field(default=4_000, ge=200, le=100_000)  # longer messages are cut (marked truncated)

    @field_validator("level", mode="before")
    @classmethod
    def _upper(cls, value: Any) -> Any:
        return value.upper() if isinstance(value, str) else value

    @field_validator("max_lines", "max_message_chars", mode="before")
    @classmethod
    def _whole_number(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read true as 1
            raise ValueError("must be a whole number, not true/false")
        return value
