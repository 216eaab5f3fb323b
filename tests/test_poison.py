"""Poison input: text nothing downstream can encode, and input that fails every time it is tried.

No input may wedge its dialog (DESIGN invariant 9): such text is repaired at intake (and again
when a turn claims it), and an input whose turn keeps failing inside the worker is tried
`gateway.max_turn_attempts` times, then ends as a visible failed turn; the dialog goes on.
"""

from __future__ import annotations

import json
import sqlite3
import time
from typing import Any

import httpx
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot.domain.text import REPLACEMENT, repair_content, repair_text, sendable_content
from tests.stack import Stack
from tests.http_client import HTTP

LONE = "\ud800"


def _add_rule(llm, match: str, response: dict[str, Any]) -> None:  # type: ignore[no-untyped-def]
    # json.dumps escapes a lone surrogate as \ud800; httpx's json= would refuse to encode it
    body = json.dumps({"match": match, "responses": [response], "repeat": True})
    HTTP.post(llm.url + "/_fake/rules", content=body, headers={"content-type": "application/json"}).raise_for_status()


def _user_texts_sent(llm, needle: str) -> list[str]:  # type: ignore[no-untyped-def]
    """Last user message of every model request that mentions needle anywhere."""
    return [json.dumps(r["body"]["messages"][-1]) for r in llm.requests() if needle in json.dumps(r["body"])]


def _stored_input(stack: Stack, session_id: str, seq: int) -> Any:
    db = sqlite3.connect(stack.home / "data" / "picobot.db", timeout=30)
    try:
        row = db.execute("SELECT content FROM inbound WHERE session_id = ? AND seq = ?", (session_id, seq)).fetchone()
    finally:
        db.close()
    return json.loads(row[0])


def _history(c) -> list[dict]:  # type: ignore[no-untyped-def]
    c.send({"type": "history", "id": "hist"})
    return c.recv_until(lambda f: f.get("id") == "hist")["messages"]


# --- text repair: a property of every string, whatever its shape ---------------------------

_json = st.recursive(st.none() | st.booleans() | st.floats() | st.integers() | st.text(),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
                     max_leaves=20)


@given(st.text())
def test_repaired_text_always_encodes_and_clean_text_is_untouched(text: str) -> None:
    fixed = repair_text(text)
    fixed.encode("utf-8")
    assert "\x00" not in fixed and len(fixed) == len(text)
    assert repair_text(fixed) == fixed
    if all(not 0xD800 <= ord(ch) <= 0xDFFF and ch != "\x00" for ch in text):
        assert fixed is text


def test_lone_surrogates_and_nul_become_the_replacement_character() -> None:
    assert repair_text(f"a{LONE}b\x00c\udfff") == f"a{REPLACEMENT}b{REPLACEMENT}c{REPLACEMENT}"
    assert repair_text("emoji 😀 kept") == "emoji 😀 kept"
    blocks = [{"type": "text", "text": LONE}, {"type": "image_url", "url": f"https://x/{LONE}"}]
    assert json.dumps(repair_content(blocks), ensure_ascii=False).encode("utf-8")


@settings(max_examples=200)
@given(_json)
def test_any_stored_content_becomes_something_a_provider_can_send(content: Any) -> None:
    sent = sendable_content(content)
    assert isinstance(sent, str) or all(isinstance(b, dict) and all(isinstance(v, str) for v in b.values())
                                        for b in sent)
    json.dumps(sent, ensure_ascii=False, allow_nan=False).encode("utf-8")


def test_content_nested_too_deep_to_print_is_still_sendable() -> None:
    deep: Any = "x"
    for _ in range(5000):
        deep = {"k": deep}
    assert isinstance(sendable_content(deep), str)


# --- end to end: real web, worker, beat and fake LLM -----------------------------------------

def test_lone_surrogate_is_repaired_at_intake_and_the_dialog_goes_on(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    c.send('{"type": "message", "content": "half an emoji \\ud83d here", "id": "s1"}')
    acc = c.recv_until(lambda f: f.get("id") == "s1")
    assert acc["type"] == "accepted", acc
    done = c.wait_completed(acc["seq"], timeout=30)
    assert done["status"] == "completed", done
    assert done["final_text"] == f"You said: half an emoji {REPLACEMENT} here"
    assert _stored_input(stack, c.session_id, acc["seq"]) == f"half an emoji {REPLACEMENT} here"  # repaired at intake
    c.send('{"type": "message", "content": [{"type": "text", "text": "block \\udfff"}], "id": "s2"}')
    acc = c.recv_until(lambda f: f.get("id") == "s2")
    assert c.wait_completed(acc["seq"], timeout=30)["final_text"] == f"You said: block {REPLACEMENT}"
    assert c.ask("and after that")["final_text"] == "You said: and after that"


def test_input_whose_turn_fails_every_time_ends_failed_and_the_dialog_goes_on(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    # The model answers with a lone surrogate every time: the worker cannot record that turn at
    # all (SQL refuses the text), so the failure happens outside the agent loop, on every attempt.
    _add_rule(llm, "poison-reply", {"content": f"broken {LONE} reply"})
    c = stack.client()
    acc = c.say("poison-reply please")
    done = c.wait_completed(acc["seq"], timeout=90)
    assert done["status"] == "failed", done
    assert "could not be answered" in done["error"] and "gateway.max_turn_attempts" in done["error"]
    assert len(_user_texts_sent(llm, "poison-reply")) == 2  # gateway.max_turn_attempts (default 2): tried exactly that often
    hist = _history(c)
    assert [m["content"] for m in hist if m["role"] == "user"] == ["poison-reply please"]
    assert hist[-1]["role"] == "assistant" and "could not be answered" in hist[-1]["content"]
    later = c.ask("next question", timeout=30)
    assert later["status"] == "completed" and later["final_text"] == "You said: next question"
    # the input given up on is kept from the model, so it cannot fail the dialog's later turns
    assert len(_user_texts_sent(llm, "poison-reply")) == 2
    time.sleep(3)  # a few sweeps: the failed input is never tried again
    assert len(_user_texts_sent(llm, "poison-reply")) == 2


def test_input_stored_by_an_older_version_is_repaired_when_claimed(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    c = stack.client()
    assert c.ask("first")["status"] == "completed"
    db = sqlite3.connect(stack.home / "data" / "picobot.db", timeout=30)
    try:  # written the way a version without intake repair stored it: JSON with a lone surrogate
        with db:
            seq = db.execute("UPDATE sessions SET next_seq = next_seq + 1 WHERE id = ? RETURNING next_seq",
                             (c.session_id,)).fetchone()[0]
            db.execute("INSERT INTO inbound (session_id, seq, mode, content, sender_id, channel, status, attempts, "
                       "created_at) VALUES (?, ?, 'steer', ?, 'old', 'cli_chat', 'pending', 0, ?)",
                       (c.session_id, seq, '"old row \\ud800 text"', time.time()))
    finally:
        db.close()
    done = c.wait_completed(seq, timeout=60)  # the sweeper finds it
    assert done["status"] == "completed" and done["final_text"] == f"You said: old row {REPLACEMENT} text"
    assert c.ask("still fine")["final_text"] == "You said: still fine"
