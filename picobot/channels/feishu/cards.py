"""Feishu message bodies: Markdown cards (JSON 2.0), streaming cards, plain text, and splitting long text.

A long answer is split into parts that each stay within ``max_message_chars`` characters and within
Feishu's 30 KB card limit (measured on the serialised card JSON, as Feishu measures it). A cut never
breaks a fenced code block: a part that ends inside one closes the fence, and the next part reopens
it with the same opening line. Cuts fall between lines; only a line too long for a part is cut inside.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

CARD_MAX_BYTES = 30 * 1024
TEXT_MAX_BYTES = 150 * 1024
SAFETY_BYTES = 512
STREAM_ELEMENT_ID = "answer"

_OPENER = re.compile(r" {0,3}(`{3,}|~{3,})(.*)")
_LINES = re.compile(r"[^\n]*\n|[^\n]+")


def markdown_card(text: str) -> dict:
    """A card that renders `text` as Markdown (tables and code blocks included)."""
    return {"schema": "2.0", "config": {"update_multi": True, "width_mode": "fill"},
            "body": {"elements": [{"tag": "markdown", "content": text}]}}


def buttons_card(text: str, buttons: list[list[str]]) -> dict:
    """A card with `text` (as written, not Markdown) and one button per (label, slash command) pair.

    A press arrives as a `card.action.trigger` event whose `action.value.command` is the command
    (webhook.py records it; inbound.py makes it the presser's input)."""
    kinds = {"Approve": "primary", "Deny": "danger"}
    return {"schema": "2.0", "config": {"update_multi": True, "width_mode": "fill"},
            "body": {"elements": [
                {"tag": "div", "text": {"tag": "plain_text", "content": text}},
                *[{"tag": "button", "text": {"tag": "plain_text", "content": label}, "type": kinds.get(label, "default"),
                   "behaviors": [{"type": "callback", "value": {"command": command}}]}
                  for label, command in buttons]]}}


def streaming_card(text: str = "", summary: str = "…") -> dict:
    """A CardKit card in streaming mode with one Markdown element the stream writes into."""
    return {"schema": "2.0",
            "config": {"update_multi": True, "width_mode": "fill", "streaming_mode": True,
                       "summary": {"content": summary},
                       "streaming_config": {"print_frequency_ms": {"default": 50}, "print_step": {"default": 5}}},
            "body": {"elements": [{"tag": "markdown", "element_id": STREAM_ELEMENT_ID, "content": text}]}}


def card_message(card_id: str) -> dict:
    """The content of an `interactive` message that shows a CardKit card."""
    return {"type": "card", "data": {"card_id": card_id}}


def text_content(text: str) -> dict:
    return {"text": text}


def json_bytes(obj: object) -> int:
    """Size of `obj` serialised the way FeishuApi sends it."""
    return len(json.dumps(obj, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def _cost(s: str) -> int:
    return json_bytes(s) - 2  # JSON escapes are per character, so this adds up


@dataclass
class Part:
    prefix: str  # a reopened fence line, or ""
    body: str    # a slice of the original text; the bodies concatenate back to it
    suffix: str  # a closing fence, or ""

    @property
    def text(self) -> str:
        return self.prefix + self.body + self.suffix


class _Fence:
    """Tracks whether we are inside a fenced code block, line by line (CommonMark's rules, simplified)."""

    def __init__(self, max_line: int):
        self.max_line = max_line
        self.open_line: str | None = None  # the opening line, stripped, while inside
        self._marker = ""

    def feed(self, line: str) -> None:
        s = line.rstrip("\n")
        if len(s) > self.max_line:
            return
        m = _OPENER.fullmatch(s)
        if not m:
            return
        marker, info = m.group(1), m.group(2)
        if self.open_line is None:
            if not (marker[0] == "`" and "`" in info):
                self.open_line, self._marker = s.strip(), marker
        elif marker[0] == self._marker[0] and len(marker) >= len(self._marker) and not info.strip():
            self.open_line, self._marker = None, ""

    def closing(self, body: str) -> str:
        if self.open_line is None:
            return ""
        return ("" if body.endswith("\n") or not body else "\n") + self._marker


def fence_line_max(max_chars: int) -> int:
    """Longest line still taken as a fence line; longer lines are plain text (and may be cut)."""
    return max(12, min(80, max_chars // 8))


def fences_balanced(text: str, max_chars: int) -> bool:
    """True when `text` ends outside any fenced code block (by the splitter's own reading)."""
    fence = _Fence(fence_line_max(max_chars))
    for line in _LINES.findall(text):
        fence.feed(line)
    return fence.open_line is None


class _Splitter:
    def __init__(self, max_chars: int, max_bytes: int, fences: bool):
        self.fmax = fence_line_max(max_chars)
        reserve = 2 * (self.fmax + 2) if fences else 0
        self.char_budget = max_chars - reserve
        self.byte_budget = max_bytes - 6 * reserve
        self.fence = _Fence(self.fmax if fences else -1)
        self.parts: list[Part] = []
        self._start_part()

    def _start_part(self) -> None:
        self.prefix = self.fence.open_line + "\n" if self.fence.open_line else ""
        self.body: list[str] = []
        self.chars, self.bytes = 0, 0

    def _fits(self, chars: int, nbytes: int) -> bool:
        return self.chars + chars <= self.char_budget and self.bytes + nbytes <= self.byte_budget

    def _add(self, piece: str, nbytes: int) -> None:
        self.body.append(piece)
        self.chars += len(piece)
        self.bytes += nbytes

    def flush(self) -> None:
        if self.body:
            body = "".join(self.body)
            self.parts.append(Part(self.prefix, body, self.fence.closing(body)))
        self._start_part()

    def line(self, line: str) -> None:
        nbytes = _cost(line)
        whole = len(line) <= self.char_budget and nbytes <= self.byte_budget
        if not self._fits(len(line), nbytes) and self.body and (
                whole or self.chars > self.char_budget // 2 or self.bytes > self.byte_budget // 2):
            self.flush()  # a line that must be cut anyway first fills a part that is less than half full
        if self._fits(len(line), nbytes):
            self._add(line, nbytes)
            self.fence.feed(line)
        else:
            self._cut(line)

    def _word_end(self, cur: list[str]) -> int:
        """Where to cut a full chunk: after its last space if that is near the end, else at the end."""
        look = min(80, self.char_budget // 4)
        for i in range(len(cur) - 1, max(0, len(cur) - look) - 1, -1):
            if cur[i] == " ":
                return i + 1
        return len(cur)

    def _cut(self, line: str) -> None:
        """A line too long for a part: cut it (between words where it can) to fill the parts.

        Every piece is longer than a fence line, or not fence-like, so no piece can open or close a
        code block that the whole line did not."""
        chunks: list[str] = []
        cur: list[str] = []
        used_chars, used_bytes, cur_bytes = self.chars, self.bytes, 0
        for ch in line:
            c = _cost(ch)
            if used_chars + len(cur) + 1 > self.char_budget or used_bytes + cur_bytes + c > self.byte_budget:
                cut = self._word_end(cur)
                chunks.append("".join(cur[:cut]))
                cur = cur[cut:]
                cur_bytes, used_chars, used_bytes = _cost("".join(cur)), 0, 0
            cur.append(ch)
            cur_bytes += c
        chunks.append("".join(cur))
        last = chunks[-1].rstrip("\n")
        if len(chunks) > 1 and len(last) <= self.fmax and _OPENER.fullmatch(last):
            move = self.fmax + 1 - len(last)
            chunks[-2], chunks[-1] = chunks[-2][:-move], chunks[-2][-move:] + chunks[-1]
        for chunk in chunks[:-1]:
            self._add(chunk, _cost(chunk))
            self.flush()
        self._add(chunks[-1], _cost(chunks[-1]))


def plan_parts(text: str, max_chars: int, *, max_bytes: int | None = None, fences: bool = True) -> list[Part]:
    """Split `text` into parts; see the module docstring. `max_bytes` bounds each part's body bytes."""
    if max_bytes is None:
        max_bytes = CARD_MAX_BYTES - json_bytes(markdown_card("")) - SAFETY_BYTES
    splitter = _Splitter(max_chars, max_bytes, fences)
    for line in _LINES.findall(text):
        splitter.line(line)
    splitter.flush()
    return splitter.parts


def split_markdown(text: str, max_chars: int) -> list[str]:
    """Markdown text -> the texts of the cards to send (each within max_chars and 30 KB as a card)."""
    return [p.text for p in plan_parts(text, max_chars)]


def split_plain(text: str, max_chars: int) -> list[str]:
    """Plain text -> the texts of the `text` messages to send."""
    budget = TEXT_MAX_BYTES - json_bytes(text_content("")) - SAFETY_BYTES
    return [p.text for p in plan_parts(text, max_chars, max_bytes=budget, fences=False)]
