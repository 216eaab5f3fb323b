"""kombu's Redis transport, with one publishing client per channel instead of one per message.

kombu builds a new `redis.Redis` for every publish (`Channel.conn_or_acquire`), and redis-py 8
copies its ~170 response callbacks into a fresh case-insensitive dict for each one: about 0.35 ms
of CPU per message, paid by the web for every turn it enqueues and by the worker for every task
event. The client is only a handle on the channel's connection pool, so one is enough; it is
rebuilt whenever kombu replaces the pool (reconnects, forks). Everything else is kombu's.

Selected with `broker_transport = "worker.broker:Transport"` (worker/celery_app.py) for `redis://`
and `rediss://` broker URLs; other schemes (e.g. `sentinel://`) keep kombu's own transport.

`OutboundFirstCycle` (the `queue_order_strategy`) makes a worker's BRPOP look at the `outbound`
queue first and at the others round-robin, as kombu does by default. Outbound tasks are short
(a reply already written, a platform event to record), so they never starve the rest; without
it, under a backlog a finished turn's reply waited behind every turn queued before it.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.utils.scheduling import round_robin_cycle

from picobot.runtime.task_names import QUEUE_OUTBOUND


class OutboundFirstCycle(round_robin_cycle):
    def consume(self, n: int) -> list[str]:
        items = super().consume(n)
        return sorted(items, key=lambda queue: queue != QUEUE_OUTBOUND)  # stable: the rest keep their turn


class Channel(kombu_redis.Channel):
    _publish_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:
            return super()._create_client(asynchronous=True)
        client = self._publish_client
        if client is None or client.connection_pool is not self.pool:
            client = self._publish_client = super()._create_client(asynchronous=False)
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
