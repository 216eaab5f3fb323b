"""Which Redis and which task broker to use.

Redis: REDIS_URL, else the local default, else what `picobot up` started. The broker (where Celery
keeps the task queues): CELERY_BROKER_URL, else that same Redis. RabbitMQ (`amqp://`) works as the
broker; Redis is still needed for coordination (leases, live progress, heartbeats, the schedule).
"""

from __future__ import annotations

import os

from picobot.config import Config

DEFAULT_REDIS_URL = "redis://127.0.0.1:6379/0"


def resolve_redis_url(config: Config) -> str:
    return config.redis_url or os.environ.get("REDIS_URL") or DEFAULT_REDIS_URL


def resolve_broker_url(config: Config) -> str:
    return config.broker_url or os.environ.get("CELERY_BROKER_URL") or resolve_redis_url(config)
