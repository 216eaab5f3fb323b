"""One check for a channel type's own config section: its pydantic model, then its `problems()`."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ValidationError

from picobot.errors import ConfigError

M = TypeVar("M", bound=BaseModel)


def check_section(model: type[M], key: str, data: dict[str, Any]) -> M:
    """`channels.<key>` as `model`; ConfigError names the key path of the first problem."""
    try:
        cfg = model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        if error["type"] == "extra_forbidden":
            reason = f"unknown key (known: {', '.join(sorted(model.model_fields))})"
        else:
            reason = error["msg"].removeprefix("Value error, ")
        raise ConfigError(f"channels.{key}.{where}", reason) from None
    problems = getattr(cfg, "problems", None)
    for name, reason in problems() if callable(problems) else []:
        raise ConfigError(f"channels.{key}.{name}", reason)
    return cfg
