"""What the fake iLink keeps: QR logins, bot tokens, the update log, sent messages, typing, CDN blobs."""

from __future__ import annotations

import base64
import hashlib
import itertools
import os
import threading
import time
import uuid
from typing import Any

from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

QR_STATES = ("wait", "scaned", "confirmed", "expired", "scaned_but_redirect", "binded_redirect",
             "need_verifycode", "verify_code_blocked")


def aes_ecb(data: bytes, key: bytes, encrypt: bool) -> bytes:
    cipher = Cipher(algorithms.AES(key), modes.ECB())
    if encrypt:
        padder = padding.PKCS7(128).padder()
        enc = cipher.encryptor()
        return enc.update(padder.update(data) + padder.finalize()) + enc.finalize()
    dec = cipher.decryptor()
    unpadder = padding.PKCS7(128).unpadder()
    return unpadder.update(dec.update(data) + dec.finalize()) + unpadder.finalize()


class IlinkState:
    def __init__(self) -> None:
        self.lock = threading.Condition()
        self.bot_id = "fakebot@im.bot"
        self.tokens: set[str] = set()
        self.issued: list[str] = []  # every token ever handed out (tests check none leaks into logs)
        self.qrs: dict[str, dict[str, Any]] = {}  # key -> {"status", "queue": [next statuses], "polls", "hosts"}
        self.qr_plan: list[str] = []  # statuses the next QR goes through, one per status poll (then "wait")
        self.log: list[dict[str, Any]] = []  # every message ever offered to getupdates, in order
        self.sent: list[dict[str, Any]] = []  # accepted sendmessage bodies (msg), one per client_id
        self.sent_at: list[float] = []  # when each of `sent` was accepted (delivery-lag figures)
        self.duplicates = 0  # sendmessage calls whose client_id was accepted before
        self.rejected: list[dict[str, Any]] = []  # sendmessage calls answered with an error
        self.typing: list[dict[str, Any]] = []
        self.blobs: dict[str, bytes] = {}  # encrypted_query_param -> ciphertext
        self.last_from: dict[str, float] = {}  # user -> when the user last wrote (the delivery window)
        self.context: dict[str, str] = {}  # user -> latest context_token
        self.closed: set[str] = set()  # users whose window is closed until they write again
        self.fail_next: list[int] = []  # ret codes the next sendmessage calls answer with
        self.window_secs = 24 * 3600.0
        self._seq = itertools.count(1)
        self._mid = itertools.count(7_000_000_000_000_000_001)

    # ---- QR login --------------------------------------------------------------------------

    def new_qr(self) -> dict[str, Any]:
        key = "qr-" + uuid.uuid4().hex[:12]
        with self.lock:
            self.qrs[key] = {"status": "wait", "queue": list(self.qr_plan), "polls": 0, "hosts": []}
            self.qr_plan = []
        return {"ret": 0, "qrcode": key, "qrcode_img_content": f"https://liteapp.weixin.qq.com/q/{key}"}

    def qr_status(self, key: str, host: str, redirect_host: str) -> dict[str, Any]:
        with self.lock:
            qr = self.qrs.get(key)
            if qr is None:
                return {"ret": -1, "errmsg": "unknown qrcode"}
            qr["polls"] += 1
            qr["hosts"].append(host)
            if qr["queue"]:
                qr["status"] = qr["queue"].pop(0)
            status = qr["status"]
            if status in ("scaned_but_redirect",):
                qr["status"] = "scaned"  # after the redirect the phone still has to confirm
                return {"ret": 0, "status": status, "redirect_host": redirect_host}
            if status == "confirmed":
                token = "tok-" + uuid.uuid4().hex
                self.tokens.add(token)
                self.issued.append(token)
                qr["status"] = "used"
                return {"ret": 0, "status": "confirmed", "bot_token": token, "ilink_bot_id": self.bot_id,
                        "ilink_user_id": "owner@im.wechat", "baseurl": ""}
            return {"ret": 0, "status": status}

    def set_qr(self, status: str, key: str | None = None) -> None:
        """Move a QR (the newest one by default) to a status: what a phone would do."""
        with self.lock:
            if key is None:
                key = next(reversed(self.qrs)) if self.qrs else None
            if key is not None:
                self.qrs[key]["status"] = status
                self.lock.notify_all()

    def issue_token(self) -> str:
        token = "tok-" + uuid.uuid4().hex
        with self.lock:
            self.tokens.add(token)
            self.issued.append(token)
        return token

    def expire_session(self) -> None:
        """Every bot token stops working: calls answer errcode -14 (a rebind elsewhere, or long idle)."""
        with self.lock:
            self.tokens.clear()

    # ---- messages in -----------------------------------------------------------------------

    def message(self, from_user: str, text: str | None = "hello", items: list[dict[str, Any]] | None = None,
                **fields: Any) -> dict[str, Any]:
        """A user's message as getupdates delivers it (not yet offered)."""
        seq, mid = next(self._seq), next(self._mid)
        msg: dict[str, Any] = {
            "seq": seq, "message_id": mid, "from_user_id": from_user, "to_user_id": self.bot_id,
            "client_id": f"wx-{uuid.uuid4().hex[:16]}", "create_time_ms": int(time.time() * 1000),
            "session_id": "", "group_id": "", "message_type": 1, "message_state": 2,
            "context_token": f"ctx-{uuid.uuid4().hex[:20]}",
            "item_list": items if items is not None else [{"type": 1, "text_item": {"text": text}}],
        }
        msg.update(fields)
        return msg

    def offer(self, *msgs: Any) -> None:
        """Put raw messages (any JSON) into the update log, as they are."""
        with self.lock:
            for msg in msgs:
                self.log.append(msg)
                if isinstance(msg, dict) and isinstance(msg.get("from_user_id"), str) and msg.get("message_type") == 1:
                    user = msg["from_user_id"]
                    self.last_from[user] = time.time()
                    self.closed.discard(user)
                    if isinstance(msg.get("context_token"), str):
                        self.context[user] = msg["context_token"]
            self.lock.notify_all()

    def updates(self, cursor: str, hold: float) -> dict[str, Any]:
        try:
            start = int(cursor.removeprefix("c")) if cursor else 0
        except ValueError:
            start = 0
        deadline = time.monotonic() + hold
        with self.lock:
            while len(self.log) <= start and time.monotonic() < deadline:
                self.lock.wait(max(0.01, deadline - time.monotonic()))
            msgs = self.log[start:]
            nxt = f"c{len(self.log)}" if msgs else cursor
        return {"ret": 0, "msgs": msgs, "get_updates_buf": nxt, "longpolling_timeout_ms": int(hold * 1000)}

    # ---- messages out ----------------------------------------------------------------------

    def send(self, msg: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            if self.fail_next:
                code = self.fail_next.pop(0)
                self.rejected.append({"msg": msg, "ret": code})
                return {"ret": code, "errmsg": "fake failure"}
            items = msg.get("item_list")
            if not isinstance(items, list) or len(items) != 1:
                self.rejected.append({"msg": msg, "ret": -1})
                return {"ret": -1, "errmsg": "one item per message"}
            user = msg.get("to_user_id")
            at = self.last_from.get(user)
            if user in self.closed or at is None or time.time() - at > self.window_secs:
                self.rejected.append({"msg": msg, "ret": -2})
                return {"ret": -2, "errmsg": "the user has not written within the window"}
            if any(s.get("client_id") == msg.get("client_id") for s in self.sent):
                self.duplicates += 1
                return {"ret": 0}
            self.sent.append(msg)
            self.sent_at.append(time.time())
            self.lock.notify_all()
        return {"ret": 0}

    def texts(self, user: str) -> list[str]:
        with self.lock:
            return [str(item.get("text_item", {}).get("text")) for m in self.sent if m.get("to_user_id") == user
                    for item in m.get("item_list") or [] if item.get("type") == 1]

    def wait_sent(self, n: int, user: str, timeout: float = 60) -> list[str]:
        deadline = time.monotonic() + timeout
        with self.lock:
            while len(self.texts_locked(user)) < n:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise AssertionError(f"{len(self.texts_locked(user))} of {n} messages reached {user}")
                self.lock.wait(min(left, 0.5))
            return self.texts_locked(user)

    def texts_locked(self, user: str) -> list[str]:
        return [str(item.get("text_item", {}).get("text")) for m in self.sent if m.get("to_user_id") == user
                for item in m.get("item_list") or [] if item.get("type") == 1]

    def close_window(self, user: str) -> None:
        with self.lock:
            self.closed.add(user)

    # ---- CDN ---------------------------------------------------------------------------------

    def put_media(self, data: bytes, hex_key: bool = False) -> dict[str, Any]:
        """Store `data` on the CDN, encrypted; the `media` object an item refers to."""
        key = os.urandom(16)
        param = "eqp-" + uuid.uuid4().hex
        with self.lock:
            self.blobs[param] = aes_ecb(data, key, encrypt=True)
        aes = base64.b64encode(key.hex().encode() if hex_key else key).decode()
        return {"encrypt_query_param": param, "aes_key": aes, "encrypt_type": 1}

    def upload(self, ciphertext: bytes) -> str:
        param = "eqp-" + hashlib.sha1(ciphertext).hexdigest()
        with self.lock:
            self.blobs[param] = ciphertext
        return param
