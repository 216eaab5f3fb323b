"""Where PicoBot lives, and the settings computed at start rather than read from config.json.

Free of pydantic, so a client that only needs the home and the gateway address (`picobot chat`)
can find them without paying for the schema.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

DEFAULT_HOME = "~/.picobot"

# Keys of Config that the loader computes; a config file may not set them.
RUNTIME_KEYS = ("home", "config_path", "database_url", "redis_url", "broker_url")

# Task brokers PicoBot runs on: Redis (the default) or RabbitMQ (CELERY_BROKER_URL)
REDIS_SCHEMES = ("redis", "rediss", "sentinel")
DIRECT_REDIS_SCHEMES = ("redis", "rediss")  # a Redis server by its own address (not found through sentinel)
AMQP_SCHEMES = ("amqp", "amqps", "pyamqp")


def url_scheme(url: str) -> str:
    return url.split("://", 1)[0].lower() if "://" in url else ""


def picobot_home(environ: Mapping[str, str] | None = None) -> Path:
    """`$PICOBOT_HOME` or `~/.picobot`, made absolute (the gateway later chdirs)."""
    env = os.environ if environ is None else environ
    return Path(env.get("PICOBOT_HOME") or DEFAULT_HOME).expanduser().absolute()


def default_database_url(home: Path) -> str:
    """SQLite in the home: the database when DATABASE_URL is not set."""
    return f"sqlite:///{home / 'data' / 'picobot.db'}"
