"""How many tasks wait in each task queue, on either broker PicoBot runs on.

Redis (kombu's transport): a queue is the list named after it plus one list per priority step
(`<queue>\\x06\\x16<step>`); a depth is their sum. RabbitMQ: a passive `queue.declare` answers
with the queue's ready-message count (a queue nobody declared yet holds nothing). The core may
not import kombu, so RabbitMQ is read with py-amqp, the client kombu itself uses.
"""

from __future__ import annotations

import threading
from typing import Any, Iterable
from urllib.parse import unquote, urlsplit

import redis

from picobot.config import Config
from picobot.config.home import AMQP_SCHEMES, url_scheme
from picobot.runtime.redis_url import resolve_broker_url, resolve_redis_url

PRIORITY_SEP = "\x06\x16"
PRIORITY_STEPS = (0, 3, 6, 9)  # kombu's default priority_steps
AMQP_TIMEOUT_SECS = 5.0

_clients: dict[str, redis.Redis] = {}
_clients_lock = threading.Lock()


def configured_depths(config: Config, queues: Iterable[str], redis_client: Any) -> dict[str, int]:
    """`queue_depths` on the configured broker; `redis_client` (the coordination Redis) serves when the
    broker is that same Redis."""
    broker = resolve_broker_url(config)
    return queue_depths(broker, queues, redis_client if broker == resolve_redis_url(config) else None)


def queue_depths(broker_url: str, queues: Iterable[str], redis_client: Any = None) -> dict[str, int]:
    """{queue: waiting tasks}. `redis_client` is used when the broker is that same Redis."""
    names = list(queues)
    if url_scheme(broker_url) in AMQP_SCHEMES:
        return _amqp_depths(broker_url, names)
    client = redis_client if redis_client is not None else _redis_client(broker_url)
    pipe = client.pipeline(transaction=False)
    for queue in names:
        for step in PRIORITY_STEPS:
            pipe.llen(queue if not step else f"{queue}{PRIORITY_SEP}{step}")
    sizes = pipe.execute()
    n = len(PRIORITY_STEPS)
    return {queue: sum(int(s or 0) for s in sizes[i * n:(i + 1) * n]) for i, queue in enumerate(names)}


def _redis_client(url: str) -> redis.Redis:
    with _clients_lock:
        client = _clients.get(url)
        if client is None:
            client = _clients[url] = redis.Redis.from_url(url, socket_timeout=5, socket_connect_timeout=5)
        return client


def amqp_connection_args(url: str) -> dict[str, Any]:
    """py-amqp Connection arguments for a kombu-style URL (`amqp://user:pass@host:5672//` = vhost "/")."""
    u = urlsplit(url)
    path = u.path[1:] if u.path.startswith("/") else u.path
    return {
        "host": f"{u.hostname or 'localhost'}:{u.port or (5671 if url_scheme(url) == 'amqps' else 5672)}",
        "userid": unquote(u.username or "guest"),
        "password": unquote(u.password or "guest"),
        "virtual_host": unquote(path) or "/",
        "ssl": url_scheme(url) == "amqps",
        "connect_timeout": AMQP_TIMEOUT_SECS,
        "read_timeout": AMQP_TIMEOUT_SECS,
        "write_timeout": AMQP_TIMEOUT_SECS,
    }


def _amqp_depths(url: str, queues: list[str]) -> dict[str, int]:
    import amqp

    depths: dict[str, int] = {}
    conn = amqp.Connection(**amqp_connection_args(url))
    conn.connect()
    try:
        channel = conn.channel()
        for queue in queues:
            try:
                _, count, _ = channel.queue_declare(queue, passive=True)
                depths[queue] = int(count)
            except amqp.exceptions.NotFound:  # never declared: empty (the broker closed the channel)
                depths[queue] = 0
                channel = conn.channel()
    finally:
        conn.close()
    return depths
