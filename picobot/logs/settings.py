"""The logging settings a process reads from its environment and config, checked before it starts.

Light on purpose: `picobot web|worker|beat|up` check them before starting anything (a bad value is one
line and exit 2), without importing the logging machinery itself (picobot/logs/setup.py).
"""

from __future__ import annotations

import os
from typing import Mapping

from picobot.config import Config
from picobot.errors import ConfigError

LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def log_level(environ: Mapping[str, str] | None = None) -> str:
    """PICOBOT_LOG_LEVEL (default INFO), upper-cased; anything but a level's name stops the start."""
    env = os.environ if environ is None else environ
    value = (env.get("PICOBOT_LOG_LEVEL") or "INFO").strip().upper()
    if value not in LEVELS:
        raise ConfigError("PICOBOT_LOG_LEVEL", f"must be one of {', '.join(LEVELS)}")
    return value


def log_format(config: Config) -> str:
    """`text` or `json`: PICOBOT_LOG_FORMAT, else `logging.format`; a bad value stops the start."""
    value = os.environ.get("PICOBOT_LOG_FORMAT", "").strip().lower() or config.logging.format
    if value not in ("text", "json"):
        raise ConfigError("PICOBOT_LOG_FORMAT", "must be text or json")
    return value


def check_logging_environment(config: Config) -> None:
    """Raise ConfigError for a bad PICOBOT_LOG_LEVEL or PICOBOT_LOG_FORMAT before a process starts."""
    log_level()
    log_format(config)
