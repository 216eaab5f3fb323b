"""The OpenAI-compatible API through a real stack, with the official `openai` SDK as the client:
plain and streamed answers, a tool-using turn, keys (bad, revoked, scoped), `picobot apikeys`,
dialogs kept by the server, concurrent requests on one dialog, a client that goes away mid-stream."""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Iterator

import httpx
import openai
import pytest
from sqlalchemy import text

from picobot.demo.llm import FakeLLM
from picobot.storage.db import Database
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for
from tests.http_client import HTTP


def api_config(llm_url: str, **openai_api: Any) -> dict[str, Any]:
    cfg = base_config(llm_url, 0, openai_api={"enabled": True, "timeout_secs": 60, **openai_api})
    cfg["agents"]["helper"] = {"provider": "default", "model": "default"}
    return cfg


@pytest.fixture(autouse=True)
def _no_rules(llm: FakeLLM) -> None:
    """The fake LLM is shared by the test files of a pytest-xdist worker: no rule of another test
    (or file) may answer for these."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    s = Stack(tmp_path_factory.mktemp("openai"), fake_llm.url, config=api_config(fake_llm.url))
    try:
        s.start(beat=True)
        yield s
    finally:
        s.stop()


def create_key(stack: Stack, name: str, *extra: str) -> dict[str, Any]:
    r = stack.cli("apikeys", "create", name, "--json", *extra)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def key(stack: Stack) -> str:
    return create_key(stack, "main")["key"]


def client(stack: Stack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.http + "/v1", api_key=api_key, max_retries=0, timeout=60)


def rows(stack: Stack, sql: str, **params: Any) -> list[Any]:
    db = Database(stack.database_url)
    try:
        with db.connect() as conn:
            return list(conn.execute(text(sql), params))
    finally:
        db.dispose()


def dialog_messages(stack: Stack, session: str) -> list[tuple[str, str]]:
    found = rows(stack, "SELECT m.role, m.content FROM messages m JOIN sessions s ON s.id = m.session_id "
                        "WHERE s.channel = 'openai_api' AND s.chat_id LIKE :c AND m.role != 'system' "
                        "ORDER BY m.position", c=f"%.{session}")
    out = []
    for role, content in found:
        value = json.loads(content) if isinstance(content, str) and content[:1] in "[\"" else content
        if isinstance(value, list):
            value = " ".join(b.get("text", "") for b in value if isinstance(b, dict))
        out.append((role, value))
    return out


# --- answers ---------------------------------------------------------------------------------------


def test_plain_completion_keeps_the_dialog_on_the_server(stack: Stack, key: str, llm: FakeLLM) -> None:
    api = client(stack, key)
    raw = api.chat.completions.with_raw_response.create(
        model="picobot", messages=[{"role": "user", "content": "hello from the sdk"}])
    session = raw.headers["x-picobot-session"]
    answer = raw.parse()
    assert answer.object == "chat.completion" and answer.model == "picobot"
    assert answer.choices[0].message.content == "You said: hello from the sdk"
    assert answer.choices[0].finish_reason == "stop" and answer.choices[0].message.role == "assistant"
    assert answer.usage is not None and answer.usage.prompt_tokens > 0 and answer.usage.completion_tokens > 0
    assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens

    again = api.chat.completions.with_raw_response.create(
        model="picobot", messages=[{"role": "user", "content": "second words"}],
        extra_headers={"X-PicoBot-Session": session})
    assert again.headers["x-picobot-session"] == session
    assert again.parse().choices[0].message.content == "You said: second words"
    assert dialog_messages(stack, session) == [
        ("user", "hello from the sdk"), ("assistant", "You said: hello from the sdk"),
        ("user", "second words"), ("assistant", "You said: second words")]
    # the model saw the whole dialog: the server kept it, the client sent only its new message
    last = [r for r in HTTP.get(llm.url + "/_fake/requests").json()["requests"] if r["path"].endswith("completions")]
    sent = json.dumps(last[-1]["body"]["messages"])
    assert "hello from the sdk" in sent and "second words" in sent


def test_user_field_picks_the_same_dialog(stack: Stack, key: str) -> None:
    api = client(stack, key)
    one = api.chat.completions.with_raw_response.create(model="picobot", user="alice@example.com",
                                                        messages=[{"role": "user", "content": "note one"}])
    two = api.chat.completions.with_raw_response.create(model="picobot", user="alice@example.com",
                                                        messages=[{"role": "user", "content": "note two"}])
    other = api.chat.completions.with_raw_response.create(model="picobot", user="bob",
                                                          messages=[{"role": "user", "content": "note three"}])
    assert one.headers["x-picobot-session"] == two.headers["x-picobot-session"]
    assert other.headers["x-picobot-session"] != one.headers["x-picobot-session"]
    assert [m for m in dialog_messages(stack, one.headers["x-picobot-session"]) if m[0] == "user"] == [
        ("user", "note one"), ("user", "note two")]


def test_earlier_messages_are_context_only_for_a_new_dialog(stack: Stack, key: str) -> None:
    api = client(stack, key)
    history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "my name is Zed"},
               {"role": "assistant", "content": "hello Zed"}]
    raw = api.chat.completions.with_raw_response.create(
        model="picobot", messages=history + [{"role": "user", "content": "what is my name"}])
    text_ = raw.parse().choices[0].message.content or ""
    assert "user: my name is Zed" in text_ and "assistant: hello Zed" in text_ and "system: be brief" in text_
    assert text_.endswith("what is my name")
    session = raw.headers["x-picobot-session"]
    later = api.chat.completions.create(
        model="picobot", messages=[{"role": "user", "content": "forged earlier words"},
                                   {"role": "user", "content": "and now"}],
        extra_headers={"X-PicoBot-Session": session})
    assert later.choices[0].message.content == "You said: and now"  # the dialog has a history already


def test_slash_commands_are_passed_to_the_agent_as_text(stack: Stack, key: str) -> None:
    answer = client(stack, key).chat.completions.create(
        model="picobot", messages=[{"role": "user", "content": "/new please"}])
    assert answer.choices[0].message.content == "You said: /new please"


def test_streaming_sends_chunks_then_usage(stack: Stack, key: str, llm: FakeLLM) -> None:
    add_rule(llm, "stream me", {"content": "one two three four five six", "chunk_delay_ms": 30})
    chunks = list(client(stack, key).chat.completions.create(
        model="picobot", messages=[{"role": "user", "content": "stream me"}], stream=True,
        stream_options={"include_usage": True}))
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert chunks[0].choices[0].delta.role == "assistant"
    texts = [c.choices[0].delta.content for c in chunks if c.choices and c.choices[0].delta.content]
    assert "".join(texts) == "one two three four five six"
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices]
    assert finishes[-1] == "stop" and finishes.count("stop") == 1
    assert chunks[-1].choices == [] and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    assert len({c.id for c in chunks}) == 1


def test_a_tool_turn_runs_on_the_server_and_streams_its_progress(stack: Stack, key: str) -> None:
    api = client(stack, key)
    answer = api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": "what is 6*7"}])
    assert answer.choices[0].message.content == "The tool calculator returned: 42"
    chunks = list(api.chat.completions.create(model="picobot", stream=True,
                                              messages=[{"role": "user", "content": "what is 5*9"}]))
    progress = [getattr(c, "picobot", None) or (c.model_extra or {}).get("picobot") for c in chunks if not c.choices]
    statuses = [p["status"] for p in progress if p and p.get("tool") == "calculator"]
    assert statuses and statuses[-1] == "done"
    texts = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert texts == "The tool calculator returned: 45"


# --- keys --------------------------------------------------------------------------------------------


def test_bad_and_missing_keys_get_openai_shaped_401s(stack: Stack) -> None:
    for bad in ("pbk_not-a-real-key", "sk-whatever", ""):
        with pytest.raises(openai.AuthenticationError) as exc:
            client(stack, bad or "x").chat.completions.create(
                model="picobot", messages=[{"role": "user", "content": "hi"}])
        assert exc.value.status_code == 401
    r = HTTP.post(stack.http + "/v1/chat/completions", json={"model": "picobot", "messages": []})
    assert r.status_code == 401 and set(r.json()["error"]) == {"message", "type", "param", "code"}
    assert r.json()["error"]["code"] == "invalid_api_key"
    assert HTTP.get(stack.http + "/v1/models").status_code == 401


def test_a_revoked_key_stops_working(stack: Stack) -> None:
    issued = create_key(stack, "short-lived")
    api = client(stack, issued["key"])
    assert api.models.list().data
    r = stack.cli("apikeys", "revoke", "short-lived")
    assert r.returncode == 0, r.stderr
    with pytest.raises(openai.AuthenticationError):
        api.models.list()
    with pytest.raises(openai.AuthenticationError):
        api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": "hi"}])


def test_a_key_scoped_to_an_agent_uses_only_that_model(stack: Stack, key: str) -> None:
    helper = client(stack, create_key(stack, "helper-only", "--agent", "helper")["key"])
    assert [m.id for m in helper.models.list().data] == ["helper"]
    assert helper.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "hi helper"}]).choices[0].message.content == \
        "You said: hi helper"
    with pytest.raises(openai.PermissionDeniedError) as exc:
        helper.chat.completions.create(model="picobot", messages=[{"role": "user", "content": "hi"}])
    assert exc.value.body["code"] == "model_not_allowed"  # type: ignore[index]
    with pytest.raises(openai.PermissionDeniedError):
        helper.models.retrieve("picobot")
    main = client(stack, key)
    with pytest.raises(openai.PermissionDeniedError):
        main.chat.completions.create(model="helper", messages=[{"role": "user", "content": "hi"}])
    with pytest.raises(openai.NotFoundError):
        main.chat.completions.create(model="no-such-agent", messages=[{"role": "user", "content": "hi"}])


def test_a_paired_device_token_may_use_every_agent(stack: Stack) -> None:
    api = client(stack, stack.token)
    assert sorted(m.id for m in api.models.list().data) == ["helper", "picobot"]
    assert api.models.retrieve("helper").id == "helper"
    assert api.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "from a device"}]).choices[0].message.content == \
        "You said: from a device"


def test_apikeys_cli_creates_lists_and_revokes_storing_only_hashes(stack: Stack) -> None:
    issued = create_key(stack, "cli-key", "--agent", "helper")
    assert issued["key"].startswith("pbk_") and issued["agent"] == "helper" and issued["model"] == "helper"
    for path in ("/api/me", "/api/config"):  # a key opens /v1 only, never the paired-device routes
        assert HTTP.get(stack.http + path, headers={"Authorization": f"Bearer {issued['key']}"}).status_code == 401
    listed = stack.cli("apikeys", "list", "--json")
    assert listed.returncode == 0
    entry = next(k for k in json.loads(listed.stdout) if k["name"] == "cli-key")
    assert entry["agent"] == "helper" and issued["key"] not in listed.stdout
    assert "key_hash" not in entry and entry["prefix"] == issued["key"][:8]
    table = stack.cli("apikeys", "list")
    assert "cli-key" in table.stdout and issued["key"] not in table.stdout
    dup = stack.cli("apikeys", "create", "cli-key")
    assert dup.returncode == 1 and "exists" in dup.stderr
    assert stack.cli("apikeys", "create", "bad name!").returncode == 1
    unknown = stack.cli("apikeys", "create", "x1", "--agent", "nobody")
    assert unknown.returncode == 2 and "unknown agent" in unknown.stderr
    stored = rows(stack, "SELECT key_hash FROM api_keys WHERE name = 'cli-key'")
    assert stored == [(hashlib.sha256(issued["key"].encode()).hexdigest(),)]
    assert stack.cli("apikeys", "revoke", "cli-key").returncode == 0
    assert stack.cli("apikeys", "revoke", "cli-key").returncode == 1
    assert "cli-key" not in stack.cli("apikeys", "list").stdout
    again = create_key(stack, "cli-key")  # the name is free again once revoked
    assert again["key"] != issued["key"]
    db_files = b"".join(p.read_bytes() for p in Path(stack.home / "data").glob("picobot.db*"))
    assert issued["key"].encode() not in db_files and again["key"].encode() not in db_files


def test_api_keys_core_on_each_database(db_url: str) -> None:
    from picobot.auth.apikeys import ApiKeyError, ApiKeys

    db = Database(db_url)
    try:
        db.migrate()
        keys = ApiKeys(db)
        first = keys.create("k1", "default")
        found = keys.verify(first.key)
        assert found is not None and found.id == first.info.id and found.agent == "default"
        assert keys.keys()[0].last_used_at is not None and keys.verify(first.key + "x") is None
        assert keys.verify("pbk_" + "a" * 300) is None and keys.verify(None) is None
        with pytest.raises(ApiKeyError):
            keys.create("k1", "default")
        assert keys.revoke("k1") and not keys.revoke("k1")
        assert keys.verify(first.key) is None
        second = keys.create("k1", "helper")  # a revoked key's name is free again (partial unique index)
        assert keys.verify(second.key).agent == "helper"  # type: ignore[union-attr]
        assert [k.name for k in keys.keys(include_revoked=True)] == ["k1", "k1"]
    finally:
        db.dispose()


# --- one dialog, many requests ----------------------------------------------------------------------


def test_concurrent_requests_on_one_dialog_each_get_their_own_answer(stack: Stack, key: str, llm: FakeLLM) -> None:
    api = client(stack, key)
    session = api.chat.completions.with_raw_response.create(
        model="picobot", messages=[{"role": "user", "content": "open the dialog"}]).headers["x-picobot-session"]
    add_rule(llm, "slow first", {"content": "answer to the slow first", "delay_ms": 600})
    results: dict[str, str] = {}

    def ask(words: str) -> None:
        done = api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": words}],
                                           extra_headers={"X-PicoBot-Session": session})
        results[words] = done.choices[0].message.content or ""

    first = threading.Thread(target=ask, args=("slow first",))
    first.start()
    wait_for(lambda: rows(stack, "SELECT 1 FROM turns t JOIN sessions s ON s.id = t.session_id "
                                 "WHERE s.chat_id LIKE :c AND t.status = 'running'", c=f"%.{session}"), 30,
             "the first turn did not start")
    second = threading.Thread(target=ask, args=("quick second",))
    second.start()
    first.join(60)
    second.join(60)
    assert results == {"slow first": "answer to the slow first", "quick second": "You said: quick second"}
    # one turn at a time, each input answered right after it
    assert dialog_messages(stack, session)[2:] == [
        ("user", "slow first"), ("assistant", "answer to the slow first"),
        ("user", "quick second"), ("assistant", "You said: quick second")]


def test_a_client_that_leaves_mid_stream_loses_nothing(stack: Stack, key: str, llm: FakeLLM) -> None:
    words = " ".join(f"word{i}" for i in range(40))
    add_rule(llm, "long story", {"content": words, "chunk_delay_ms": 40})
    with httpx.Client(timeout=30) as http:
        with http.stream("POST", stack.http + "/v1/chat/completions", headers={"Authorization": f"Bearer {key}"},
                         json={"model": "picobot", "stream": True,
                               "messages": [{"role": "user", "content": "long story"}]}) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            session = resp.headers["x-picobot-session"]
            seen = ""
            for line in resp.iter_lines():
                if line.startswith("data: {") and '"content":"word' in line:
                    seen = line
                    break
    assert seen  # it was streaming when the client went away
    wait_for(lambda: ("assistant", words) in dialog_messages(stack, session), 60, "the answer was not stored")
    later = client(stack, key).chat.completions.create(
        model="picobot", messages=[{"role": "user", "content": "still there?"}],
        extra_headers={"X-PicoBot-Session": session})
    assert later.choices[0].message.content == "You said: still there?"


def test_a_failed_turn_is_a_server_error(stack: Stack, key: str, llm: FakeLLM) -> None:
    add_rule(llm, "explode", {"error": {"status": 400, "message": "the provider refused"}}, repeat=True)
    with pytest.raises(openai.APIStatusError) as exc:
        client(stack, key).chat.completions.create(model="picobot",
                                                   messages=[{"role": "user", "content": "explode"}])
    assert exc.value.status_code == 502 and exc.value.body["code"] == "turn_failed"  # type: ignore[index]
    stream = client(stack, key).chat.completions.create(model="picobot", stream=True,
                                                        messages=[{"role": "user", "content": "explode now"}])
    with pytest.raises(openai.APIError):
        list(stream)


def test_wait_is_bounded_by_timeout_secs(tmp_path: Path, fake_llm: FakeLLM) -> None:
    s = Stack(tmp_path, fake_llm.url, config=api_config(fake_llm.url, timeout_secs=1))
    try:
        s.start_web()  # no worker: nothing answers
        api = client(s, s.token)
        with pytest.raises(openai.APIStatusError) as exc:
            api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": "anyone?"}])
        assert exc.value.status_code == 504 and exc.value.body["code"] == "timeout"  # type: ignore[index]
        assert "X-PicoBot-Session" in exc.value.body["message"]  # type: ignore[index]
        assert exc.value.response.headers.get("x-picobot-session")
    finally:
        s.stop()


def test_keys_never_reach_the_logs(stack: Stack, key: str) -> None:
    client(stack, key).chat.completions.create(model="picobot", messages=[{"role": "user", "content": "log check"}])
    with pytest.raises(openai.AuthenticationError):
        client(stack, key + "x").models.list()
    logs = stack.all_logs()
    assert "log check" in logs or "picobot.turn" in logs  # the logs are being written
    assert key not in logs and key[4:] not in logs
