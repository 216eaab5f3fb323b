"""The `picobot.turn` message, published straight to the Redis list the workers read.

`Celery.send_task` costs the web about 0.3 ms of CPU per turn beyond the Redis round trip: option
and route resolution, `saferepr` of the arguments, a producer from the pool, kombu's publish
wrappers (docs/BENCHMARKS.md, the profile of a turn). A turn message never varies but for its id,
its session and its queue, so this module builds the same message Celery's protocol 2 and kombu's
Redis transport build (headers, body, properties; `tests/test_turn_message.py` compares the two)
and `LPUSH`es it onto the queue's list in one command. The worker consumes it as any other task.

Only for a plain `redis://`/`rediss://` broker on our transport without a key prefix, and without
tracing (which adds its trace context to the headers through Celery's publish signal): everywhere
else `send_task` is used as before. The message has no `parent_id` (a turn forwarded by another
task is not linked to it in Flower).
"""

from __future__ import annotations

import base64
import json
import os
import socket
import threading
import uuid
from typing import TYPE_CHECKING, Any

from picobot.config.home import DIRECT_REDIS_SCHEMES, url_scheme
from picobot.runtime.redis_url import resolve_broker_url
from picobot.runtime.task_names import TURN_TASK

if TYPE_CHECKING:  # the web publishes turns without importing Celery (worker/queue.py, CeleryTaskQueue.lazy)
    from celery import Celery

    from picobot.config import Config

ARGSREPR_MAXSIZE = 1024  # as Celery's AMQP.argsrepr_maxsize
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


def usable_for(config: "Config") -> bool:
    """What `usable` says of the app `worker.celery_app.make_celery(config)` makes, told from the config alone:
    that app uses our transport exactly for a redis:// or rediss:// broker, and never sets a key prefix."""
    return url_scheme(resolve_broker_url(config)) in DIRECT_REDIS_SCHEMES and not config.tracing.enabled


def usable(app: "Celery") -> bool:
    """The app publishes through our Redis transport (worker/broker.py), with nothing that would change
    a message on its way: no key prefix, no tracing headers."""
    conf = app.conf
    if conf.broker_transport != "worker.broker:Transport":
        return False
    if url_scheme(str(conf.broker_url or "")) not in DIRECT_REDIS_SCHEMES:
        return False
    if (conf.broker_transport_options or {}).get("global_keyprefix"):
        return False
    config = getattr(app, "picobot_config", None)
    return not (config is not None and config.tracing.enabled)


def build(session_id: str, queue: str, origin: str, reply_to: str) -> str:
    """The JSON text kombu's Redis transport would push for `send_task(TURN_TASK, args=[session_id], queue=queue)`."""
    task_id = str(uuid.uuid4())
    args = [session_id]
    body = json.dumps([args, {}, _EMBED]).encode()
    return json.dumps({
        "body": base64.b64encode(body).decode("ascii"),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py", "task": TURN_TASK, "id": task_id, "shadow": None, "eta": None, "expires": None,
            "group": None, "group_index": None, "retries": 0, "timelimit": [None, None], "root_id": task_id,
            "parent_id": None, "argsrepr": _argsrepr(args), "kwargsrepr": "{}", "origin": origin,
            "ignore_result": None, "replaced_task_nesting": 0, "stamped_headers": None, "stamps": {},
        },
        "properties": {
            "correlation_id": task_id, "reply_to": reply_to, "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue}, "priority": 0, "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    })


def _argsrepr(args: list[str]) -> str:
    """What Celery's `saferepr(args, ARGSREPR_MAXSIZE)` makes of a list of one string, without importing Celery
    (the web publishes turns without it): the string quoted as is but for its `'`, cut at the last space before
    the limit with `...` (celery.utils.saferepr `_format_chars` and celery.utils.text `truncate`;
    tests/test_turn_message.py compares the two on hostile and long strings)."""
    (text,) = args
    limit = ARGSREPR_MAXSIZE - 1  # after the "["
    if len(text) >= limit:
        text = text[:limit].rsplit(" ", 1)[0] + "..."
    return "['{}']".format(text.replace("'", "\\'"))


class TurnPublisher:
    """LPUSHes turn messages with one Redis client per process (rebuilt after a fork).

    `reply_to`: the app's `thread_oid`, as Celery fills in; without an app (the web's lazy queue) a random one
    per publisher, which nothing reads (turn tasks keep no result)."""

    def __init__(self, broker_url: str, reply_to: str | None = None):
        self.broker_url = broker_url
        self._client: Any = None
        self._pid = 0
        self._origin = ""
        self._lock = threading.Lock()
        self._reply_to = reply_to or str(uuid.uuid4())

    @classmethod
    def for_app(cls, app: "Celery") -> "TurnPublisher":
        return cls(str(app.conf.broker_url), str(app.thread_oid) if hasattr(app, "thread_oid") else "")

    def _redis(self) -> Any:
        pid = os.getpid()
        if self._client is None or self._pid != pid:
            with self._lock:
                if self._client is None or self._pid != pid:
                    import redis

                    self._client = redis.Redis.from_url(self.broker_url)
                    self._origin = f"gen{pid}@{socket.gethostname()}"  # as Celery's anon_nodename()
                    self._pid = pid
        return self._client

    def publish(self, session_id: str, queue: str) -> None:
        client = self._redis()
        client.lpush(queue, build(session_id, queue, self._origin, self._reply_to))
