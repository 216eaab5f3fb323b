"""The fake Feishu speaks what the official lark-oapi SDK expects, and behaves like Feishu where we rely on it."""

from __future__ import annotations

import json
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import httpx
import pytest

from scripts.fake_feishu import EventSender, FakeFeishu, encrypt
from tests.http_client import HTTP

TOKEN_PATH = "/open-apis/auth/v3/tenant_access_token/internal"


@pytest.fixture
def fake() -> Iterator[FakeFeishu]:
    # the SDK caches tokens process-wide by app_id: a fresh app per test keeps fakes apart
    f = FakeFeishu(app_id="cli_" + uuid.uuid4().hex[:12], app_secret="s3cret").start()
    yield f
    f.stop()


class Api:
    """A bare httpx client of the fake (what picobot's FeishuApi does, minus caching)."""

    def __init__(self, fake: FakeFeishu) -> None:
        self.fake = fake
        self.token = self.fetch_token()

    def fetch_token(self) -> str:
        r = HTTP.post(self.fake.base_url + TOKEN_PATH, json={"app_id": self.fake.app_id, "app_secret": "s3cret"})
        return r.json()["tenant_access_token"]

    def call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return HTTP.request(method, self.fake.base_url + "/open-apis" + path,
                             headers={"Authorization": f"Bearer {self.token}"}, **kw)

    def send(self, chat_id: str, text: str, uuid_: str | None = None, msg_type: str = "text",
             content: dict | None = None) -> httpx.Response:
        body = {"receive_id": chat_id, "msg_type": msg_type, "content": json.dumps(content or {"text": text})}
        if uuid_:
            body["uuid"] = uuid_
        return self.call("POST", "/im/v1/messages", params={"receive_id_type": "chat_id"}, json=body)


# --- interop with the official SDK ---------------------------------------------------------------

def test_sdk_client_sends_and_reads_back(fake: FakeFeishu) -> None:
    import lark_oapi as lark
    from lark_oapi.api.im.v1 import (CreateMessageRequest, CreateMessageRequestBody, GetMessageRequest)

    client = lark.Client.builder().app_id(fake.app_id).app_secret("s3cret").domain(fake.base_url).build()
    req = CreateMessageRequest.builder().receive_id_type("chat_id").request_body(
        CreateMessageRequestBody.builder().receive_id("oc_sdk").msg_type("text")
        .content(json.dumps({"text": "hello from the SDK"})).uuid("sdk-1").build()).build()
    resp = client.im.v1.message.create(req)
    assert resp.success(), (resp.code, resp.msg)
    message_id = resp.data.message_id
    assert fake.texts("oc_sdk") == ["hello from the SDK"]

    got = client.im.v1.message.get(GetMessageRequest.builder().message_id(message_id).build())
    assert got.success(), (got.code, got.msg)
    assert got.data.items[0].chat_id == "oc_sdk"
    assert json.loads(got.data.items[0].body.content) == {"text": "hello from the SDK"}


def test_sdk_decryptor_reads_what_we_encrypt() -> None:
    from lark_oapi.core.utils import AESCipher

    plain = json.dumps({"schema": "2.0", "x": "数据" * 50})
    assert AESCipher("ekey").decrypt_str(encrypt("ekey", plain.encode())) == plain


def test_sdk_dispatcher_accepts_sender_signature_and_token() -> None:
    import lark_oapi as lark
    from lark_oapi.core.model import RawRequest

    seen: list[Any] = []
    handler = lark.EventDispatcherHandler.builder("ekey", "vtok").register_p2_im_message_receive_v1(
        seen.append).build()
    sender = EventSender("http://127.0.0.1:9/unused", verification_token="vtok", encrypt_key="ekey")
    event = sender.message(chat_id="oc_9", text="signed hello", sender_open_id="ou_alice")

    def dispatch(**kw: Any) -> int:
        body, headers = sender.wire(event, **kw)
        req = RawRequest()
        req.uri, req.headers, req.body = "/feishu/events", headers, body
        return handler.do(req).status_code

    assert dispatch() == 200
    assert len(seen) == 1
    msg = seen[0].event.message
    assert (msg.chat_id, json.loads(msg.content)["text"]) == ("oc_9", "signed hello")
    assert seen[0].event.sender.sender_id.open_id == "ou_alice"
    assert dispatch(bad_signature=True) == 500       # the SDK checks the signature we make
    assert dispatch(wrong_token=True) == 500
    assert len(seen) == 1
    sender.close()


# --- the fake's Feishu behaviour -------------------------------------------------------------

def test_uuid_makes_send_idempotent(fake: FakeFeishu) -> None:
    api = Api(fake)
    first = api.send("oc_1", "once", uuid_="k-1").json()["data"]["message_id"]
    again = api.send("oc_1", "once", uuid_="k-1").json()["data"]["message_id"]
    other = api.send("oc_1", "twice", uuid_="k-2").json()["data"]["message_id"]
    assert first == again != other
    assert [m["uuid"] for m in fake.messages_for("oc_1")] == ["k-1", "k-2"]


def test_token_checks(fake: FakeFeishu) -> None:
    bad = HTTP.post(fake.base_url + TOKEN_PATH, json={"app_id": fake.app_id, "app_secret": "nope"}).json()
    assert bad["code"] != 0 and "tenant_access_token" not in bad
    assert HTTP.get(fake.base_url + "/open-apis/bot/v3/info").json()["code"] == 99991661
    api = Api(fake)
    assert api.call("GET", "/bot/v3/info").json()["bot"]["open_id"] == fake.bot_open_id
    fake.expire_tokens()
    assert api.call("GET", "/bot/v3/info").json()["code"] == 99991663
    api.token = api.fetch_token()
    assert api.call("GET", "/bot/v3/info").json()["code"] == 0
    assert all(c["body"]["app_secret"] == "<redacted>" for c in fake.calls if c["path"] == TOKEN_PATH)


def test_errors_feishu_returns(fake: FakeFeishu) -> None:
    api = Api(fake)
    fake.set_chat("oc_gone", "removed")
    fake.set_chat("oc_dead", "dissolved")
    assert api.send("oc_gone", "x").json()["code"] == 230002
    assert api.send("oc_dead", "x").json()["code"] == 232009
    big = {"schema": "2.0", "body": {"elements": [{"tag": "markdown", "content": "x" * 31_000}]}}
    assert api.send("oc_1", "", msg_type="interactive", content=big).json()["code"] == 230025
    r = api.call("POST", "/im/v1/messages", params={"receive_id_type": "nope"},
                 json={"receive_id": "oc_1", "msg_type": "text", "content": "{}"})
    assert r.json()["code"] == 230001
    assert fake.sent == []

    fake.fail(status=429, times=1, reset=7)
    r = api.send("oc_1", "x")
    assert (r.status_code, r.json()["code"], r.headers["x-ogw-ratelimit-reset"]) == (429, 99991400, "7")
    assert api.send("oc_1", "x").json()["code"] == 0
    fake.down(True)
    assert api.send("oc_1", "x").status_code == 503
    assert HTTP.post(fake.base_url + TOKEN_PATH, json={}).status_code == 503
    fake.down(False)
    assert api.send("oc_1", "x").json()["code"] == 0


def test_rate_limit_per_chat() -> None:
    fake = FakeFeishu(app_id="cli_rl", app_secret="s3cret", rate_limit_qps=1).start()
    try:
        api = Api(fake)
        assert api.send("oc_a", "1").status_code == 200
        limited = api.send("oc_a", "2")
        assert (limited.status_code, limited.json()["code"]) == (429, 99991400)
        assert api.send("oc_b", "1").status_code == 200      # another chat has its own budget
    finally:
        fake.stop()


def test_reply_reaction_resource_edit(fake: FakeFeishu) -> None:
    api = Api(fake)
    sender = EventSender("http://127.0.0.1:9/unused", fake=fake)
    user_msg = sender.message(chat_id="oc_r", text="question")["event"]["message"]["message_id"]
    r = api.call("POST", f"/im/v1/messages/{user_msg}/reply",
                 json={"msg_type": "text", "content": json.dumps({"text": "answer"}), "uuid": "r1"})
    reply = r.json()["data"]
    assert fake.sent[-1]["kind"] == "reply" and fake.sent[-1]["reply_to"] == user_msg
    assert fake.texts("oc_r") == ["answer"]

    rid = api.call("POST", f"/im/v1/messages/{user_msg}/reactions",
                   json={"reaction_type": {"emoji_type": "Typing"}}).json()["data"]["reaction_id"]
    assert api.call("DELETE", f"/im/v1/messages/{user_msg}/reactions/{rid}").json()["code"] == 0
    assert fake.reactions[user_msg] == [{"reaction_id": rid, "emoji": "Typing", "deleted": True}]

    fake.add_resource(user_msg, "img_1", b"\x89PNG...", "image/png")
    got = api.call("GET", f"/im/v1/messages/{user_msg}/resources/img_1", params={"type": "image"})
    assert (got.content, got.headers["content-type"]) == (b"\x89PNG...", "image/png")
    assert api.call("GET", f"/im/v1/messages/{user_msg}/resources/nope", params={"type": "image"}).json()["code"] != 0

    put = api.call("PUT", f"/im/v1/messages/{reply['message_id']}",
                   json={"msg_type": "text", "content": json.dumps({"text": "better answer"})})
    assert put.json()["code"] == 0 and fake.texts("oc_r") == ["better answer"]
    fake.recall(user_msg)
    assert api.call("POST", f"/im/v1/messages/{user_msg}/reply",
                    json={"msg_type": "text", "content": "{}"}).json()["code"] == 230011


def test_cardkit_streaming(fake: FakeFeishu) -> None:
    api = Api(fake)
    card = {"schema": "2.0", "config": {"streaming_mode": True},
            "body": {"elements": [{"tag": "markdown", "element_id": "md", "content": ""}]}}
    card_id = api.call("POST", "/cardkit/v1/cards",
                       json={"type": "card_json", "data": json.dumps(card)}).json()["data"]["card_id"]
    api.send("oc_c", "", msg_type="interactive", content={"type": "card", "data": {"card_id": card_id}})

    def stream(text: str, seq: int) -> int:
        return api.call("PUT", f"/cardkit/v1/cards/{card_id}/elements/md/content",
                        json={"content": text, "sequence": seq, "uuid": f"s{seq}"}).json()["code"]

    assert stream("Hel", 1) == 0 and stream("Hello", 2) == 0
    assert stream("stale", 2) != 0                                  # sequence must increase
    settings = json.dumps({"config": {"streaming_mode": False}})
    assert api.call("PATCH", f"/cardkit/v1/cards/{card_id}/settings",
                    json={"settings": settings, "sequence": 3, "uuid": "c"}).json()["code"] == 0
    assert stream("after close", 4) != 0
    assert fake.cards[card_id]["texts"] == ["Hel", "Hello"] and fake.cards[card_id]["closed"]
    assert fake.texts("oc_c") == ["Hello"]


def test_add_route_comes_first(fake: FakeFeishu) -> None:
    fake.add_route("POST", "/callback/ws/endpoint",
                   lambda q, h, b: (200, {"X-Fake": "1"}, json.dumps({"code": 0, "got": json.loads(b)}).encode()))
    r = HTTP.post(fake.base_url + "/callback/ws/endpoint", json={"AppID": "a"})
    assert r.json() == {"code": 0, "got": {"AppID": "a"}} and r.headers["x-fake"] == "1"


# --- the event sender ----------------------------------------------------------------------

class SlowWebhook:
    """A webhook that answers the first `slow` requests late (or with 500 if fail) and records bodies."""

    def __init__(self, slow: int, delay: float, fail: bool = False) -> None:
        self.bodies: list[bytes] = []
        outer = self

        class H(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                outer.bodies.append(self.rfile.read(int(self.headers["Content-Length"])))
                late = len(outer.bodies) <= slow
                if late and not fail:
                    time.sleep(delay)
                self.send_response(500 if late and fail else 200)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"{}")

            def log_message(self, *a: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), H)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/feishu/events"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("fail", [False, True])
def test_sender_redelivers_slow_or_failed_answers(fail: bool) -> None:
    hook = SlowWebhook(slow=1, delay=0.5, fail=fail)
    sender = EventSender(hook.url, ack_deadline=0.2)
    try:
        sender.post(sender.message(text="hi"), duplicates=2)
        assert len(hook.bodies) == 4           # slow first answer redelivered once, plus 2 duplicates
        assert [d["retry"] for d in sender.deliveries] == [False, True, True, True]
        assert len({d["event_id"] for d in sender.deliveries}) == 1
    finally:
        sender.close()
        hook.close()


def test_sender_plain_and_url_verification() -> None:
    hook = SlowWebhook(slow=0, delay=0)
    sender = EventSender(hook.url, encrypt_key=None)
    try:
        sender.post(sender.url_verification(challenge="c-1"))
        sent = json.loads(hook.bodies[0])
        assert sent == {"challenge": "c-1", "token": "vtok", "type": "url_verification"}
        ev = sender.message(chat_type="group", text="@_user_1 hi", mentions=[{"open_id": "ou_bot", "key": "@_user_1"}],
                            parent_id="om_parent")
        assert ev["event"]["message"]["mentions"][0]["id"]["open_id"] == "ou_bot"
        assert ev["event"]["message"]["parent_id"] == "om_parent"
    finally:
        sender.close()
        hook.close()
