"""picobot.coord against a real Redis: one Lease semantics for every lock, and the key names."""

from __future__ import annotations

import ast
import re
import time
from pathlib import Path
from typing import Iterator

import pytest
import redis

from picobot.approvals import keys as approval_keys
from picobot.budgets import keys as budget_keys
from picobot.channels import keys as channel_keys
from picobot.channels.feishu import keys as feishu_keys
from picobot.channels.telegram import keys as telegram_keys
from picobot.channels.wechat import keys as wechat_keys
from picobot.coord import KeptLease, Lease, held, keys
from picobot.mcp import keys as mcp_keys
from picobot.memory import keys as memory_keys
from picobot.observability import keys as observability_keys
from picobot.scheduler import keys as scheduler_keys
from picobot.subagents import keys as subagent_keys


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
    """A running deployment keeps its keys: moving a key to its capability's package keeps its string."""
    assert keys.lease("s") == "picobot:lease:s"
    assert channel_keys.lane("feishu", "c") == "picobot:lane:feishu:c"
    assert channel_keys.lane_kick("feishu", "c") == "picobot:lane-kick:feishu:c"
    assert channel_keys.channel_event(7) == "picobot:channel-event:7"
    assert channel_keys.channel_event_kick(7) == "picobot:channel-event-kick:7"
    assert channel_keys.live_claim("t") == "picobot:live:t"
    assert [feishu_keys.ws("app"), feishu_keys.token("app"), feishu_keys.card("t"), feishu_keys.card_lock("c"),
            feishu_keys.card_seq("c"), feishu_keys.reaction("t")] == [
        "picobot:feishu:ws:app", "picobot:feishu:token:app", "picobot:feishu:card:t", "picobot:feishu:cardlock:c",
        "picobot:feishu:cardseq:c", "picobot:feishu:reaction:t"]
    assert [telegram_keys.poll("b"), telegram_keys.status("ch"), telegram_keys.me("b"), telegram_keys.live("t"),
            telegram_keys.setup("b", "webhook"), telegram_keys.live_lock("t")] == [
        "picobot:telegram:poll:b", "picobot:telegram:status:ch", "picobot:telegram:me:b", "picobot:telegram:live:t",
        "picobot:telegram:setup:b:webhook", "picobot:telegram:livelock:t"]
    assert [wechat_keys.poll("ch"), wechat_keys.status("ch"), wechat_keys.typing("ch", "u")] == [
        "picobot:wechat:poll:ch", "picobot:wechat:status:ch", "picobot:wechat:typing:ch:u"]
    assert observability_keys.last_trace("s") == "picobot:trace:last:s"
    assert (observability_keys.METRICS_PREFIX, observability_keys.METRICS_INDEX) == (
        "picobot:metrics:", "picobot:metrics:index")
    assert approval_keys.approval("a") == "picobot:approval:a"
    assert mcp_keys.STATUS_PREFIX == "picobot:mcp:"
    assert subagent_keys.run_requeued("r") == "picobot:subagent:requeued:r"
    assert memory_keys.MAINTENANCE_LOCK == "picobot:memory_maintenance"
    assert scheduler_keys.RUN_PREFIX == "picobot:scheduler:run:"
    assert budget_keys.BUDGET_PREFIX == "picobot:budget:"


CAPABILITY_WORDS = {"feishu", "telegram", "wechat", "qq", "approval", "trace", "mcp", "memory", "scheduler",
                    "subagent", "webhook"}


def test_the_kernel_key_registry_names_no_capability() -> None:
    """Capabilities keep their keys in their own packages: coord/keys.py names none, in a name or a key."""
    tree = ast.parse(Path(keys.__file__).read_text(encoding="utf-8"))
    names = [n.name for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)]
    names += [t.id for n in ast.walk(tree) if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)]
    strings = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    words = {w for name in names for w in name.lower().split("_")}
    words |= {w for s in strings if s.startswith("picobot:") for w in re.split(r"[^a-z]+", s.lower())}
    assert not words & CAPABILITY_WORDS
