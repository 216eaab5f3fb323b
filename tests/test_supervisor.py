"""The per-worker turn supervisor against a real Redis: renewal, /stop by turn id, release."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import redis

from picobot.domain.cancel import CancelToken
from picobot.coord import keys
from picobot.runtime import control
from picobot.runtime.lease import Lease


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def test_leases_are_renewed_while_watched_and_gone_after_release(r: redis.Redis) -> None:
    sup = control.TurnSupervisor(r, lease_secs=1.0)  # renewed every 1/3 s, expires after 1 s
    leases = [Lease(r, f"s{i}", 1.0) for i in range(5)]
    for i, lease in enumerate(leases):
        assert lease.acquire()
        sup.watch(f"t{i}", lease, CancelToken())
    time.sleep(2.0)  # twice the TTL: only renewal keeps them
    assert all(r.exists(lease.key) for lease in leases)
    for i, lease in enumerate(leases):
        sup.unwatch(f"t{i}")
        lease.release()
    time.sleep(1.0)  # several ticks: none may re-take a released lease
    assert not any(r.exists(lease.key) for lease in leases)
    sup.close()


def test_stop_names_turns_and_reaches_only_them(r: redis.Redis) -> None:
    sup = control.TurnSupervisor(r, lease_secs=30)
    stopped, running = CancelToken(), CancelToken()
    sup.watch("turn-a", Lease(r, "a", 30), stopped)
    sup.watch("turn-b", Lease(r, "b", 30), running)
    time.sleep(0.3)  # the listener subscribes
    control.request_stop(r, ["turn-a"])
    assert stopped.wait(2) and stopped.reason == "stopped"
    assert not running.wait(0.6)
    sup.close()


def test_a_stop_flag_without_its_message_is_still_seen(r: redis.Redis) -> None:
    sup = control.TurnSupervisor(r, lease_secs=30)
    token = CancelToken()
    r.set(keys.stop("turn-late"), "1")  # set while no worker listened (the pub/sub poke is gone)
    sup.watch("turn-late", Lease(r, "late", 30), token)
    assert token.wait(2)  # the polled flag
    sup.close()
