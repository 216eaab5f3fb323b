"""RedisLease: one holder at a time for a named job across processes (SET NX PX, renewed, token-checked).

The Feishu long connection takes `picobot:feishu:ws:<app_id>` with it, so however many
`picobot feishu` processes run, one of them holds the app's connection and the others wait.
A holder that dies stops renewing; its lease expires after `ttl_ms` and a standby takes it.
Renew and release only touch the key while it still holds this lease's random token
(picobot.coord.Lease; this module only keeps the Feishu names).
"""

from __future__ import annotations

import redis

from picobot.channels.feishu import keys
from picobot.coord import Lease

feishu_lock_key = keys.ws


class RedisLease(Lease):
    """picobot.coord's Lease with its TTL in milliseconds; renew() never re-takes a lost lease."""

    def __init__(self, client: redis.Redis, key: str, ttl_ms: int):
        super().__init__(client, key, ttl_ms / 1000)
        self.ttl_ms = ttl_ms  # exactly as given

    @property
    def client(self) -> redis.Redis:
        return self.r
