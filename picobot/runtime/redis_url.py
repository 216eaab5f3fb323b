"""Which Redis to use: REDIS_URL, else the local default, else what `picobot up` started."""

from __future__ import annotations

import os

from picobot.config import Config

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def resolve_redis_url(config: Config) -> str:
    return config.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL
