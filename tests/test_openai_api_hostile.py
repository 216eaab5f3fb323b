"""Hostile input at /v1: every bad body, header or path gets an OpenAI-shaped JSON 4xx naming the
problem, never a 500; the connection stays usable; random bodies (hypothesis) never break it either.
And with `gateway.openai_api.enabled` off, /v1 answers 404 in the same shape."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from picobot.demo.llm import FakeLLM
from tests.stack import Stack, base_config
from tests.test_openai_api import api_config, create_key
from tests.http_client import HTTP

LIMIT_CHARS = 2000
LIMIT_BYTES = 64 * 1024


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    cfg = api_config(fake_llm.url)
    cfg["gateway"].update(max_message_chars=LIMIT_CHARS, max_frame_bytes=LIMIT_BYTES,
                          rate_limits={"messages_per_chat_per_minute": 0, "messages_per_device_per_minute": 0})
    cfg["channels"] = {"openai_api": {"allow_from": ["apikey:hostile", "apikey:other-tenant"]}}
    s = Stack(tmp_path_factory.mktemp("openai-hostile"), fake_llm.url, config=cfg)
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


@pytest.fixture(autouse=True)
def _no_rules(llm: FakeLLM) -> None:
    """The fake LLM is shared by the test files of a pytest-xdist worker: rules another file left
    would change the echoed answers these tests expect."""


@pytest.fixture(scope="module")
def http(stack: Stack) -> Iterator[httpx.Client]:
    key = create_key(stack, "hostile")["key"]
    with httpx.Client(base_url=stack.http, headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        yield c


def post(http: httpx.Client, body: Any, raw: bytes | None = None, **headers: str) -> httpx.Response:
    content = raw if raw is not None else json.dumps(body).encode()
    return http.post("/v1/chat/completions", content=content,
                     headers={"Content-Type": "application/json", **headers})


def assert_openai_error(r: httpx.Response, status: int) -> dict[str, Any]:
    assert r.status_code == status, (r.status_code, r.text[:300])
    assert r.headers["content-type"].startswith("application/json")
    error = r.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and isinstance(error["message"], str)
    assert error["message"]
    return error


def ok(content: Any = "hi") -> dict[str, Any]:
    return {"model": "picobot", "messages": [{"role": "user", "content": content}]}


def assert_still_answers(http: httpx.Client) -> None:
    r = post(http, ok("are you fine"))
    assert r.status_code == 200, r.text[:300]
    assert r.json()["choices"][0]["message"]["content"] == "You said: are you fine"


BAD_BODIES: list[tuple[str, Any, str | None]] = [
    ("not an object", [1, 2], None),
    ("no model", {"messages": [{"role": "user", "content": "x"}]}, "model"),
    ("model not a string", {"model": 7, "messages": [{"role": "user", "content": "x"}]}, "model"),
    ("no messages", {"model": "picobot"}, "messages"),
    ("empty messages", {"model": "picobot", "messages": []}, "messages"),
    ("messages not a list", {"model": "picobot", "messages": "hi"}, "messages"),
    ("message not an object", {"model": "picobot", "messages": ["hi"]}, "messages[0]"),
    ("odd role", {"model": "picobot", "messages": [{"role": "wizard", "content": "x"}]}, "messages[0].role"),
    ("role not a string", {"model": "picobot", "messages": [{"role": ["user"], "content": "x"}]}, "messages[0].role"),
    ("no user message", {"model": "picobot", "messages": [{"role": "system", "content": "x"}]}, "messages"),
    ("content a number", {"model": "picobot", "messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    ("user content null", {"model": "picobot", "messages": [{"role": "user", "content": None}]},
     "messages[0].content"),
    ("empty user content", {"model": "picobot", "messages": [{"role": "user", "content": ""}]},
     "messages[0].content"),
    ("part of unknown type", {"model": "picobot", "messages": [{"role": "user", "content": [
        {"type": "input_audio", "input_audio": {"data": "x"}}]}]}, "messages[0].content[0]"),
    ("image without url", {"model": "picobot", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"detail": "high"}}]}]}, "messages[0].content[0].image_url"),
    ("stream not a bool", {**ok(), "stream": "yes"}, "stream"),
    ("stream_options not an object", {**ok(), "stream_options": 3}, "stream_options"),
    ("include_usage not a bool", {**ok(), "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ("user not a string", {**ok(), "user": 12}, "user"),
    ("user too long", {**ok(), "user": "u" * 300}, "user"),
    ("n of two", {**ok(), "n": 2}, "n"),
]


@pytest.mark.parametrize("what,body,param", BAD_BODIES, ids=[b[0] for b in BAD_BODIES])
def test_bad_bodies_are_400s_naming_the_field(http: httpx.Client, what: str, body: Any, param: str | None) -> None:
    error = assert_openai_error(post(http, body), 400)
    assert error["type"] == "invalid_request_error" and error["param"] == param, error


@pytest.mark.parametrize("raw", [
    b"", b"not json", b'{"model": "picobot", "messages": [', b"\xff\xfe\x00garbage",
    b'{"model": "picobot", "messages": [{"role": "user", "content": "x"}], "temperature": NaN}',
    b'{"model": "picobot", "messages": [{"role": "user", "content": "x"}], "top_p": Infinity}',
    b'{"model": "picobot", "messages": [{"role": "user", "content": "x"}], "seed": -Infinity}',
    b"[" * 20000 + b"]" * 20000, b'{"a":' * 5000 + b"1" + b"}" * 5000,
], ids=["empty", "text", "truncated", "bad utf-8", "NaN", "Infinity", "-Infinity", "deep list", "deep object"])
def test_bodies_that_are_not_strict_json_are_400s(http: httpx.Client, raw: bytes) -> None:
    error = assert_openai_error(post(http, None, raw=raw), 400)
    assert error["code"] == "invalid_json" or error["code"] == "invalid_body"


def test_gateway_limits_hold_on_v1(http: httpx.Client) -> None:
    huge = assert_openai_error(post(http, ok("x" * (LIMIT_CHARS + 1))), 413)
    assert "gateway.max_message_chars" in huge["message"] and huge["code"] == "too_large"
    body = assert_openai_error(post(http, ok("y" * (LIMIT_BYTES + 10))), 413)
    assert "gateway.max_frame_bytes" in body["message"]
    image = assert_openai_error(post(http, ok([{"type": "image_url", "image_url": {"url": "file:///etc/passwd"}}])),
                                400)
    assert image["code"] == "bad_content"
    blank = assert_openai_error(post(http, ok("   ")), 400)
    assert blank["code"] == "empty"
    assert_still_answers(http)


def test_lone_surrogates_and_unknown_fields_are_answered(http: httpx.Client) -> None:
    raw = b'{"model": "picobot", "messages": [{"role": "user", "content": "half \\ud800 emoji"}], ' \
          b'"temperature": 0.2, "tools": [{"type": "function"}], "response_format": {"type": "text"}, ' \
          b'"whatever": {"nested": [1, 2, 3]}}'
    r = post(http, None, raw=raw)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] == "You said: half \ufffd emoji"
    stream = post(http, None, raw=json.dumps({**ok("stream \ud800 it"), "stream": True}).encode())
    assert stream.status_code == 200 and stream.text.rstrip().endswith("data: [DONE]")


def test_bad_session_header_paths_and_methods(http: httpx.Client) -> None:
    bad = assert_openai_error(post(http, ok(), **{"X-PicoBot-Session": "../../etc"}), 400)
    assert bad["param"] == "X-PicoBot-Session"
    assert_openai_error(http.get("/v1/nothing/here"), 404)
    assert_openai_error(http.get("/v1"), 404)
    assert_openai_error(http.get("/v1/chat/completions"), 405)
    assert_openai_error(http.delete("/v1/models"), 405)
    missing = assert_openai_error(http.get("/v1/models/nope"), 404)
    assert missing["code"] == "model_not_found"
    assert_still_answers(http)


def test_another_credentials_dialog_is_out_of_reach(stack: Stack, http: httpx.Client) -> None:
    mine = post(http, ok("my secret plan"))
    session = mine.headers["x-picobot-session"]
    other = create_key(stack, "other-tenant")["key"]
    r = HTTP.post(stack.http + "/v1/chat/completions", json=ok("what did I say"), timeout=60,
                   headers={"Authorization": f"Bearer {other}", "X-PicoBot-Session": session})
    assert r.status_code == 200
    assert "secret plan" not in r.text  # same session name, another key: another dialog
    assert r.headers["x-picobot-session"] == session


def test_allow_from_of_the_channel_holds(stack: Stack) -> None:
    outsider = create_key(stack, "outsider")["key"]
    r = HTTP.post(stack.http + "/v1/chat/completions", json=ok("let me in"), timeout=60,
                   headers={"Authorization": f"Bearer {outsider}"})
    error = assert_openai_error(r, 403)
    assert error["code"] == "forbidden" and "allow_from" in error["message"]


# --- random bodies -------------------------------------------------------------------------------

_scalars = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False),
                     st.text(max_size=30))
_json = st.recursive(_scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=4)),
                     max_leaves=12)
_part = st.one_of(st.fixed_dictionaries({"type": st.sampled_from(["text", "image_url", "x"]),
                                         "text": st.one_of(st.text(max_size=40), _scalars),
                                         "image_url": st.one_of(_json, st.fixed_dictionaries(
                                             {"url": st.text(max_size=40)}))}), _json)
_message = st.one_of(st.fixed_dictionaries({
    "role": st.one_of(st.sampled_from(["user", "assistant", "system", "tool", "developer", "bot"]), _scalars),
    "content": st.one_of(st.text(max_size=60), st.lists(_part, max_size=3), _json)}), _json)
_body = st.one_of(_json, st.fixed_dictionaries({
    "model": st.one_of(st.sampled_from(["picobot", "helper", "nope"]), _scalars),
    "messages": st.one_of(st.lists(_message, max_size=4), _json)},
    optional={"stream": st.one_of(st.booleans(), _scalars), "user": st.one_of(st.text(max_size=20), _scalars),
              "stream_options": st.one_of(st.fixed_dictionaries({"include_usage": st.booleans()}), _json),
              "n": st.one_of(st.just(1), _scalars)}))


@settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))
@given(body=_body)
def test_random_bodies_get_json_answers_never_500(http: httpx.Client, body: Any) -> None:
    r = post(http, body)
    assert r.status_code in (200, 400, 403, 404, 413, 429), (r.status_code, r.text[:300])
    if r.headers["content-type"].startswith("text/event-stream"):
        assert r.text.rstrip().endswith("data: [DONE]")
        return
    answer = r.json()
    if r.status_code == 200:
        assert answer["object"] == "chat.completion" and isinstance(answer["choices"][0]["message"]["content"], str)
    else:
        assert set(answer["error"]) == {"message", "type", "param", "code"}


def test_the_connection_survives_the_random_bodies(http: httpx.Client) -> None:
    assert_still_answers(http)


# --- switched off ----------------------------------------------------------------------------------


def test_disabled_api_answers_404_in_openai_shape(tmp_path: Path, fake_llm: FakeLLM) -> None:
    s = Stack(tmp_path, fake_llm.url, config=base_config(fake_llm.url, 0))
    try:
        s.start_web()
        for method, path in (("POST", "/v1/chat/completions"), ("GET", "/v1/models")):
            for headers in ({}, {"Authorization": f"Bearer {s.token}"}):
                r = HTTP.request(method, s.http + path, json=ok(), headers=headers, timeout=30)
                error = assert_openai_error(r, 404)
                assert error["code"] == "not_enabled" and "gateway.openai_api.enabled" in error["message"]
    finally:
        s.stop()


def test_with_pairing_off_no_token_is_needed_but_a_wrong_one_is_refused(tmp_path: Path, fake_llm: FakeLLM) -> None:
    cfg = api_config(fake_llm.url)
    cfg["gateway"]["pairing_required"] = False
    s = Stack(tmp_path, fake_llm.url, config=cfg)
    try:
        s.start_web()
        open_list = HTTP.get(s.http + "/v1/models", timeout=30)
        assert open_list.status_code == 200 and {m["id"] for m in open_list.json()["data"]} == {"picobot", "helper"}
        wrong = HTTP.get(s.http + "/v1/models", headers={"Authorization": "Bearer pbk_wrong"}, timeout=30)
        assert_openai_error(wrong, 401)
    finally:
        s.stop()
