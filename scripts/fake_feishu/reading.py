"""What tests read from the fake Feishu: the bot's messages per chat, their visible text, waiting for sends."""

from __future__ import annotations

import time
from typing import Any


class Reading:
    """Mixed into FakeFeishu (needs its `lock`, `sent` and `cards`)."""

    lock: Any
    sent: list[dict[str, Any]]
    cards: dict[str, dict[str, Any]]
    images: dict[str, dict[str, Any]]

    def messages_for(self, chat_id: str) -> list[dict[str, Any]]:
        with self.lock:
            return [dict(m) for m in self.sent if m["chat_id"] == chat_id]

    def texts(self, chat_id: str) -> list[str]:
        """The visible text of each bot message in a chat (cards: their markdown, streamed cards: last text)."""
        with self.lock:
            return [self.text_of(m) for m in self.sent if m["chat_id"] == chat_id]

    def text_of(self, sent: dict[str, Any]) -> str:
        content = sent["content"]
        with self.lock:
            card_id = (content.get("data") or {}).get("card_id") if content.get("type") == "card" else None
            if card_id and card_id in self.cards:
                card = self.cards[card_id]
                return card["texts"][-1] if card["texts"] else "\n".join(_strings(card["card"]))
        return "\n".join(_strings(content))

    def images_for(self, chat_id: str) -> list[dict[str, Any]]:
        """The image messages sent to a chat, each with the uploaded image's bytes (`data`)."""
        with self.lock:
            return [{**m, "data": self.images[m["content"]["image_key"]]["data"]} for m in self.sent
                    if m["chat_id"] == chat_id and m["msg_type"] == "image"]

    def wait_sent(self, count: int, chat_id: str | None = None, timeout: float = 30) -> list[dict[str, Any]]:
        """Block until at least `count` messages were sent (to chat_id if given); return them."""
        deadline = time.monotonic() + timeout
        while True:
            with self.lock:
                got = [dict(m) for m in self.sent if chat_id is None or m["chat_id"] == chat_id]
            if len(got) >= count or time.monotonic() > deadline:
                if len(got) < count:
                    raise TimeoutError(f"{len(got)} of {count} messages sent within {timeout} s")
                return got
            time.sleep(0.05)


def _strings(node: Any) -> list[str]:
    """Text values in a message or card JSON (text, content of markdown elements, post text runs)."""
    out: list[str] = []
    if isinstance(node, dict):
        for key, value in node.items():
            if key in ("text", "content") and isinstance(value, str):
                out.append(value)
            elif key not in ("tag", "href", "image_key", "file_key", "user_id"):
                out.extend(_strings(value))
    elif isinstance(node, list):
        for item in node:
            out.extend(_strings(item))
    return out


def buttons_of(sent: dict[str, Any]) -> list[tuple[str, str]]:
    """(label, callback command) of each button of a sent card (JSON 2.0 `behaviors` callbacks)."""
    found: list[tuple[str, str]] = []
    content = sent.get("content") if isinstance(sent.get("content"), dict) else {}
    for element in (content.get("body") or {}).get("elements") or []:
        if isinstance(element, dict) and element.get("tag") == "button":
            for behavior in element.get("behaviors") or []:
                value = behavior.get("value") if isinstance(behavior, dict) else None
                if isinstance(value, dict) and isinstance(value.get("command"), str):
                    found.append(((element.get("text") or {}).get("content", ""), value["command"]))
    return found
