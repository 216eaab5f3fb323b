"""The OpenAI-compatible API on a PicoBot with `gateway.pairing_required: false`, through the official
`openai` SDK: a request without any Authorization is let in (its dialogs belong to the client's
address) and the dialog continues with X-PicoBot-Session; a bearer that is neither an API key nor
a device token is still refused with an OpenAI-shaped 401, so a mistyped key is never silently
ignored; real keys keep working."""

from __future__ import annotations

import json
from typing import Any, Iterator

import httpx
import openai
import pytest

from picobot.demo.llm import FakeLLM
from tests.hook_sink import CallbackSink
from tests.stack import Stack
from tests.test_openai_api import api_config, create_key, dialog_messages, rows
from tests.http_client import HTTP


@pytest.fixture(autouse=True)
def _no_rules(llm: FakeLLM) -> None:
    """No rule left on the shared fake LLM by another test answers for these."""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    cfg = api_config(fake_llm.url)
    cfg["gateway"]["pairing_required"] = False
    s = Stack(tmp_path_factory.mktemp("openai-open"), fake_llm.url, config=cfg)
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


NO_AUTH: dict[str, Any] = {"Authorization": openai.Omit()}  # the SDK's way to send no Authorization at all


def keyless(stack: Stack) -> openai.OpenAI:
    """The SDK refuses an empty api_key and sends any other as a bearer, unless a request omits the
    header explicitly (`extra_headers=NO_AUTH`); the placeholder key is then never sent."""
    return openai.OpenAI(base_url=stack.http + "/v1", api_key="placeholder", max_retries=0, timeout=60)


def with_key(stack: Stack, api_key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=stack.http + "/v1", api_key=api_key, max_retries=0, timeout=60)


def sent_authorization(api: openai.OpenAI) -> str | None:
    """The Authorization header this client really puts on the wire, caught by a local receiver."""
    sink = CallbackSink()
    try:
        api.with_options(base_url=sink.url("/v1")).chat.completions.with_raw_response.create(
            model="picobot", messages=[{"role": "user", "content": "probe"}], extra_headers=NO_AUTH)
        (got,) = sink.at("/v1/chat/completions")
        return next((v for k, v in got["headers"].items() if k.lower() == "authorization"), None)
    finally:
        sink.close()


def test_keyless_sdk_completion_works_and_the_dialog_continues(stack: Stack, llm: FakeLLM) -> None:
    api = keyless(stack)
    assert sent_authorization(api) is None  # truly without any Authorization
    raw = api.chat.completions.with_raw_response.create(
        model="picobot", messages=[{"role": "user", "content": "open hello"}], extra_headers=NO_AUTH)
    assert raw.http_response.status_code == 200
    session = raw.headers["x-picobot-session"]
    answer = raw.parse()
    assert answer.object == "chat.completion" and answer.choices[0].message.content == "You said: open hello"
    assert answer.usage is not None and answer.usage.completion_tokens > 0

    again = api.chat.completions.with_raw_response.create(
        model="picobot", messages=[{"role": "user", "content": "open second"}],
        extra_headers={**NO_AUTH, "X-PicoBot-Session": session})
    assert again.headers["x-picobot-session"] == session
    assert again.parse().choices[0].message.content == "You said: open second"
    assert dialog_messages(stack, session) == [
        ("user", "open hello"), ("assistant", "You said: open hello"),
        ("user", "open second"), ("assistant", "You said: open second")]
    # the server kept the dialog: the model saw the first message though the client sent only the second
    last = [r for r in HTTP.get(llm.url + "/_fake/requests").json()["requests"] if r["path"].endswith("completions")]
    assert "open hello" in json.dumps(last[-1]["body"]["messages"])
    # the dialog belongs to the client's address, not to some device or key
    chats = rows(stack, "SELECT chat_id FROM sessions WHERE channel = 'openai_api' AND chat_id LIKE :c",
                 c=f"%.{session}")
    assert [c for (c,) in chats] and all(c.startswith("addr_127.0.0.1.") for (c,) in chats), chats


def test_keyless_streaming_works(stack: Stack) -> None:
    chunks = list(keyless(stack).chat.completions.create(
        model="picobot", stream=True, messages=[{"role": "user", "content": "open stream"}], extra_headers=NO_AUTH))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "You said: open stream"


@pytest.mark.parametrize("bearer", ["anything", "sk-not-a-real-key", "x" * 5000])
def test_an_open_server_takes_any_bearer_that_is_no_picobot_key(stack: Stack, bearer: str) -> None:
    """The SDKs always send some api_key; with pairing off, one that is no PicoBot key is taken as no key."""
    answer = with_key(stack, bearer).chat.completions.create(
        model="picobot", messages=[{"role": "user", "content": "placeholder key"}])
    assert answer.choices[0].message.content == "You said: placeholder key"
    assert bearer not in json.dumps([list(r) for r in rows(stack, "SELECT channel, chat_id FROM sessions")])  # owned by the address


@pytest.mark.parametrize("bearer", ["pbk_" + "0" * 40])
def test_a_wrong_picobot_key_is_refused_even_when_pairing_is_off(stack: Stack, bearer: str) -> None:
    before = rows(stack, "SELECT count(*) FROM messages")[0][0]
    with pytest.raises(openai.AuthenticationError) as err:
        with_key(stack, bearer).chat.completions.create(
            model="picobot", messages=[{"role": "user", "content": "should not be stored"}])
    assert err.value.status_code == 401
    body: Any = err.value.body
    assert body["code"] == "invalid_api_key" and bearer not in json.dumps(body)
    assert err.value.response.headers["www-authenticate"] == 'Bearer realm="picobot"'
    assert rows(stack, "SELECT count(*) FROM messages")[0][0] == before  # nothing reached the gateway


def test_a_real_key_still_works_and_keeps_its_scope(stack: Stack) -> None:
    key = create_key(stack, "open-helper", "--agent", "helper")["key"]
    api = with_key(stack, key)
    answer = api.chat.completions.create(model="helper", messages=[{"role": "user", "content": "keyed words"}])
    assert answer.choices[0].message.content == "You said: keyed words"
    with pytest.raises(openai.PermissionDeniedError):  # the key's scope still holds with pairing off
        api.chat.completions.create(model="picobot", messages=[{"role": "user", "content": "other agent"}])
    assert [m.id for m in api.models.list().data] == ["helper"]
    assert "helper" in [m.id for m in keyless(stack).models.list(extra_headers=NO_AUTH).data]  # no key: every agent
