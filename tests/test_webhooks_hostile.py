"""Hostile input at the webhook boundary: every bad call is a 4xx JSON answer, stores nothing and
calls no model; the parsers themselves (body, template, signature) under hypothesis."""

from __future__ import annotations

import json
import time
import uuid
from typing import Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from picobot.webhooks.body import BodyError, parse_object
from picobot.webhooks.signature import SignatureError, sign, verify
from picobot.webhooks.template import TemplateError, compile_template
from scripts.fake_llm import FakeLLM
from tests.hook_sink import SECRET, CallbackSink, count_runs, hooks_config, model_calls_with, post, signed
from tests.stack import Stack
from tests.http_client import HTTP

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=list(HealthCheck))


@pytest.fixture(scope="module")
def hstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    from picobot.cli.embedded_redis import free_port

    sink = CallbackSink()
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("hooks-hostile"), fake_llm.url, config=hooks_config(fake_llm.url, port, sink))
    s.port = port
    try:
        s.start()
        yield s
    finally:
        s.stop()
        sink.close()


def refused(stack: Stack, llm: FakeLLM, resp: httpx.Response, status: int, error: str, marker: str,
            runs_before: int) -> None:
    assert resp.status_code == status, resp.text
    assert resp.headers["Content-Type"].startswith("application/json")
    assert resp.json()["error"] == error
    assert count_runs(stack.database_url) == runs_before
    assert model_calls_with(llm.url, marker) == 0


def body_with(marker: str) -> bytes:
    return json.dumps({"order": {"id": marker}, "items": ["x"], "note": "n"}).encode()


def test_bad_signature_stale_timestamp_and_missing_headers(hstack: Stack, llm: FakeLLM) -> None:
    marker = "sig" + uuid.uuid4().hex[:8]
    body, before = body_with(marker), count_runs(hstack.database_url)
    url = f"{hstack.http}/hooks/orders"
    wrong = HTTP.post(url, content=body, headers=signed(body, secret="another-secret-of-16+"))
    refused(hstack, llm, wrong, 401, "bad_signature", marker, before)
    tampered = HTTP.post(url, content=body + b" ", headers=signed(body))
    refused(hstack, llm, tampered, 401, "bad_signature", marker, before)
    stale = HTTP.post(url, content=body, headers=signed(body, ts=int(time.time()) - 301))
    refused(hstack, llm, stale, 401, "bad_signature", marker, before)
    assert "300 s" in stale.json()["message"]
    future = HTTP.post(url, content=body, headers=signed(body, ts=int(time.time()) + 400))
    refused(hstack, llm, future, 401, "bad_signature", marker, before)
    bare = HTTP.post(url, content=body)
    refused(hstack, llm, bare, 401, "bad_signature", marker, before)
    assert SECRET not in wrong.text + stale.text + bare.text


def test_a_replayed_signed_request_is_refused(hstack: Stack, llm: FakeLLM) -> None:
    marker = "replay" + uuid.uuid4().hex[:8]
    body = body_with(marker)
    headers = signed(body)
    first = HTTP.post(f"{hstack.http}/hooks/orders", content=body, headers=headers)
    assert first.status_code == 202
    before = count_runs(hstack.database_url)
    again = HTTP.post(f"{hstack.http}/hooks/orders", content=body, headers=headers)
    assert again.status_code == 409 and again.json()["error"] == "replayed"
    assert count_runs(hstack.database_url) == before


def test_unknown_hook_and_wrong_method(hstack: Stack, llm: FakeLLM) -> None:
    marker = "unk" + uuid.uuid4().hex[:8]
    before = count_runs(hstack.database_url)
    body = body_with(marker)
    # not a configured hook: the pairing guard answers for it (JSON), a paired caller gets a 404
    r = HTTP.post(f"{hstack.http}/hooks/nope", content=body, headers=signed(body))
    refused(hstack, llm, r, 401, "not_paired", marker, before)
    r = HTTP.post(f"{hstack.http}/hooks/nope", content=body,
                   headers={**signed(body), "Authorization": f"Bearer {hstack.token}"})
    refused(hstack, llm, r, 404, "unknown_hook", marker, before)
    r = HTTP.get(f"{hstack.http}/hooks/orders")
    refused(hstack, llm, r, 405, "method_not_allowed", marker, before)
    r = HTTP.get(f"{hstack.http}/hooks/runs/{'x' * 500}", headers={"Authorization": f"Bearer {hstack.token}"})
    assert r.status_code == 404 and r.json()["error"] == "not_found"


def test_oversize_body(hstack: Stack, llm: FakeLLM) -> None:
    marker = "big" + uuid.uuid4().hex[:8]
    before = count_runs(hstack.database_url)
    body = json.dumps({"order": {"id": marker}, "note": "x" * 600}).encode()
    r = HTTP.post(f"{hstack.http}/hooks/small", content=body, headers=signed(body))
    refused(hstack, llm, r, 413, "too_large", marker, before)

    def chunks() -> Iterator[bytes]:  # no Content-Length: the cap holds on the bytes read
        yield body

    r = HTTP.post(f"{hstack.http}/hooks/small", content=chunks(), headers=signed(body))
    refused(hstack, llm, r, 413, "too_large", marker, before)


@pytest.mark.parametrize("raw, why", [
    (b'["not", "an", "object"]', "object"),
    (b'{"order": {"id": "MARK"}, "x": NaN}', "NaN"),
    (b'{"order": {"id": "MARK"}, "x": -Infinity}', "Infinity"),
    (b'{"order": {"id": "MARK"}, "x": "\\ud800"}', "surrogate"),
    (b'{"order": {"id": "MARK"}, "x": "a\\u0000b"}', "NUL"),
    (b'{"order": {"id": "MARK"}, "x": "\xff\xfe"}', "UTF-8"),
    (b'{"order": {"id": "MARK"}, "x": ' + b"[" * 40 + b"]" * 40 + b"}", "deeper"),
    (b'{"order": {"id": "MARK"}, "x": ' + b"[" * 100000 + b"]" * 100000 + b"}", "deeper"),
    (b'{"order": {"id": "MARK"}', "not JSON"),
    (b"", "not JSON"),
])
def test_malformed_bodies(hstack: Stack, llm: FakeLLM, raw: bytes, why: str) -> None:
    marker = "bad" + uuid.uuid4().hex[:8]
    body = raw.replace(b"MARK", marker.encode())
    before = count_runs(hstack.database_url)
    r = HTTP.post(f"{hstack.http}/hooks/orders", content=body, headers=signed(body), timeout=30)
    refused(hstack, llm, r, 400, "bad_body", marker, before)
    assert why in r.json()["message"]


def test_bad_idempotency_key(hstack: Stack, llm: FakeLLM) -> None:
    marker = "key" + uuid.uuid4().hex[:8]
    before = count_runs(hstack.database_url)
    for key in ("", "k" * 201):
        r = post(hstack.http, "orders", json.loads(body_with(marker)), **{"Idempotency-Key": key})
        refused(hstack, llm, r, 400, "bad_idempotency_key", marker, before)


HEADER_TEXT = st.text(st.characters(min_codepoint=0x20, max_codepoint=0xFF, exclude_characters="\x7f"), max_size=80)


@FUZZ
@given(body=st.binary(max_size=300), ts=st.one_of(st.none(), HEADER_TEXT),
       sig=st.one_of(st.none(), HEADER_TEXT), sign_it=st.booleans())
def test_fuzzed_calls_never_break_the_endpoint(hstack: Stack, body: bytes, ts: str | None, sig: str | None,
                                               sign_it: bool) -> None:
    headers: dict[str, bytes] = {}
    if sign_it:
        headers = {k: v.encode() for k, v in signed(body).items()}
    else:
        if ts is not None:
            headers["X-PicoBot-Timestamp"] = ts.strip().encode("latin-1")
        if sig is not None:
            headers["X-PicoBot-Signature"] = sig.strip().encode("latin-1")
    r = HTTP.post(f"{hstack.http}/hooks/orders", content=body, headers=headers, timeout=30)
    assert r.status_code in (202, 400, 401, 409, 413), r.text
    assert r.headers["Content-Type"].startswith("application/json")
    assert HTTP.get(f"{hstack.http}/health", timeout=10).status_code == 200  # the process still answers


@FUZZ
@given(payload=st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
                            lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=8), kids, max_size=4),
                            max_leaves=20))
def test_fuzzed_signed_objects_are_accepted_or_refused_cleanly(hstack: Stack, payload: object) -> None:
    # a nonce: hypothesis repeats examples, and the same signed body twice in one second is a replay (409)
    body = json.dumps({"order": {"id": "fz"}, "items": [payload], "note": payload,
                       "nonce": uuid.uuid4().hex}).encode("utf-8", "surrogatepass")
    r = HTTP.post(f"{hstack.http}/hooks/orders", content=body, headers=signed(body), timeout=30)
    assert r.status_code in (202, 400, 413), r.text
    assert r.status_code == 202 or r.json()["error"] in ("bad_body", "prompt_too_large")


# --- the parsers, in-process ----------------------------------------------------------


@given(st.binary(max_size=2000))
@settings(max_examples=300)
def test_body_parser_raises_only_body_errors(raw: bytes) -> None:
    try:
        data = parse_object(raw)
    except BodyError:
        return
    assert isinstance(data, dict)
    json.dumps(data).encode("utf-8")  # whatever it accepts, SQL and a provider can take


@given(template=st.text(max_size=200), payload=st.dictionaries(st.text(max_size=5), st.text(max_size=5), max_size=5))
@settings(max_examples=300)
def test_template_compiles_or_says_why_and_renders_within_the_cap(template: str, payload: dict) -> None:
    try:
        compiled = compile_template(template)
    except TemplateError:
        return
    try:
        out = compiled.render({"payload": payload, **payload}, 50)
    except TemplateError:
        return
    assert len(out) <= 50


def test_template_never_reaches_python_objects() -> None:
    for bad in ("{{ payload['a'] }}", "{{ config }}", "{{ payload.a() }}", "{{ payload|attr('x') }}",
                "{{ payload.a + 1 }}", "{{ }}", "{{ payload..a }}"):
        with pytest.raises(TemplateError):
            compile_template(bad)
    # a dotted path looks up JSON keys only, never attributes
    dunder = compile_template("[{{ payload.__class__.__mro__ }}][{{ payload.keys }}]")
    assert dunder.render({"a": 1}, 100) == "[][]"
    assert dunder.render({"__class__": {"__mro__": "k"}, "keys": [1]}, 100) == "[k][[1]]"
    t = compile_template("{{payload.a.0.b}}|{{ payload.a.9 }}|{{ payload.n }}|{{ payload.t }}|{{ payload.s }}")
    assert t.render({"a": [{"b": "x"}], "n": None, "t": True, "s": "{{ payload.t }}"}, 100) == "x|||true|{{ payload.t }}"
    with pytest.raises(TemplateError):
        compile_template("{{ payload }}" * 3).render({"x": "y" * 40}, 100)


@given(ts=st.text(max_size=20), sig=st.text(max_size=80), body=st.binary(max_size=50))
@settings(max_examples=300)
def test_signature_check_raises_only_signature_errors(ts: str, sig: str, body: bytes) -> None:
    try:
        verify(SECRET, ts, sig, body)
    except SignatureError:
        return
    assert sig.lower() == sign(SECRET, ts, body)  # only the real signature passes


def test_signature_window() -> None:
    now = 1_700_000_000
    good = sign(SECRET, now, b"{}")
    verify(SECRET, str(now), good, b"{}", now=now + 300)
    with pytest.raises(SignatureError):
        verify(SECRET, str(now), good, b"{}", now=now + 301)
    with pytest.raises(SignatureError):
        verify(SECRET, str(now), good.upper().replace("SHA256=", "sha256=")[:-1] + "0", b"{}", now=now)


# --- config: every mistake names its key path ---------------------------------------


def _load_hooks(tmp_path, hooks: dict, env: dict | None = None):  # type: ignore[no-untyped-def]
    from picobot.app import check_config
    from picobot.config import load_config

    home = tmp_path / "home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps({"hooks": hooks}))
    config = load_config(home=home, environ=env or {}, cwd=tmp_path)
    check_config(config)
    return config


GOOD = {"secret": SECRET, "prompt": "Do {{ payload.x }}"}


@pytest.mark.parametrize("hooks, key_path, says", [
    ({"a": {"prompt": "p"}}, "hooks.a.secret", "required"),
    ({"a": {**GOOD, "secret": "short"}}, "hooks.a.secret", "16"),
    ({"a": {**GOOD, "agent": "ghost"}}, "hooks.a.agent", "unknown agent"),
    ({"a": {**GOOD, "prompt": "{{ os.system }}"}}, "hooks.a.prompt", "not a payload path"),
    ({"a": {**GOOD, "mode": "agent_task"}}, "hooks.a", "deliver"),
    ({"a": {**GOOD, "deliver": {"channel": "web", "chat_id": "c"}}}, "hooks.a", "silent"),
    ({"a": {**GOOD, "mode": "agent_task", "deliver": {"channel": "nowhere", "chat_id": "c"}}},
     "hooks.a.deliver.channel", "unknown channel"),
    ({"a": {**GOOD, "callback_url": "ftp://x"}}, "hooks.a.callback_url", "http"),
    ({"a": {**GOOD, "typo": 1}}, "hooks.a.typo", ""),
    ({"runs": GOOD}, "hooks.runs", "not 'runs'"),
    ({"a/b": GOOD}, "hooks.a/b", "letters"),
])
def test_bad_hook_config_names_the_key(tmp_path, hooks: dict, key_path: str, says: str) -> None:  # type: ignore[no-untyped-def]
    from picobot.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        _load_hooks(tmp_path, hooks)
    assert info.value.key_path == key_path, info.value
    assert says in info.value.reason


def test_hook_secret_from_the_environment_is_masked(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from picobot.config.secrets import masked, secret_values

    config = _load_hooks(tmp_path, {"a": {**GOOD, "secret": "${HOOK_SECRET}"}}, env={"HOOK_SECRET": SECRET})
    assert config.hooks["a"].secret == SECRET
    assert SECRET in secret_values(config)
    assert SECRET not in json.dumps(masked(config))
    assert SECRET not in repr(config)
