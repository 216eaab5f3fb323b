"""The `delegates` section of config.json: coding CLIs the agent may hand a task to (picobot/delegates).

Each entry names a program and its arguments; one argument holds `{prompt}`, replaced by the task as
one argv element (never through a shell). Every value is checked here so a typo fails at start with
its key path (`delegates.claude.args`), not at the first call.
"""

from __future__ import annotations

import re
from typing import Any, Iterator

from pydantic import BaseModel, ConfigDict, Field, field_validator

from picobot.security.redact import masked_value

PROMPT = "{prompt}"
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,39}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class DelegateConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=lambda: [PROMPT])
    env: dict[str, str] = Field(default_factory=dict)
    timeout_secs: float = Field(default=600.0, gt=0, le=86_400, allow_inf_nan=False)
    max_output_chars: int = Field(default=50_000, gt=0, le=10_000_000, strict=True)
    cwd: str | None = None  # a folder inside the workspace; unset: a fresh folder under <workspace>/tasks/

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)

    @field_validator("command", "cwd")
    @classmethod
    def _plain_text(cls, value: str | None) -> str | None:
        if value is not None and ("\x00" in value or not value.strip()):
            raise ValueError("must be non-empty text without NUL characters")
        return value

    @field_validator("args")
    @classmethod
    def _has_prompt(cls, value: list[str]) -> list[str]:
        if any("\x00" in arg for arg in value):
            raise ValueError("an argument contains a NUL character")
        if not any(PROMPT in arg for arg in value):
            raise ValueError(f"one argument must hold {PROMPT}, where the task goes")
        return value

    @field_validator("env")
    @classmethod
    def _env_names(cls, value: dict[str, str]) -> dict[str, str]:
        for name, text in value.items():
            if not _ENV_NAME.fullmatch(name):
                raise ValueError(f"{name[:40]!r} is not a variable name (letters, digits, _; not starting with a digit)")
            if "\x00" in text:
                raise ValueError(f"the value of {name} contains a NUL character")
        return value

    @field_validator("timeout_secs", mode="before")
    @classmethod
    def _not_a_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a number of seconds, not true/false")
        return value


def check_delegate_names(value: dict[str, DelegateConfig]) -> dict[str, DelegateConfig]:
    for name in value:
        if not NAME.fullmatch(name):
            raise ValueError(f"{name[:40]!r} is not a delegate name (letters, digits, _ . -; at most 40)")
    return value
