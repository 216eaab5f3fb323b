"""Chaos across two worker hosts that share no disk (tests/two_hosts.py), on SQLite and PostgreSQL:
a flood of chats, many senders in one chat, FLUSHALL mid-flood, kill -9 of a host mid-turn.

One stack per database runs the scenarios in order (the kill last). Each checks that nothing is
lost or answered twice, that each dialog's history keeps its order, and that the files the agent
wrote are found afterwards on the chat's host, or, when that host died, that the dialog says so.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import httpx
import pytest

from tests.conftest import add_rule
from tests.stack import WsClient, all_at_once, wait_for
from tests.two_hosts import HOSTS, OTHER, WORKER, TwoHosts
from tests.http_client import HTTP

pytestmark = pytest.mark.slow

CHATS = 40
ROUNDS = 3  # messages per chat in the flood, all sent at once
TAG = re.compile(r"<(\d\d)\.(\d)>")


@pytest.fixture(scope="module")
def hosts(tmp_path_factory: pytest.TempPathFactory, fake_llm, stack_database: str | None) -> Iterator[TwoHosts]:  # type: ignore[no-untyped-def]
    stack = TwoHosts(tmp_path_factory.mktemp("chaos2h"), fake_llm.url, database_url=stack_database)
    try:
        yield stack.start_hosts()
    finally:
        stack.stop()


@dataclass
class Flood:
    """The flood's chats (their sockets stay open for the later scenarios) and what it left."""

    clients: dict[str, WsClient]
    holders: dict[str, str]  # chat id -> host
    requests: list[dict[str, Any]] = field(default_factory=list)  # the model's requests during the flood


def _tag(i: int, k: int) -> str:
    return f"<{i:02d}.{k}>"  # unique in every message text: no tag is a substring of another


def _chat(i: int) -> str:
    return f"flood-{i:02d}"


def _file(i: int, k: int) -> str:
    return f"flood-{i:02d}-{k}.txt"


@pytest.fixture(scope="module")
def flood(hosts: TwoHosts, fake_llm) -> Iterator[Flood]:  # type: ignore[no-untyped-def]
    """40 chats × 3 messages sent at once over both hosts. Turn k of chat i reads the file turn k-1
    wrote and writes its own (`flood-<i>-<k>.txt`, "secret <i>.<k>"; a host's chats share its workspace)."""
    HTTP.delete(fake_llm.url + "/_fake/rules")
    for i in range(CHATS):
        for k in range(ROUNDS):
            calls = [{"name": "write", "arguments": {"path": _file(i, k), "content": f"secret {i:02d}.{k}"}}]
            if k:
                calls.insert(0, {"name": "read", "arguments": {"path": _file(i, k - 1)}})
            add_rule(fake_llm, _tag(i, k), {"tool_calls": calls}, {"content": f"done {i:02d}.{k}"}, repeat=True)
    clients = all_at_once(CHATS, lambda i: hosts.client(_chat(i)))
    by_chat = {c.chat_id: c for c in clients}

    def chat(i: int) -> None:  # the first message pins the chat; the next ones come at once, to an idle chat
        _converse(clients[i], [f"flood {_tag(i, 0)}"])
        _converse(clients[i], [f"flood {_tag(i, k)}" for k in range(1, ROUNDS)])

    all_at_once(CHATS, chat)
    result = Flood(by_chat, {chat: host for chat, (host, _) in hosts.holders().items() if chat in by_chat},
                   fake_llm.requests())
    try:
        yield result
    finally:
        for c in clients:
            c.close()


# --- the scenarios, in order -----------------------------------------------------------------


@pytest.mark.timeout(360)  # its setup starts the stack and runs the flood: minutes on a busy 2-core machine
def test_flood_every_message_answered_once_on_its_chats_host(hosts: TwoHosts, flood: Flood) -> None:
    assert sorted(flood.holders) == sorted(_chat(i) for i in range(CHATS))
    assert set(flood.holders.values()) == set(HOSTS), flood.holders  # new chats spread over both hosts
    for i in range(CHATS):
        chat, c = _chat(i), flood.clients[_chat(i)]
        holder = flood.holders[chat]
        _answered_once_on(hosts, c, holder, ROUNDS)
        assert _dialog(c) == [x for k in range(ROUNDS) for x in (("user", f"flood {_tag(i, k)}"),
                                                                  ("assistant", f"done {i:02d}.{k}"))]
        # the tools ran on the holder: every file there, none on the other host
        assert hosts.files(holder, chat) == {_file(i, k) for k in range(ROUNDS)}
        assert hosts.files(OTHER[holder], chat) == set()
    reads = _tool_results(flood.requests, lambda text: any(_tag(i, k) in text for i in range(CHATS)
                                                           for k in range(1, ROUNDS)))
    assert len(reads) == CHATS * (ROUNDS - 1)
    for asked, results in reads:  # each turn read the file its chat's turn before wrote
        i, k = map(int, TAG.findall(asked)[-1])
        assert f"secret {i:02d}.{k - 1}" in results[0], (asked, results)


def test_same_chat_many_senders_take_turns_one_at_a_time_on_its_host(hosts: TwoHosts, llm) -> None:  # type: ignore[no-untyped-def]
    senders, waves = 8, 3  # each wave: every sender at once, to an idle chat (its first task lands on either host)
    asked = [f"<crowd {w}.{j}>" for w in range(waves) for j in range(senders)]
    for q in asked:
        add_rule(llm, q, {"tool_calls": [{"name": "write", "arguments": {"path": f"crowd-{q[7:10]}.txt", "content": q}}]},
                 {"content": f"crowd ok {q[7:10]}", "delay_ms": 50}, repeat=True)
    watcher = hosts.client("crowd")
    clients = [hosts.client("crowd") for _ in range(senders)]
    try:
        for w in range(waves):
            accepted = all_at_once(senders, lambda j: clients[j].say(f"<crowd {w}.{j}>", mode="queue"))
            assert all(a["type"] == "accepted" for a in accepted), accepted
            seqs = {a["seq"] for a in accepted}
            assert seqs == set(range(w * senders + 1, (w + 1) * senders + 1))
            answered: set[int] = set()
            while answered != seqs:
                done = watcher.recv_until(lambda f: f["type"] == "turn_completed", timeout=60)
                assert done["status"] == "completed", done
                answered.update(done["inbound_seqs"])
        holder = hosts.host_of("crowd")
        assert holder in HOSTS
        turns = _answered_once_on(hosts, watcher, holder, len(asked))
        for before, after in zip(turns, turns[1:]):  # one turn at a time
            assert after["started_at"] >= before["finished_at"], (before, after)
        assert [s for t in turns for s in t["seqs"]] == list(range(1, len(asked) + 1))  # in the order accepted
        dialog = _dialog(watcher)
        stored = [text for role, text in dialog if role == "user"]
        assert sorted(stored) == sorted(asked)  # each stored once
        assert dialog == [x for q in stored for x in (("user", q), ("assistant", f"crowd ok {q[7:10]}"))]
        assert hosts.files(holder, "crowd-") == {f"crowd-{q[7:10]}.txt" for q in asked}
        assert hosts.files(OTHER[holder], "crowd-") == set()
    finally:
        for c in clients + [watcher]:
            c.close()


def test_flushall_mid_flood_loses_nothing_and_moves_no_chat(hosts: TwoHosts, flood: Flood, llm) -> None:  # type: ignore[no-untyped-def]
    k = ROUNDS  # one more message in every chat: read the flood's last file, slowly
    for i in range(CHATS):
        add_rule(llm, _tag(i, k), {"tool_calls": [{"name": "read", "arguments": {"path": _file(i, k - 1)}}],
                                   "delay_ms": 300},
                 {"content": f"done {i:02d}.{k}"}, repeat=True)
    before = hosts.holders()
    seen = threading.Event()

    def flush_when_busy() -> None:
        wait_for(lambda: len(llm.requests()) >= CHATS // 4, 60, "the flood never reached the model")
        hosts.redis().flushall()  # queued turns, forwarded turns, leases and the host set are gone
        seen.set()

    flusher = threading.Thread(target=flush_when_busy)
    flusher.start()
    all_at_once(CHATS, lambda i: _converse(flood.clients[_chat(i)], [f"flood {_tag(i, k)}"]))
    flusher.join()
    assert seen.is_set()
    assert hosts.holders() == before  # a flush never moves a chat
    for i in range(CHATS):
        chat, c = _chat(i), flood.clients[_chat(i)]
        _answered_once_on(hosts, c, flood.holders[chat], ROUNDS + 1)
        assert _dialog(c)[-4:] == [("user", f"flood {_tag(i, k - 1)}"), ("assistant", f"done {i:02d}.{k - 1}"),
                                   ("user", f"flood {_tag(i, k)}"), ("assistant", f"done {i:02d}.{k}")]
    reads = _tool_results(llm.requests(), lambda text: "flood <" in text)
    assert {TAG.findall(asked)[-1] for asked, _ in reads} == {(f"{i:02d}", str(k)) for i in range(CHATS)}
    for asked, results in reads:  # the files written before the flush are found
        i, _ = map(int, TAG.findall(asked)[-1])
        assert f"secret {i:02d}.{k - 1}" in results[0], (asked, results)


def test_flushall_while_a_host_is_a_beat_behind_moves_no_chat(hosts: TwoHosts, flood: Flood, llm) -> None:  # type: ignore[no-untyped-def]
    """The first host to beat after a flush must not judge the other dead: beta is stalled (SIGSTOP,
    well under the 7 s a host may miss beats) while alpha beats again and takes beta's chats' turns."""
    k = ROUNDS + 1
    for i in range(CHATS):
        add_rule(llm, _tag(i, k), {"content": f"done {i:02d}.{k}"}, repeat=True)
    before = hosts.holders()
    on_alpha = [chat for chat, host in flood.holders.items() if host == "alpha"]
    r = hosts.redis()
    hosts.pause_host("beta")
    try:
        r.flushall()
        wait_for(lambda: r.zscore("picobot:hosts", "alpha") is not None, 10, "alpha never beat after the flush")
        with ThreadPoolExecutor(1) as pool:
            talk = pool.submit(all_at_once, CHATS, lambda i: _converse(flood.clients[_chat(i)], [f"flood {_tag(i, k)}"]))
            try:  # alpha has taken its tasks (and seen beta's) when its own chats are answered; beta wakes by then
                wait_for(lambda: all(_answered(hosts, flood.clients[chat], ROUNDS + 2) for chat in on_alpha), 3, "")
            except TimeoutError:
                pass
            hosts.pause_host("beta", pause=False)
            talk.result()
    finally:
        hosts.pause_host("beta", pause=False)
    assert hosts.holders() == before  # beta was only a beat behind: none of its chats moved
    for i in range(CHATS):
        chat, c = _chat(i), flood.clients[_chat(i)]
        _answered_once_on(hosts, c, flood.holders[chat], ROUNDS + 2)
        assert _dialog(c)[-2:] == [("user", f"flood {_tag(i, k)}"), ("assistant", f"done {i:02d}.{k}")]


def test_kill_9_of_the_holding_host_mid_turn_moves_the_chat_and_reruns_it(hosts: TwoHosts, flood: Flood, llm) -> None:  # type: ignore[no-untyped-def]
    mover = _chat(0)
    victim = flood.holders[mover]
    survivor = OTHER[victim]
    bystanders = [chat for chat, host in sorted(flood.holders.items()) if host == survivor][:4]
    c = flood.clients[mover]
    add_rule(llm, "<slow one>", {"content": "never seen", "delay_ms": 8000}, {"content": "answered after the move"})
    for chat in bystanders:
        add_rule(llm, f"<while {chat} waits>", {"content": f"still here {chat}"})
    acc = c.say("<slow one>", mode="queue")
    wait_for(lambda: any("<slow one>" in json.dumps(r["body"].get("messages", [])[-1:]) for r in llm.requests()), 30,
             "the model never saw the turn")
    hosts.kill_host(victim)  # kill -9 the holding host's only worker, mid model call
    # the other host's chats are served meanwhile, where they are
    replies = all_at_once(len(bystanders), lambda j: flood.clients[bystanders[j]].ask(f"<while {bystanders[j]} waits>"))
    assert [r["final_text"] for r in replies] == [f"still here {chat}" for chat in bystanders]
    done = c.wait_completed(acc["seq"], timeout=90)
    assert done["status"] == "completed" and done["final_text"] == "answered after the move"
    holders = hosts.holders()
    assert holders[mover] == (survivor, victim)
    assert {chat: host for chat, host in holders.items() if chat != mover and chat in flood.holders} == \
        {chat: (host, None) for chat, host in flood.holders.items() if chat != mover}  # only the mover moved
    for chat in bystanders:
        assert [t["worker"].split("@")[0] for t in hosts.turns_of(flood.clients[chat].session_id)][-1] == WORKER[survivor]
    # rerun once, on the survivor; the message stored once and answered once
    turns = hosts.turns_of(c.session_id)
    last = [t for t in turns if acc["seq"] in t["seqs"]]
    assert [t["status"] for t in last] == ["interrupted", "completed"], last
    assert last[-1]["worker"].split("@")[0] == WORKER[survivor]
    history = _history(c)
    assert [m["content"] for m in history if m["role"] == "user"].count("<slow one>") == 1
    [note] = [m for m in history if m.get("marker") == "host_moved"]
    assert victim in str(note["content"]) and "not reachable" in str(note["content"])
    assert _dialog(c)[-2:] == [("user", "<slow one>"), ("assistant", "answered after the move")]
    rerun = [r for r in llm.requests() if "<slow one>" in json.dumps(r["body"].get("messages", []))][-1]
    told = [m for m in rerun["body"]["messages"] if m.get("role") == "system" and "not reachable" in str(m.get("content"))]
    assert told and victim in str(told[0]["content"])  # the agent knows the old files are gone
    info = c.command("/info --json")["data"]["worker_host"]
    assert (info["host"], info["moved_from"], info["alive"]) == (survivor, victim, True)
    assert f"moved from {victim}" in c.command("/info")["text"]


# --- helpers ---------------------------------------------------------------------------------


def _converse(c: WsClient, texts: list[str], timeout: float = 90) -> list[dict[str, Any]]:
    """Send every text at once (a turn each), then wait until each is answered; the turn_completed frames."""
    ids = [uuid.uuid4().hex[:8] for _ in texts]
    for fid, text in zip(ids, texts):
        c.send({"type": "message", "content": text, "mode": "queue", "id": fid})
    seqs = []
    for fid in ids:
        acc = next((f for f in c.frames if f.get("id") == fid), None) or c.recv_until(lambda f: f.get("id") == fid)
        assert acc["type"] == "accepted", acc
        seqs.append(acc["seq"])
    done = [c.wait_completed(seq, timeout) for seq in seqs]
    assert all(f["status"] == "completed" for f in done), done
    return done


def _answered_once_on(hosts: TwoHosts, c: WsClient, holder: str, messages: int) -> list[dict[str, Any]]:
    """Every message of the dialog answered by exactly one completed turn, each run by the holder's worker."""
    turns = hosts.turns_of(c.session_id)
    completed = [t for t in turns if t["status"] == "completed"]
    seqs = [s for t in completed for s in t["seqs"]]
    assert sorted(seqs) == list(range(1, messages + 1)), turns  # none lost, none answered twice
    assert {t["worker"].split("@")[0] for t in turns} == {WORKER[holder]}, turns
    return completed


def _answered(hosts: TwoHosts, c: WsClient, messages: int) -> bool:
    return sum(len(t["seqs"]) for t in hosts.turns_of(c.session_id) if t["status"] == "completed") >= messages


def _history(c: WsClient) -> list[dict[str, Any]]:
    fid = uuid.uuid4().hex[:8]
    c.send({"type": "history", "id": fid, "limit": 1000})
    return c.recv_until(lambda f: f.get("id") == fid)["messages"]


def _dialog(c: WsClient) -> list[tuple[str, str]]:
    """The dialog as the user sees it: user messages and the agent's answers, in order."""
    return [(m["role"], m["content"]) for m in _history(c)
            if m["role"] in ("user", "assistant") and isinstance(m.get("content"), str) and m["content"]]


def _tool_results(requests: list[dict[str, Any]], asked: Callable[[str], bool]) -> list[tuple[str, list[str]]]:
    """(the user text, the tool results) of each model request made after a turn's tools ran, for
    the turns whose user text `asked` accepts."""
    found = []
    for r in requests:
        msgs = r["body"].get("messages") or []
        if not msgs or msgs[-1].get("role") != "tool":
            continue
        user = next((str(m.get("content")) for m in reversed(msgs) if m.get("role") == "user"), "")
        if asked(user):
            last_call = max(n for n, m in enumerate(msgs) if m.get("role") == "assistant")
            found.append((user, [str(m.get("content")) for m in msgs[last_call + 1:]]))
    return found
