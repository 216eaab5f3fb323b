"""Invariant 2: one session runs one turn at a time, in acceptance order; others are not blocked."""

from __future__ import annotations

import threading
from typing import Iterator

import pytest

from tests.conftest import add_rule
from tests.stack import Stack

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_workers(tmp_path_factory: pytest.TempPathFactory, fake_llm, stack_database) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    s = Stack(tmp_path_factory.mktemp("two"), fake_llm.url, database_url=stack_database)
    try:
        s.start(workers=2)
        yield s
    finally:
        s.stop()


def test_many_senders_to_one_session_never_overlap(two_workers: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "burst-", {"content": "ok", "delay_ms": 300}, repeat=True)
    watcher = two_workers.client("burst-chat")
    senders = [two_workers.client("burst-chat") for _ in range(20)]
    seqs: list[int] = []
    lock = threading.Lock()
    gate = threading.Barrier(len(senders))

    def send(i: int) -> None:
        gate.wait()
        acc = senders[i].say(f"burst-{i}", mode="queue")  # queue: one turn per message
        assert acc["type"] == "accepted"
        with lock:
            seqs.append(acc["seq"])

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(senders))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(seqs) == list(range(1, 21))
    answered: set[int] = set()
    while answered != set(seqs):
        done = watcher.recv_until(lambda f: f["type"] == "turn_completed", timeout=120)
        assert done["status"] == "completed"
        answered.update(done["inbound_seqs"])
    calls = sorted(r["time"] for r in llm.requests() if "burst-" in str(r["body"]["messages"][-1]))
    assert len(calls) == 20
    gaps = [b - a for a, b in zip(calls, calls[1:])]
    assert min(gaps) >= 0.28, f"two model calls of one session overlapped: gaps {gaps}"
    watcher.send({"type": "history", "id": "h", "limit": 1000})
    hist = watcher.recv_until(lambda f: f.get("id") == "h")["messages"]
    users = [int(m["content"].split("-")[1]) for m in hist if m["role"] == "user"]
    assert len(users) == 20 and len(set(users)) == 20  # each stored exactly once
    for c in senders + [watcher]:
        c.close()


def test_a_busy_session_does_not_block_others(two_workers: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "slow-session", {"content": "slow done", "delay_ms": 4000})
    slow = two_workers.client()
    fast = two_workers.client()
    acc = slow.say("slow-session")
    slow.recv_until(lambda f: f["type"] == "turn_updated" and acc["seq"] in f["inbound_seqs"])
    assert fast.ask("quick one")["status"] == "completed"
    # ordering, not a stopwatch: the other session finished while the slow turn still runs
    slow.send({"type": "history", "id": "h-slow", "limit": 1})
    assert slow.recv_until(lambda f: f.get("id") == "h-slow")["active_turn"] is not None
    assert slow.wait_completed(acc["seq"])["final_text"] == "slow done"
