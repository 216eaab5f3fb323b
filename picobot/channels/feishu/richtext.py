"""Feishu message content to text: mentions resolved, rich text (post) to Markdown.

`Mentions` maps the placeholders Feishu puts in text (`@_user_1`) to "@Name" and drops the
bot's own; `post_markdown` renders a post's paragraphs (text with styles, links, @, code
blocks, md, emoji, rules) and returns the image keys it holds so the caller can download them.
"""

from __future__ import annotations

from typing import Any

STYLE_MARKS = (("lineThrough", "~~"), ("italic", "*"), ("bold", "**"))  # innermost first


class Mentions:
    def __init__(self, mentions: Any, bot_open_id: str | None):
        self.names: dict[str, str] = {}  # placeholder key or open_id -> "@Name" ("" for the bot)
        self.bot_mentioned = False
        for item in mentions if isinstance(mentions, list) else []:
            if not isinstance(item, dict):
                continue
            ids = item.get("id")
            ids = ids if isinstance(ids, dict) else {}
            open_id = ids.get("open_id")
            open_id = open_id if isinstance(open_id, str) else None
            is_bot = bool(bot_open_id) and open_id == bot_open_id
            self.bot_mentioned = self.bot_mentioned or is_bot
            name = "" if is_bot else f"@{_str(item.get('name')) or open_id or 'someone'}"
            for key in (_str(item.get("key")), open_id):
                if key:
                    self.names[key] = name

    def resolve(self, text: str) -> str:
        # Longest key first: @_user_10 must not be read as @_user_1 followed by "0".
        for key in sorted((k for k in self.names if k.startswith("@")), key=len, reverse=True):
            if key in text:
                name = self.names[key]
                text = text.replace(key + " ", name + " " if name else "").replace(key, name)
        return text.replace("@_all", "@all")

    def name(self, user_id: str, fallback: str) -> str:
        if user_id in self.names:
            return self.names[user_id]
        if user_id in ("all", "@_all"):
            return "@all"
        return f"@{fallback or user_id}"


def text_markdown(content: dict[str, Any], mentions: Mentions) -> str:
    return mentions.resolve(_str(content.get("text"))).strip()


def post_markdown(content: dict[str, Any], mentions: Mentions) -> tuple[str, list[str]]:
    """(Markdown, image keys in order) of a received post."""
    body = _unwrap_locale(content)
    lines: list[str] = []
    images: list[str] = []
    title = _str(body.get("title")).strip()
    if title:
        lines += [f"# {title}", ""]
    paragraphs = body.get("content")
    for paragraph in paragraphs if isinstance(paragraphs, list) else []:
        if not isinstance(paragraph, list):
            continue
        parts = [_element(el, mentions, images) for el in paragraph if isinstance(el, dict)]
        lines.append("".join(parts))
    return "\n".join(lines).strip(), images


def _unwrap_locale(content: dict[str, Any]) -> dict[str, Any]:
    # Received posts are {"title","content"}; a sent/forwarded one may be {"zh_cn": {...}}.
    if "content" in content or "title" in content:
        return content
    for value in content.values():
        if isinstance(value, dict) and "content" in value:
            return value
    return content


def _element(el: dict[str, Any], mentions: Mentions, images: list[str]) -> str:
    tag = el.get("tag")
    if tag == "text":
        return _styled(mentions.resolve(_str(el.get("text"))), el.get("style"))
    if tag == "a":
        text, href = _str(el.get("text")), _str(el.get("href"))
        return _styled(f"[{text or href}]({href})" if href else text, el.get("style"))
    if tag == "at":
        return mentions.name(_str(el.get("user_id")), _str(el.get("user_name")))
    if tag == "img":
        key = _str(el.get("image_key"))
        if key:
            images.append(key)
        return ""
    if tag == "code_block":
        code = _str(el.get("text")).rstrip("\n")
        return f"\n```{_str(el.get('language')).lower()}\n{code}\n```\n"
    if tag == "md":
        return mentions.resolve(_str(el.get("text")))
    if tag == "emotion":
        return f":{_str(el.get('emoji_type'))}:"
    if tag == "hr":
        return "\n---\n"
    if tag == "media":
        return "[video]"
    return _str(el.get("text"))


def _styled(text: str, style: Any) -> str:
    if not text.strip() or not isinstance(style, list):
        return text
    core = text.strip()
    for name, mark in STYLE_MARKS:
        if name in style:
            core = f"{mark}{core}{mark}"
    if "underline" in style:
        core = f"<u>{core}</u>"
    lead, trail = text[: len(text) - len(text.lstrip())], text[len(text.rstrip()):]
    return f"{lead}{core}{trail}"


def _str(value: Any) -> str:
    return value if isinstance(value, str) else ""
