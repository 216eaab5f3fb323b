"""EventSender: posts Feishu event callbacks (schema 2.0 im.message.receive_v1, url_verification) to a webhook.

Encrypts like Feishu (base64(iv + AES-256-CBC(sha256(encrypt_key), pkcs7(json)))) and signs
(X-Lark-Signature = sha256_hex(timestamp + nonce + encrypt_key + raw body)) when an encrypt key is set.
Like Feishu it redelivers an event whose answer took longer than 3 s (or failed), and it can send
duplicates on purpose. Pass `fake=` (a FakeFeishu) so the fake API knows the user's messages (reply
parents, reaction targets).
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import time
import uuid
from typing import Any

import httpx
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

ACK_DEADLINE_SECS = 3.0


def encrypt(encrypt_key: str, plaintext: bytes) -> str:
    key = hashlib.sha256(encrypt_key.encode()).digest()
    iv = os.urandom(16)
    padder = padding.PKCS7(128).padder()
    padded = padder.update(plaintext) + padder.finalize()
    enc = Cipher(algorithms.AES(key), modes.CBC(iv)).encryptor()
    return base64.b64encode(iv + enc.update(padded) + enc.finalize()).decode()


def sign(timestamp: str, nonce: str, encrypt_key: str, body: bytes) -> str:
    return hashlib.sha256((timestamp + nonce + encrypt_key).encode() + body).hexdigest()


class EventSender:
    def __init__(self, webhook_url: str, verification_token: str = "vtok", encrypt_key: str | None = "ekey",
                 *, app_id: str = "cli_test", fake: Any = None, timeout: float = 10.0,
                 redeliver: bool = True, ack_deadline: float = ACK_DEADLINE_SECS) -> None:
        self.webhook_url = webhook_url
        self.verification_token = verification_token
        self.encrypt_key = encrypt_key
        self.app_id = app_id
        self.fake = fake
        self.timeout = timeout
        self.redeliver = redeliver           # Feishu retries a slow (> 3 s) or failed answer; tests count them
        self.ack_deadline = ack_deadline
        self.deliveries: list[dict[str, Any]] = []   # every POST made: event_id, status, seconds, retry
        self._client = httpx.Client(timeout=timeout)

    def close(self) -> None:
        self._client.close()

    # --- building events -------------------------------------------------------------------

    def message(self, chat_id: str = "oc_1", text: str | None = "hi", sender_open_id: str = "ou_u1",
                chat_type: str = "p2p", message_id: str | None = None, mentions: list[dict[str, Any]] | None = None,
                message_type: str = "text", content: dict[str, Any] | None = None,
                parent_id: str | None = None) -> dict[str, Any]:
        """An im.message.receive_v1 event. `mentions` items: {"key": "@_user_1", "open_id": …, "name": …}
        (or full Feishu mention dicts); `content` overrides the text for post/image/file messages."""
        message_id = message_id or "om_" + uuid.uuid4().hex[:24]
        body = content if content is not None else {"text": text or ""}
        now_ms = str(int(time.time() * 1000))
        message: dict[str, Any] = {
            "message_id": message_id, "root_id": parent_id or "", "parent_id": parent_id or "",
            "create_time": now_ms, "update_time": now_ms, "chat_id": chat_id, "chat_type": chat_type,
            "message_type": message_type, "content": json.dumps(body, ensure_ascii=False),
            "user_agent": "fake-feishu"}
        if mentions:
            message["mentions"] = [self._mention(m) for m in mentions]
        event = {"schema": "2.0",
                 "header": {"event_id": uuid.uuid4().hex, "event_type": "im.message.receive_v1",
                            "create_time": now_ms, "token": self.verification_token, "app_id": self.app_id,
                            "tenant_key": "fake_tenant"},
                 "event": {"sender": {"sender_id": {"open_id": sender_open_id, "union_id": "on_" + sender_open_id[3:],
                                                    "user_id": "u_" + sender_open_id[3:]},
                                      "sender_type": "user", "tenant_key": "fake_tenant"},
                           "message": message}}
        if self.fake is not None:
            self.fake.add_message(message_id, chat_id, message_type, body, sender_open_id, parent_id or "")
        return event

    def card_action(self, chat_id: str, message_id: str, command: str, operator_open_id: str = "ou_u1",
                    event_id: str | None = None) -> dict[str, Any]:
        """A card.action.trigger event: a user pressed a card button whose callback value is {"command": …}."""
        now_ms = str(int(time.time() * 1000))
        return {"schema": "2.0",
                "header": {"event_id": event_id or uuid.uuid4().hex, "event_type": "card.action.trigger",
                           "create_time": now_ms, "token": self.verification_token, "app_id": self.app_id,
                           "tenant_key": "fake_tenant"},
                "event": {"operator": {"tenant_key": "fake_tenant", "open_id": operator_open_id,
                                       "union_id": "on_" + operator_open_id[3:], "user_id": "u_" + operator_open_id[3:]},
                          "token": "c-" + uuid.uuid4().hex,  # the card's update token
                          "action": {"value": {"command": command}, "tag": "button"},
                          "host": "im_message",
                          "context": {"open_message_id": message_id, "open_chat_id": chat_id}}}

    def bot_mention(self, key: str = "@_user_1") -> dict[str, Any]:
        """A mention of the fake's bot (needs fake=)."""
        return {"key": key, "open_id": self.fake.bot_open_id, "name": self.fake.bot_name}

    @staticmethod
    def _mention(m: dict[str, Any]) -> dict[str, Any]:
        if "id" in m:
            return m
        oid = m["open_id"]
        return {"key": m.get("key", "@_user_1"), "name": m.get("name", "someone"), "tenant_key": "fake_tenant",
                "id": {"open_id": oid, "union_id": "on_" + oid[3:], "user_id": "u_" + oid[3:]}}

    def url_verification(self, challenge: str | None = None, token: str | None = None) -> dict[str, Any]:
        return {"challenge": challenge or uuid.uuid4().hex, "token": token or self.verification_token,
                "type": "url_verification"}

    # --- sending -------------------------------------------------------------------------------

    def wire(self, event: dict[str, Any], *, bad_signature: bool = False, stale: bool = False,
             wrong_token: bool = False) -> tuple[bytes, dict[str, str]]:
        """The raw body and headers Feishu would send for `event`."""
        if wrong_token:
            event = json.loads(json.dumps(event))
            if "header" in event:
                event["header"]["token"] = "not-the-token"
            else:
                event["token"] = "not-the-token"
        plain = json.dumps(event, ensure_ascii=False).encode()
        headers = {"Content-Type": "application/json; charset=utf-8", "User-Agent": "Go-http-client/1.1"}
        if not self.encrypt_key:
            return plain, headers
        body = json.dumps({"encrypt": encrypt(self.encrypt_key, plain)}).encode()
        ts = str(int(time.time()) - (3600 if stale else 0))
        nonce = uuid.uuid4().hex[:16]
        signature = sign(ts, nonce, self.encrypt_key, body)
        if bad_signature:
            signature = signature[:-4] + ("0000" if signature[-4:] != "0000" else "1111")
        headers.update({"X-Lark-Request-Timestamp": ts, "X-Lark-Request-Nonce": nonce, "X-Lark-Signature": signature})
        return body, headers

    def post(self, event: dict[str, Any], duplicates: int = 0, bad_signature: bool = False, stale: bool = False,
             wrong_token: bool = False) -> httpx.Response:
        """Deliver `event` (plus `duplicates` extra copies); redeliver while the answer is slow or not 200.

        Returns the first delivery's response."""
        first: httpx.Response | None = None
        for copy in range(duplicates + 1):
            resp = self._deliver(event, bad_signature, stale, wrong_token, retry=copy > 0)
            first = first or resp
        assert first is not None
        return first

    def _deliver(self, event: dict[str, Any], bad_signature: bool, stale: bool, wrong_token: bool,
                 retry: bool) -> httpx.Response:
        event_id = (event.get("header") or {}).get("event_id")
        first: httpx.Response | None = None
        attempts = 1 + (3 if self.redeliver else 0)   # Feishu: retries at 15 s, 5 min, 1 h, 6 h (here: at once)
        for attempt in range(attempts):
            body, headers = self.wire(event, bad_signature=bad_signature, stale=stale, wrong_token=wrong_token)
            started = time.monotonic()
            try:
                resp = self._client.post(self.webhook_url, content=body, headers=headers)
            except httpx.HTTPError as exc:
                self.deliveries.append({"event_id": event_id, "status": None, "error": repr(exc),
                                        "seconds": time.monotonic() - started, "retry": retry or attempt > 0})
                if attempt + 1 == attempts:
                    raise
                continue
            seconds = time.monotonic() - started
            self.deliveries.append({"event_id": event_id, "status": resp.status_code, "seconds": seconds,
                                    "retry": retry or attempt > 0})
            first = first or resp
            if resp.status_code == 200 and seconds <= self.ack_deadline:
                break
            if bad_signature or stale or wrong_token:
                break      # a rejected forgery is not something Feishu itself would retry
        assert first is not None
        return first

    def send(self, text: str, **kw: Any) -> httpx.Response:
        """Build a message event with `text` and post it."""
        return self.post(self.message(text=text, **kw))
