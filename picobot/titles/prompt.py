"""The title request (the first user message and the first answer, trimmed) and the reply's sanitising."""

from __future__ import annotations

import re
import unicodedata

from picobot.domain.messages import ChatMessage

EXCERPT_CHARS = 1500  # of the first user message and of the first answer each: enough to name them
INSTRUCTION = ("You name conversations. Reply with a short title for the conversation below: a few words, at most "
               "{max_chars} characters, in the language the user wrote in. Reply with the title only: no quotes, "
               "no markdown, no final punctuation, no explanation.")
REQUEST_HEAD = "Conversation to title:"

_LONE_SURROGATES = re.compile("[\ud800-\udfff]")
_ANSI = re.compile(r"\x1b(?:\[[0-9;?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)?|.)")  # terminal escapes
_SPACES = re.compile(r"\s+")
_LABEL = re.compile(r"^(?:title|titre|titel|título|标题|題名|タイトル)\s*[:：]\s*", re.IGNORECASE)
_MARKUP = "#*_`>~|"  # markdown a model wraps a title in (headings, emphasis, code, quotes, tables)
_QUOTES = "\"'“”‘’„‚«»‹›「」『』《》〈〉`"
_TRAILING = ".。!！;；:：,，、"


def request(first_user: str, first_answer: str, max_chars: int) -> list[ChatMessage]:
    """The messages of the title call."""
    conversation = (f"{REQUEST_HEAD}\n\nUser: {_excerpt(first_user)}\n\n"
                    f"Assistant: {_excerpt(first_answer)}")
    return [ChatMessage(role="system", content=INSTRUCTION.format(max_chars=max_chars)),
            ChatMessage(role="user", content=conversation)]


def _excerpt(text: str) -> str:
    text = _SPACES.sub(" ", _LONE_SURROGATES.sub("", text)).strip()
    return text if len(text) <= EXCERPT_CHARS else text[:EXCERPT_CHARS].rstrip() + " …"


def sanitise(reply: str, max_chars: int) -> str:
    """One clean line of at most `max_chars` characters, or "" when nothing usable is left."""
    line = next((ln for ln in _lines(reply) if ln), "")
    line = _LABEL.sub("", line)
    previous = None
    while line != previous:  # "**\"Title.\"**" and "Title*.": markup, quotes and final punctuation, until none is left
        previous = line
        line = line.strip(_MARKUP + _QUOTES + " ").lstrip("-+• ").strip().rstrip(_TRAILING + " ")
    if len(line) > max_chars:
        cut = line[:max_chars - 1]
        space = cut.rfind(" ")
        line = (cut[:space] if space >= max_chars // 2 else cut).rstrip(_TRAILING + " ") + "…"
    return line


def _lines(reply: str) -> list[str]:
    """The reply's lines with lone surrogates and control and format characters gone, spaces collapsed."""
    text = _ANSI.sub("", _LONE_SURROGATES.sub("", reply))
    text = "".join(ch if ch in "\n\r" or unicodedata.category(ch) not in ("Cc", "Cf", "Co", "Cn", "Zl", "Zp")
                   else ("\n" if unicodedata.category(ch) in ("Zl", "Zp") else " " if ch == "\t" else "")
                   for ch in text)
    return [_SPACES.sub(" ", ln).strip() for ln in text.splitlines()]
