"""The /ws protocol at its edges: bad frames, limits, commands, steering, content blocks, tool errors."""

from __future__ import annotations

import json
import uuid

from tests.conftest import add_rule
from tests.stack import Stack


def _history(c) -> list[dict]:  # type: ignore[no-untyped-def]
    c.send({"type": "history", "id": "hist"})
    return c.recv_until(lambda f: f.get("id") == "hist")["messages"]


def _still_usable(c) -> None:  # type: ignore[no-untyped-def]
    c.send({"type": "ping", "id": "p"})
    assert c.recv_until(lambda f: f.get("id") == "p")["type"] == "pong"


def test_malformed_frames_get_errors_and_the_socket_stays_usable(stack: Stack) -> None:
    c = stack.client()
    for raw, code in [("not json {", "bad_json"), ("[1, 2]", "bad_frame"), ('{"type": "dance"}', "unknown_type"),
                      ('{"type": "message", "content": 5}', "bad_frame"),
                      ('{"type": "message", "content": "x", "mode": "now"}', "bad_frame"),
                      ('{"type": "history", "limit": -1}', "bad_frame")]:
        c.send(raw)
        err = c.recv_until(lambda f: f["type"] == "error")
        assert err["code"] == code, (raw, err)
        _still_usable(c)
    c.send("x" * (1024 * 1024 + 10))
    err = c.recv_until(lambda f: f["type"] == "error")
    assert err["code"] == "frame_too_large" and "1048576" in err["error"]
    _still_usable(c)
    assert _history(c) == []


def test_oversize_message_is_rejected_with_the_limit_named(stack: Stack) -> None:
    c = stack.client()
    rej = c.say("y" * 32001)
    assert rej["type"] == "rejected" and rej["code"] == "too_large"
    assert "32000" in rej["error"] and "gateway.max_message_chars" in rej["error"]
    empty = c.say("   ")
    assert empty["type"] == "rejected" and empty["code"] == "empty"
    for frame_id, blocks in [("b1", [{"type": "script", "src": "x"}]), ("b2", [{"type": "script"}]), ("b3", []),
                             ("b4", [{"type": "text", "text": 5}]), ("b5", ["plain string"])]:
        c.send({"type": "message", "content": blocks, "id": frame_id})
        rej = c.recv_until(lambda f: f.get("id") == frame_id)
        assert rej["type"] == "rejected" and rej["code"] == "bad_content", (blocks, rej)
    assert _history(c) == []
    _still_usable(c)


def test_unknown_command_gets_help_and_no_model_call(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    reply = c.command("/frobnicate now")
    assert reply["type"] == "command" and reply["code"] == "unknown_command"
    assert "/new" in reply["text"] and "/stop" in reply["text"]
    assert llm.requests() == []


def test_dialog_commands(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    assert c.ask("first dialog message")["status"] == "completed"
    first = c.session_id
    new = c.command("/new Second topic")
    assert new["session_changed"] if "session_changed" in new else True
    switched = c.recv_until(lambda f: f["type"] == "session")
    second = switched["session"]["session_id"]
    assert second != first and switched["history"] == [] and switched["session"]["title"] == "Second topic"
    listed = c.command("/sessions")["data"]["sessions"]
    assert {s["session_id"] for s in listed} == {first, second}
    assert [s["current"] for s in listed if s["session_id"] == second] == [True]
    c.command("/rename Renamed topic")
    assert c.command("/info --json")["data"]["title"] == "Renamed topic"
    back = c.command(f"/switch {first.rsplit(':', 1)[1]}")
    assert back["data"]["session_id"] == first
    state = c.recv_until(lambda f: f["type"] == "session")
    assert [m["content"] for m in state["history"] if m["role"] == "user"] == ["first dialog message"]
    assert c.command("/switch nope")["code"] == "not_found"
    info = c.command("/info")
    assert "Context window" in info["text"] and info["data"]["input_tokens"] > 0
    dump = c.command("/dump")
    assert "first dialog message" in dump["data"]["markdown"]
    assert "/queue" in c.command("/help")["text"]
    assert "database" in c.command("/health")["data"]["checks"]
    archived = c.command("/archive")
    assert archived["data"]["session_id"] != first
    c.recv_until(lambda f: f["type"] == "session")
    assert first not in {s["session_id"] for s in c.command("/sessions")["data"]["sessions"]}
    deleted = c.command("/delete")
    assert deleted["type"] == "command"


def test_steering_injects_a_real_user_message_at_the_next_boundary(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "steer-base", {"tool_calls": [{"name": "get_time", "arguments": {}}], "delay_ms": 1500})
    add_rule(llm, "in French", {"content": "adjusted answer"})  # the fake matches the last user text
    c = stack.client()
    first = c.say("steer-base")
    c.recv_until(lambda f: f["type"] == "turn_updated" and first["seq"] in f["inbound_seqs"])
    steer = c.say("actually, in French please")
    assert steer["fate"] == "steered"
    done = c.wait_completed(first["seq"])
    assert done["final_text"] == "adjusted answer" and steer["seq"] in done["inbound_seqs"]
    second_call = llm.requests()[-1]["body"]["messages"]
    users = [m for m in second_call if m["role"] == "user"]
    assert users[-1]["content"] == "actually, in French please"
    roles = [m["role"] for m in second_call][-4:]
    assert roles == ["user", "assistant", "tool", "user"]  # injected after the complete tool batch
    hist = _history(c)
    assert [m["role"] for m in hist][-5:] == ["user", "assistant", "tool", "user", "assistant"]


def test_queue_waits_for_the_next_turn(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "queue-base", {"content": "base done", "delay_ms": 3000})
    c = stack.client()
    first = c.say("queue-base")
    c.recv_until(lambda f: f["type"] == "turn_updated" and first["seq"] in f["inbound_seqs"])
    queued = c.command("/queue later please")
    assert queued["type"] == "accepted" and queued["fate"] == "queued"
    a = c.wait_completed(first["seq"])
    b = c.wait_completed(queued["seq"])
    assert queued["seq"] not in a["inbound_seqs"] and b["turn_id"] != a["turn_id"]
    assert b["final_text"] == "You said: later please"


def test_unknown_tool_and_bad_arguments_give_errors_the_model_can_use(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    add_rule(llm, "bad-tools", {"tool_calls": [
        {"name": "teleport", "arguments": {"to": "mars"}},
        {"name": "calculator", "arguments": "{not json"},
        {"name": "calculator", "arguments": {"expr": "1+1"}},
    ]}, {"content": "I will fix my calls"})
    c = stack.client()
    done = c.ask("bad-tools")
    assert done["status"] == "completed" and done["final_text"] == "I will fix my calls"
    tools = [m for m in _history(c) if m["role"] == "tool"]
    assert len(tools) == 3 and all(t["is_error"] for t in tools)
    assert "teleport" in tools[0]["content"] and "calculator" in tools[0]["content"]
    assert "JSON" in tools[1]["content"]
    assert "expression" in tools[2]["content"]
    sent = llm.requests()[-1]["body"]["messages"]
    assert [m["role"] for m in sent][-3:] == ["tool", "tool", "tool"]


def test_image_blocks_reach_the_model_as_content_parts(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    blocks = [{"type": "text", "text": "what is in this picture"},
              {"type": "image_url", "url": "data:image/png;base64,iVBORw0KGgo="}]
    c.send({"type": "message", "content": blocks, "id": "img"})
    acc = c.recv_until(lambda f: f.get("id") == "img")
    assert c.wait_completed(acc["seq"])["status"] == "completed"
    user = [m for m in llm.requests()[-1]["body"]["messages"] if m["role"] == "user"][-1]
    kinds = [p["type"] for p in user["content"]]
    assert kinds == ["text", "image_url"]
    assert [m["content"] for m in _history(c) if m["role"] == "user"] == [blocks]


def test_agent_prompt_is_the_first_system_message(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    c.ask("hello prompt")
    sent = llm.requests()[-1]["body"]["messages"]
    assert sent[0]["role"] == "system" and "Current time" in sent[0]["content"]
    assert sent[1]["role"] == "system" and "PicoBot" in sent[1]["content"]
    hist = _history(c)
    assert hist[0]["role"] == "system" and hist[0]["marker"] == "agent_prompt"
    assert (stack.home / "agent" / "AGENT.md").exists()
    assert json.dumps(hist).count("agent_prompt") == 1


def test_tool_calls_of_one_response_run_concurrently(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    # each command waits for the other's file: run one after the other, the first would give up.
    # The files live in the workspace, the one folder every (sandboxed) bash call shares.
    tag = uuid.uuid4().hex[:8]
    a, b = f"rendezvous-{tag}-a", f"rendezvous-{tag}-b"
    wait = "for i in $(seq 100); do [ -f {peer} ] && echo met && exit 0; sleep 0.05; done; echo alone; exit 1"
    add_rule(llm, "rendezvous", {"tool_calls": [
        {"name": "bash", "arguments": {"command": f"touch {a}; " + wait.format(peer=b)}},
        {"name": "bash", "arguments": {"command": f"touch {b}; " + wait.format(peer=a)}},
    ]}, {"content": "both met"})
    c = stack.client()
    assert c.ask("rendezvous")["status"] == "completed"
    results = [m["content"] for m in _history(c) if m["role"] == "tool"]
    assert len(results) == 2 and all("met" in r and "alone" not in r for r in results), results


def test_closed_sockets_free_their_subscriptions(stack: Stack) -> None:
    clients = [stack.client() for _ in range(5)]
    opened = stack.health()["connections"]
    assert opened >= 5
    for c in clients:
        c.close()
    import time

    deadline = time.monotonic() + 10
    while stack.health()["connections"] > opened - 5:  # other tests' sockets may close too, never open
        assert time.monotonic() < deadline, "closed sockets stayed registered"
        time.sleep(0.1)


def test_stop_keeps_what_the_model_had_said(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    words = " ".join(f"w{i}" for i in range(200))
    add_rule(llm, "slow-talker", {"content": words, "chunk_delay_ms": 100})
    c = stack.client()
    acc = c.say("slow-talker")
    c.recv_until(lambda f: f["type"] == "turn_updated" and any(
        b["type"] == "text" and "w2" in b["text"] for b in f["blocks"]))
    c.command("/stop")
    done = c.wait_completed(acc["seq"], timeout=15)
    assert done["status"] == "cancelled"
    last = _history(c)[-1]
    assert last["role"] == "assistant" and last["marker"] == "turn_stopped"
    assert last["content"].startswith("w0 w1 w2") and last["content"].endswith("(stopped)")
    assert "w199" not in last["content"]
