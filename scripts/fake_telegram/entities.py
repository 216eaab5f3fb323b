"""parse_mode HTML as Telegram parses it (after TDLib's parse_html): the text and its entities, or an error.

Only Telegram's tags are accepted (b strong i em u ins s strike del span.tg-spoiler tg-spoiler a code
pre blockquote tg-emoji); an unknown, unclosed or misnested tag fails the whole message, as it does on
Telegram: "can't parse entities: ...". `&lt; &gt; &amp; &quot;` and numeric entities are decoded; an
unknown `&name;` stays as it is (TDLib does the same). Offsets and lengths are in UTF-16 code units.

`strict=True` (the default) also refuses tags inside `code` / `pre` (other than `<pre><code
class="language-…">`) and a blockquote inside a blockquote — Telegram drops such entities instead of
failing; PicoBot should never send them, so the fake says so loudly.
"""

from __future__ import annotations

import html
import re
from typing import Any

TAGS = {"b": "bold", "strong": "bold", "i": "italic", "em": "italic", "u": "underline", "ins": "underline",
        "s": "strikethrough", "strike": "strikethrough", "del": "strikethrough", "span": "spoiler",
        "tg-spoiler": "spoiler", "a": "text_link", "code": "code", "pre": "pre", "blockquote": "blockquote",
        "tg-emoji": "custom_emoji"}
_NAME = re.compile(r"[a-zA-Z0-9-]+")
_ATTR = re.compile(r"\s*([a-zA-Z0-9_-]+)(?:\s*=\s*(\"[^\"]*\"|'[^']*'|[^\s\"'>]+))?")
_ENTITY = re.compile(r"&(#\d{1,7}|#x[0-9a-fA-F]{1,6}|lt|gt|amp|quot);")


class EntityError(ValueError):
    """The text does not parse; str() is Telegram's description after "Bad Request: "."""


def u16(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def parse_html(text: str, strict: bool = True) -> tuple[str, list[dict[str, Any]]]:
    """(plain text, entities) of an HTML message; EntityError when Telegram would refuse it."""
    out: list[str] = []
    length = 0  # UTF-16 units of out
    stack: list[dict[str, Any]] = []
    entities: list[dict[str, Any]] = []
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "&":
            m = _ENTITY.match(text, i)
            if m:
                decoded = html.unescape(m.group(0))
                out.append(decoded)
                length += u16(decoded)
                i = m.end()
                continue
        if ch != "<":
            out.append(ch)
            length += u16(ch)
            i += 1
            continue
        offset = len(text[:i].encode("utf-8", "surrogatepass"))
        if text.startswith("</", i):
            i = _end_tag(text, i, offset, stack, entities, length)
        else:
            i = _start_tag(text, i, offset, stack, length, strict)
    if stack:
        raise EntityError(f"can't parse entities: Can't find end tag corresponding to start tag \"{stack[-1]['tag']}\"")
    entities.sort(key=lambda e: (e["offset"], -e["length"]))
    return "".join(out), entities


def _start_tag(text: str, i: int, offset: int, stack: list[dict[str, Any]], length: int, strict: bool) -> int:
    m = _NAME.match(text, i + 1)
    if not m:
        raise EntityError(f"can't parse entities: Unsupported start tag \"\" at byte offset {offset}")
    tag = m.group(0).lower()
    close = text.find(">", m.end())
    if close < 0:
        raise EntityError(f"can't parse entities: Unclosed start tag at byte offset {offset}")
    if tag not in TAGS:
        raise EntityError(f"can't parse entities: Unsupported start tag \"{tag}\" at byte offset {offset}")
    attrs = _attributes(text[m.end():close], tag, offset)
    kind = TAGS[tag]
    extra: dict[str, Any] = {}
    if tag == "span" and attrs.get("class") != "tg-spoiler":
        raise EntityError(f"can't parse entities: Tag \"span\" must have class \"tg-spoiler\" at byte offset {offset}")
    if tag == "a":
        href = attrs.get("href", "")
        extra["url"] = href
        if not href:
            kind = "plain_link"  # <a> without href: no entity, as Telegram does
    if tag == "tg-emoji":
        extra["custom_emoji_id"] = attrs.get("emoji-id", "")
    if tag == "code" and stack and stack[-1]["tag"] == "pre" and attrs.get("class", "").startswith("language-"):
        stack[-1]["language"] = attrs["class"][len("language-"):]
    if strict:
        _check_nesting(tag, stack, offset)
    stack.append({"tag": tag, "type": kind, "start": length, **extra})
    return close + 1


def _check_nesting(tag: str, stack: list[dict[str, Any]], offset: int) -> None:
    inside = [s["tag"] for s in stack]
    if "code" in inside or ("pre" in inside and not (tag == "code" and inside[-1] == "pre")):
        raise EntityError(f"can't parse entities: [strict fake] tag \"{tag}\" inside a code block at byte offset "
                          f"{offset}")
    if tag == "blockquote" and "blockquote" in inside:
        raise EntityError(f"can't parse entities: [strict fake] nested blockquote at byte offset {offset}")
    if tag == "a" and "a" in inside:
        raise EntityError(f"can't parse entities: [strict fake] a link inside a link at byte offset {offset}")


def _attributes(raw: str, tag: str, offset: int) -> dict[str, str]:
    attrs: dict[str, str] = {}
    pos = 0
    raw = raw.rstrip("/")
    while pos < len(raw) and raw[pos:].strip():
        m = _ATTR.match(raw, pos)
        if not m or m.end() == pos:
            raise EntityError(f"can't parse entities: Expected equal sign in declaration of an attribute of the "
                              f"tag \"{tag}\" at byte offset {offset}")
        value = m.group(2) or ""
        if value[:1] in ("\"", "'"):
            value = value[1:-1]
        attrs[m.group(1).lower()] = html.unescape(value)
        pos = m.end()
    return attrs


def _end_tag(text: str, i: int, offset: int, stack: list[dict[str, Any]], entities: list[dict[str, Any]],
             length: int) -> int:
    m = _NAME.match(text, i + 2)
    close = text.find(">", i)
    if not m or close < 0 or text[m.end():close].strip():
        raise EntityError(f"can't parse entities: Unclosed end tag at byte offset {offset}")
    tag = m.group(0).lower()
    if not stack:
        raise EntityError(f"can't parse entities: Unexpected end tag at byte offset {offset}")
    top = stack[-1]
    if top["tag"] != tag:
        raise EntityError(f"can't parse entities: Unmatched end tag at byte offset {offset}, expected "
                          f"\"</{top['tag']}>\", found \"</{tag}>\"")
    stack.pop()
    if length > top["start"] and top["type"] != "plain_link":
        entity = {"type": top["type"], "offset": top["start"], "length": length - top["start"]}
        for key in ("url", "language", "custom_emoji_id"):
            if top.get(key):
                entity[key] = top[key]
        entities.append(entity)
    return close + 1
