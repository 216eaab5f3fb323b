"""picobot.coord against a real Redis: one Lease semantics for every lock, and the key names."""

from __future__ import annotations

import time
from typing import Iterator

import pytest
import redis

from picobot.coord import KeptLease, Lease, held, keys


@pytest.fixture
def r(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


def test_one_holder_and_token_checked_renew_and_release(r: redis.Redis) -> None:
    a, b = Lease(r, "k", 5), Lease(r, "k", 5)
    assert a.acquire() and a.acquire()  # re-entrant for its own token
    assert not b.acquire() and not b.renew() and held(r, "k")
    assert a.is_held() and not b.is_held() and a.holder() == a.token
    b.release()  # not b's: stays a's
    assert r.get("k") == a.token
    a.release()
    assert not held(r, "k") and b.acquire()


def test_renew_retakes_a_vanished_key_only_when_asked(r: redis.Redis) -> None:
    strict, retaking = Lease(r, "s", 5), Lease(r, "t", 5, retake=True)
    assert strict.acquire() and retaking.acquire()
    r.flushall()
    assert not strict.renew() and not held(r, "s")
    assert retaking.renew() and retaking.is_held()
    other = Lease(r, "t2", 5, retake=True)
    r.set("t2", "someone-else")
    assert not other.renew() and r.get("t2") == "someone-else"  # never takes another holder's key


def test_renew_in_a_pipeline(r: redis.Redis) -> None:
    lease = Lease(r, "p", 5, retake=True)
    pipe = r.pipeline(transaction=False)
    lease.renew_in(pipe)
    assert pipe.execute() == [2]  # re-taken (it was never held)
    assert lease.is_held()


def test_a_kept_lease_renews_itself_and_notes_its_loss(r: redis.Redis) -> None:
    lease = KeptLease(r, "kept", 1.0, renew_secs=0.2)
    assert lease.acquire()
    time.sleep(1.5)  # past the TTL: only the thread keeps it
    assert lease.held and lease.is_held()
    r.set("kept", "taken")
    deadline = time.monotonic() + 3
    while lease.held and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lease.held
    lease.release()
    assert r.get("kept") == "taken"  # compare-and-delete: not ours any more


def test_key_names_are_unchanged() -> None:
    assert keys.lease("s") == "picobot:lease:s"
    assert keys.lane("feishu", "c") == "picobot:lane:feishu:c"
    assert keys.feishu_ws("app") == "picobot:feishu:ws:app"
    assert keys.channel_event(7) == "picobot:channel-event:7"
