"""The Feishu webhook: hostile requests, url_verification, recording once, and interop with lark-oapi.

In process: a real runtime on a temp SQLite database and a queue that records what is enqueued.
What the webhook recorded is read back with SQL. The SDK's own decryptor and its own request
handler (signature and token checks) judge the same bytes we do.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest
import sqlalchemy as sa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.channels.feishu.config import FeishuConfig
from picobot.channels.feishu.crypto import encrypt, signature
from picobot.channels.feishu.webhook import MESSAGE_EVENT, handle
from picobot.config import Config
from picobot.app import App as Runtime, build_runtime

VTOK = "vtok_test_token_1"
EKEY = "ekey_test_key_1"


class RecordingQueue:
    def __init__(self) -> None:
        self.events: list[int] = []

    def enqueue_turn(self, session_id: str) -> None:
        pass

    def enqueue_channel_event(self, event_id: int) -> None:
        self.events.append(event_id)


def make_config(tmp_path: Path, **feishu: Any) -> Config:
    section = {"enabled": True, "app_id": "cli_test", "app_secret": "secret_test_1",
               "verification_token": VTOK, "encrypt_key": EKEY, **feishu}
    return Config.model_validate({"home": str(tmp_path / "home"), "channels": {"feishu": section}})


@pytest.fixture
def rt(tmp_path: Path) -> Iterator[Runtime]:
    runtime = build_runtime(make_config(tmp_path), RecordingQueue(), migrate=True)  # type: ignore[arg-type]
    yield runtime
    runtime.close()


def cfg_of(rt: Runtime) -> FeishuConfig:
    return FeishuConfig.from_channel(rt.config.channels["feishu"])


def message_event(message_id: str | None = None, text: str = "hi", token: str = VTOK,
                  event_type: str = MESSAGE_EVENT, content: str | None = None) -> dict[str, Any]:
    return {
        "schema": "2.0",
        "header": {"event_id": uuid.uuid4().hex, "event_type": event_type, "create_time": str(int(time.time() * 1000)),
                   "token": token, "app_id": "cli_test", "tenant_key": "t1"},
        "event": {
            "sender": {"sender_id": {"open_id": "ou_u1", "union_id": "on_u1", "user_id": "u1"},
                       "sender_type": "user", "tenant_key": "t1"},
            "message": {"message_id": message_id or f"om_{uuid.uuid4().hex}", "create_time": "1609073151345",
                        "chat_id": "oc_1", "chat_type": "p2p", "message_type": "text",
                        "content": json.dumps({"text": text}) if content is None else content},
        },
    }


def signed_headers(body: bytes, key: str = EKEY, ts: int | None = None, nonce: str = "nonce1") -> dict[str, str]:
    stamp = str(int(time.time()) if ts is None else ts)
    return {"X-Lark-Request-Timestamp": stamp, "X-Lark-Request-Nonce": nonce,
            "X-Lark-Signature": signature(stamp, nonce, key, body), "Content-Type": "application/json"}


def wire(event: dict[str, Any], key: str = EKEY) -> tuple[dict[str, str], bytes]:
    """The request Feishu sends for `event`: encrypted and signed."""
    body = json.dumps({"encrypt": encrypt(json.dumps(event), key)}).encode()
    return signed_headers(body, key), body


def recorded(rt: Runtime) -> list[dict[str, Any]]:
    with rt.db.connect() as conn:
        rows = conn.execute(sa.text("SELECT channel, event_key, payload, status FROM channel_events")).mappings()
        return [dict(r) for r in rows]


def payload_of(row: dict[str, Any]) -> dict[str, Any]:
    return row["payload"] if isinstance(row["payload"], dict) else json.loads(row["payload"])


def call(rt: Runtime, headers: dict[str, str], body: bytes) -> tuple[int, dict[str, Any]]:
    status, answer = handle(rt, cfg_of(rt), headers, body)
    json.dumps(answer, ensure_ascii=False).encode("utf-8")  # always JSON, even for lone surrogates
    return status, answer


# --- the happy paths -----------------------------------------------------------------------


def test_a_message_is_recorded_once_without_the_token_and_enqueued(rt: Runtime) -> None:
    event = message_event("om_once", "hello")
    for _ in range(5):  # Feishu redelivers
        assert call(rt, *wire(event)) == (200, {"code": 0, "msg": "ok"})
    rows = recorded(rt)
    assert [(r["channel"], r["event_key"], r["status"]) for r in rows] == [("feishu", "om_once", "pending")]
    assert VTOK not in json.dumps(payload_of(rows[0])) and payload_of(rows[0])["event"]["message"]["message_id"] == "om_once"
    assert len(rt.queue.events) == 1  # type: ignore[attr-defined]


def test_a_plain_signed_event_is_accepted_too(rt: Runtime) -> None:
    body = json.dumps(message_event("om_plain")).encode()
    assert call(rt, signed_headers(body), body)[0] == 200
    assert [r["event_key"] for r in recorded(rt)] == ["om_plain"]


def test_url_verification_plain_and_encrypted(rt: Runtime) -> None:
    check = {"challenge": "ch-123", "token": VTOK, "type": "url_verification"}
    assert call(rt, {}, json.dumps(check).encode()) == (200, {"challenge": "ch-123"})
    body = json.dumps({"encrypt": encrypt(json.dumps(check), EKEY)}).encode()
    assert call(rt, {}, body) == (200, {"challenge": "ch-123"})
    wrong = {**check, "token": "not-the-token"}
    assert call(rt, {}, json.dumps(wrong).encode())[0] == 401
    assert call(rt, {}, json.dumps({**check, "token": None}).encode())[0] == 401
    assert recorded(rt) == []


# --- hostile input -------------------------------------------------------------------------


def _stale() -> tuple[dict[str, str], bytes]:
    headers, body = wire(message_event())
    return signed_headers(body, ts=int(time.time()) - 301), body


def _future() -> tuple[dict[str, str], bytes]:
    headers, body = wire(message_event())
    return signed_headers(body, ts=int(time.time()) + 400), body


def _bad_signature() -> tuple[dict[str, str], bytes]:
    headers, body = wire(message_event())
    return {**headers, "X-Lark-Signature": "0" * 64}, body


def _tampered() -> tuple[dict[str, str], bytes]:
    headers, body = wire(message_event())
    return headers, json.dumps({"encrypt": encrypt(json.dumps(message_event()), EKEY)}).encode()


def _unsigned() -> tuple[dict[str, str], bytes]:
    headers, body = wire(message_event())
    return {k: v for k, v in headers.items() if k != "X-Lark-Signature"}, body


def _garbage(encrypted: Any) -> tuple[dict[str, str], bytes]:
    body = json.dumps({"encrypt": encrypted}).encode()
    return signed_headers(body), body


def _plain(raw: bytes) -> tuple[dict[str, str], bytes]:
    return signed_headers(raw), raw


HOSTILE = {
    "bad signature": (_bad_signature, 401),
    "body swapped under a signature": (_tampered, 401),
    "no signature": (_unsigned, 401),
    "stale timestamp": (_stale, 401),
    "timestamp from the future": (_future, 401),
    "timestamp not a number": (lambda: ({**wire(message_event())[0], "X-Lark-Request-Timestamp": "soon"},
                                        wire(message_event())[1]), 401),
    "wrong token": (lambda: wire(message_event(token="wrong-token")), 401),
    "no token": (lambda: wire(message_event(token="")), 401),
    "encrypted with another key": (lambda: _garbage(encrypt(json.dumps(message_event()), "other-key")), 400),
    "encrypt not base64": (lambda: _garbage("%%%not base64%%%"), 400),
    "encrypt too short": (lambda: _garbage("AAAA"), 400),
    "encrypt not whole blocks": (lambda: _garbage("A" * 44), 400),
    "encrypt not a string": (lambda: _garbage(12345), 400),
    "encrypt with a lone surrogate": (lambda: _garbage("\ud800abc"), 400),
    "encrypted non-JSON": (lambda: _garbage(encrypt("not json at all", EKEY)), 400),
    "encrypted JSON array": (lambda: _garbage(encrypt("[1, 2]", EKEY)), 400),
    "oversize body": (lambda: _plain(b'{"a":"' + b"x" * (1024 * 1024) + b'"}'), 413),
    "not JSON": (lambda: _plain(b"<xml>hello</xml>"), 400),
    "not UTF-8": (lambda: _plain(b'{"a": "\xff\xfe"}'), 400),
    "empty body": (lambda: _plain(b""), 400),
    "JSON array": (lambda: _plain(b"[]"), 400),
    "JSON string": (lambda: _plain(b'"hello"'), 400),
    "NaN": (lambda: _plain(b'{"schema": "2.0", "x": NaN}'), 400),
    "Infinity": (lambda: _plain(b'{"x": -Infinity}'), 400),
    "deep nesting": (lambda: _plain(b'{"a":' * 100 + b"1" + b"}" * 100), 400),
    "very deep nesting": (lambda: _plain(b"[" * 200_000 + b"]" * 200_000), 400),
    "unknown event type": (lambda: wire(message_event(event_type="im.chat.member.bot.added_v1")), 200),
    "v1 event": (lambda: wire({"uuid": "u1", "token": VTOK, "ts": "1", "type": "event_callback",
                               "event": {"type": "message", "text": "hi"}}), 200),
    "malformed content JSON": (lambda: wire(message_event(content="{not json")), 200),
    "content JSON not an object": (lambda: wire(message_event(content="[1]")), 200),
    "content with NaN": (lambda: wire(message_event(content='{"text": NaN}')), 200),
    "message without message_id": (lambda: wire({**message_event(), "event": {"message": {"chat_id": "oc_1"}}}), 200),
    "message_id not a string": (lambda: wire(message_event(message_id=12345)), 200),  # type: ignore[arg-type]
    "message_id too long": (lambda: wire(message_event(message_id="om_" + "x" * 300)), 200),
}


@pytest.mark.parametrize("case", list(HOSTILE))
def test_hostile_requests_get_a_json_answer_one_log_line_and_record_nothing(
        rt: Runtime, case: str, caplog: pytest.LogCaptureFixture) -> None:
    build, expected = HOSTILE[case]
    headers, body = build()
    caplog.set_level(logging.DEBUG, logger="picobot.channels.feishu.webhook")
    status, answer = call(rt, headers, body)
    assert status == expected, answer
    assert recorded(rt) == [] and rt.queue.events == []  # type: ignore[attr-defined]
    lines = [r.getMessage() for r in caplog.records if r.name == "picobot.channels.feishu.webhook"]
    assert len(lines) == 1, lines
    for secret in (VTOK, EKEY, "secret_test_1", "hi"):  # no secrets, no message content
        assert secret not in lines[0] and secret not in json.dumps(answer)


def test_lone_surrogates_in_a_message_are_stored_repaired(rt: Runtime) -> None:
    event = message_event("om_\ud800x", "a \udfff b")
    event["header"]["odd\udc00key"] = "\ud83d"
    status, answer = call(rt, *wire(event))
    assert status == 200
    rows = recorded(rt)
    assert rows[0]["event_key"] == "om_\ufffdx"
    payload = payload_of(rows[0])
    json.dumps(payload, ensure_ascii=False).encode("utf-8")
    assert json.loads(payload["event"]["message"]["content"])["text"] == "a \udfff b"  # still escaped inside the string


def test_a_challenge_with_lone_surrogates_still_gets_json(rt: Runtime) -> None:
    check = json.dumps({"challenge": "c\ud800", "token": VTOK, "type": "url_verification"}).encode()
    assert call(rt, {}, check) == (200, {"challenge": "c\ufffd"})


def test_without_an_encrypt_key_the_token_alone_authenticates(tmp_path: Path) -> None:
    runtime = build_runtime(make_config(tmp_path, encrypt_key=""), RecordingQueue(), migrate=True)  # type: ignore[arg-type]
    try:
        body = json.dumps(message_event("om_tok")).encode()
        assert call(runtime, {}, body)[0] == 200
        assert call(runtime, {}, json.dumps(message_event(token="nope")).encode())[0] == 401
        assert call(runtime, {}, json.dumps({"encrypt": encrypt("{}", EKEY)}).encode())[0] == 400
        assert [r["event_key"] for r in recorded(runtime)] == ["om_tok"]
    finally:
        runtime.close()


def test_storage_down_answers_500_so_feishu_redelivers(rt: Runtime, caplog: pytest.LogCaptureFixture) -> None:
    with rt.db.begin() as conn:
        conn.execute(sa.text("ALTER TABLE channel_events RENAME TO channel_events_away"))
    status, answer = call(rt, *wire(message_event("om_lost")))
    assert (status, answer["code"]) == (500, 500) and rt.queue.events == []  # type: ignore[attr-defined]
    assert all("om_lost" not in r.getMessage() for r in caplog.records)


# --- properties ----------------------------------------------------------------------------

any_text = st.text(st.characters(blacklist_categories=()), max_size=40)  # surrogates included
json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | any_text,
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(any_text, inner, max_size=4),
                           max_leaves=20)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=st.binary(max_size=300) | json_values.map(lambda v: json.dumps(v).encode()),
       headers=st.dictionaries(st.sampled_from(["X-Lark-Signature", "X-Lark-Request-Timestamp", "x-lark-request-nonce",
                                                "Content-Type", "X-Other"]), any_text, max_size=4))
def test_handle_never_raises_and_always_answers_json(rt: Runtime, body: bytes, headers: dict[str, str]) -> None:
    status, answer = call(rt, headers, body)
    assert status in (200, 400, 401, 413) and isinstance(answer, dict)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=any_text, extra=json_values, message_type=st.sampled_from(["text", "post", "image", "x\ud800"]))
def test_signed_events_with_any_text_are_answered_json(rt: Runtime, text: str, extra: Any, message_type: str) -> None:
    event = message_event(text=text)
    event["event"]["message"]["message_type"] = message_type
    event["event"]["extra"] = extra
    status, answer = call(rt, *wire(event))
    assert status == 200, answer


# --- interop with the official SDK ---------------------------------------------------------


@settings(max_examples=50, deadline=None)
@given(text=st.text(max_size=200), key=st.text(min_size=1, max_size=40))
def test_our_encryption_is_what_the_sdk_decrypts(text: str, key: str) -> None:
    from lark_oapi.core.utils.decryptor import AESCipher

    from picobot.channels.feishu.crypto import decrypt

    token = encrypt(text, key)
    assert AESCipher(key).decrypt_str(token) == text == decrypt(token, key)


def test_the_sdk_and_we_accept_and_refuse_the_same_requests(rt: Runtime) -> None:
    import lark_oapi as lark
    from lark_oapi.core.model import RawRequest

    seen: list[str] = []
    sdk = (lark.EventDispatcherHandler.builder(EKEY, VTOK)
           .register_p2_im_message_receive_v1(lambda data: seen.append(data.event.message.message_id)).build())

    def sdk_accepts(headers: dict[str, str], body: bytes) -> bool:
        req = RawRequest()
        req.uri, req.headers, req.body = "/feishu/events", headers, body
        return sdk.do(req).status_code == 200

    good = wire(message_event("om_interop"))
    cases = {
        "good": good,
        "bad signature": ({**good[0], "X-Lark-Signature": "f" * 64}, good[1]),
        "signed with another nonce": ({**good[0], "X-Lark-Request-Nonce": "other"}, good[1]),
        "signature of another body": wire(message_event("om_k"))[:1] + (good[1],),
        "wrong token": wire(message_event("om_wt", token="wrong")),
    }
    verdicts = {name: (sdk_accepts(h, b), call(rt, h, b)[0] == 200) for name, (h, b) in cases.items()}
    assert verdicts == {"good": (True, True), "bad signature": (False, False),
                        "signed with another nonce": (False, False), "signature of another body": (False, False),
                        "wrong token": (False, False)}, verdicts
    assert seen == ["om_interop"] and [r["event_key"] for r in recorded(rt)] == ["om_interop"]


def test_the_fake_feishu_senders_requests_are_judged_like_feishus(rt: Runtime) -> None:
    from scripts.fake_feishu import EventSender

    sender = EventSender("http://127.0.0.1:9/unused", verification_token=VTOK, encrypt_key=EKEY)
    try:
        event = sender.message(message_id="om_fake", text="hi")
        body, headers = sender.wire(event)
        assert call(rt, headers, body)[0] == 200
        for bad in ({"bad_signature": True}, {"stale": True}, {"wrong_token": True}):
            assert call(rt, *reversed(sender.wire(sender.message(), **bad)))[0] == 401, bad
        body, headers = sender.wire(sender.url_verification("c-fake"))
        assert call(rt, headers, body) == (200, {"challenge": "c-fake"})
    finally:
        sender.close()
    assert [r["event_key"] for r in recorded(rt)] == ["om_fake"]


# --- the Flask route -----------------------------------------------------------------------


def test_the_route_is_open_to_feishu_and_answers_only_json(rt: Runtime) -> None:
    from web.app import create_app

    client = create_app(runtime=rt).test_client()
    check = {"challenge": "c9", "token": VTOK, "type": "url_verification"}
    resp = client.post("/feishu/events", json=check)  # no pairing token: Feishu has none
    assert resp.status_code == 200 and resp.get_json() == {"challenge": "c9"}
    cases = [("GET", "/feishu/events", None, 405), ("POST", "/feishu/events/x", b"{}", 404),
             ("POST", "/feishu/events", b"x" * (1024 * 1024 + 1), 413), ("POST", "/feishu/events", b"<html>", 400),
             ("PUT", "/feishu/events", b"{}", 405)]
    for method, path, body, status in cases:
        resp = client.open(path, method=method, data=body)
        assert (resp.status_code, resp.is_json) == (status, True), (method, path, resp.data[:200])
        assert resp.get_json()["code"] == status
    assert client.get("/api/sessions").status_code == 401  # the pairing guard still covers the rest
    other = client.get("/no/such/page")
    assert other.status_code == 401 and not other.is_json


@pytest.mark.parametrize("feishu", [{"mode": "long_connection"}, {"enabled": False}])
def test_the_route_exists_only_for_an_enabled_webhook_channel(tmp_path: Path, feishu: dict[str, Any]) -> None:
    from web.app import create_app

    runtime = build_runtime(make_config(tmp_path, **feishu), RecordingQueue(), migrate=True)  # type: ignore[arg-type]
    try:
        app = create_app(runtime=runtime)
        assert "/feishu/events" not in {rule.rule for rule in app.url_map.iter_rules()}
        assert app.test_client().post("/feishu/events", json={}).status_code == 401  # guarded like any path
    finally:
        runtime.close()


def test_a_custom_path_is_served_and_bad_keys_fail_at_load(tmp_path: Path) -> None:
    from web.app import create_app

    from picobot.errors import ConfigError

    runtime = build_runtime(make_config(tmp_path, webhook_path="/hooks/lark"), RecordingQueue(), migrate=True)  # type: ignore[arg-type]
    try:
        client = create_app(runtime=runtime).test_client()
        check = {"challenge": "c1", "token": VTOK, "type": "url_verification"}
        assert client.post("/hooks/lark", json=check).get_json() == {"challenge": "c1"}
    finally:
        runtime.close()
    from picobot.app import check_config  # the channels plugin checks its channels' keys at start

    with pytest.raises(ConfigError, match=r"channels\.feishu\.webhok_path: unknown key"):
        check_config(make_config(tmp_path, webhok_path="/x"))
    with pytest.raises(ConfigError, match=r"channels\.feishu\.mode"):
        check_config(make_config(tmp_path, mode="websocket"))
    with pytest.raises(ConfigError, match=r"channels\.feishu\.verification_token: webhook mode needs"):
        build_runtime(make_config(tmp_path, verification_token="", encrypt_key=""), RecordingQueue())


def test_secrets_are_masked_and_collected_for_redaction(tmp_path: Path) -> None:
    from picobot.config.secrets import masked, secret_values

    config = make_config(tmp_path)
    shown = json.dumps(masked(config)) + repr(config) + repr(FeishuConfig.from_channel(config.channels["feishu"]))
    for secret in (VTOK, EKEY, "secret_test_1"):
        assert secret not in shown
        assert secret in secret_values(config)
