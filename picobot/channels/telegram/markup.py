"""Markdown (what the model writes) -> Telegram HTML (what `parse_mode: "HTML"` accepts).

markdown-it-py parses (CommonMark plus strikethrough and tables); we render its tokens ourselves
into the few tags Telegram knows: bold, italic, strike, inline code, `<pre><code class="language-…">`,
links and blockquote. Headings become bold lines, list items `•` (or `1.`) lines, tables plain
` | `-separated lines, rules a line of dashes. Everything else — raw HTML included — is text,
escaped (`&`, `<`, `>`), so the output always parses. A link keeps its tag only for http(s), tg:
and mailto: targets; an image becomes its alt text and URL.
"""

from __future__ import annotations

from typing import Any

from markdown_it import MarkdownIt

_md = MarkdownIt("commonmark", {"html": False, "linkify": False}).enable(["strikethrough", "table"])
_INLINE_TAGS = {"strong": "b", "em": "i", "s": "s"}
_LINK_SCHEMES = ("http://", "https://", "tg://", "mailto:")
MAX_NESTING = 20  # deeper lists and quotes are flattened: Telegram shows no depth anyway
HR = "———"


def escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def escape_attr(text: str) -> str:
    return escape(text).replace('"', "&quot;")


def to_html(markdown: str) -> str:
    """Telegram HTML for a Markdown text; never raises on any input."""
    try:
        tokens = _md.parse(markdown)
    except RecursionError:  # markdown-it nests deep input far; such text is shown as it is
        return escape(markdown)
    return _Blocks(tokens).render().strip()


class _Blocks:
    """Walks block tokens; each block ends with a blank line, list items with one newline."""

    def __init__(self, tokens: list[Any]):
        self.tokens = tokens
        self.out: list[str] = []
        self.lists: list[list[int]] = []  # per open list: [next number] (ordered) or [] (bullets)
        self.quote_depth = 0
        self.item_start = False  # the next paragraph starts a list item: put the marker there
        self.row: list[str] = []
        self.in_table = False

    def render(self) -> str:
        for token in self.tokens:
            handler = getattr(self, f"_{token.type}", None)
            if handler is not None:
                handler(token)
        return "".join(self.out)

    # --- helpers -------------------------------------------------------------------------

    def _indent(self) -> str:
        return "  " * max(0, min(len(self.lists), MAX_NESTING) - 1)

    def _block_end(self) -> None:
        self.out.append("\n" if self.lists else "\n\n")

    def _prefix(self) -> str:
        if not self.item_start:
            return self._indent() + ("  " if self.lists else "")
        self.item_start = False
        numbers = self.lists[-1]
        if numbers:
            marker = f"{numbers[0]}. "
            numbers[0] += 1
        else:
            marker = "• "
        return self._indent() + marker

    # --- blocks --------------------------------------------------------------------------

    def _paragraph_open(self, token: Any) -> None:
        if self.lists:
            self.out.append(self._prefix())

    def _paragraph_close(self, token: Any) -> None:
        self._block_end()

    def _heading_open(self, token: Any) -> None:
        self.out.append("<b>")

    def _heading_close(self, token: Any) -> None:
        self.out.append("</b>")
        self._block_end()

    def _inline(self, token: Any) -> None:
        if self.in_table:
            self.row.append(_inline(token.children or []))
        else:
            self.out.append(_inline(token.children or []))

    def _bullet_list_open(self, token: Any) -> None:
        self._list_open([])

    def _ordered_list_open(self, token: Any) -> None:
        start = token.attrGet("start")
        self._list_open([int(start) if isinstance(start, (int, str)) and str(start).isdigit() else 1])

    def _list_open(self, numbers: list[int]) -> None:
        if self.item_start:  # a list as the first thing in an item: its marker on its own line
            self.out.append(self._prefix().rstrip() + "\n")
        self.lists.append(numbers)

    def _bullet_list_close(self, token: Any) -> None:
        self._list_close()

    def _ordered_list_close(self, token: Any) -> None:
        self._list_close()

    def _list_close(self) -> None:
        self.lists.pop()
        if not self.lists:
            self.out.append("\n")

    def _list_item_open(self, token: Any) -> None:
        self.item_start = True

    def _list_item_close(self, token: Any) -> None:
        if self.item_start:  # an empty item
            self.out.append(self._prefix().rstrip() + "\n")

    def _blockquote_open(self, token: Any) -> None:
        if self.quote_depth == 0:  # Telegram has no nested quotes: the inner ones are part of the outer
            self.out.append("<blockquote>")
        self.quote_depth += 1

    def _blockquote_close(self, token: Any) -> None:
        self.quote_depth -= 1
        if self.quote_depth == 0:
            self.out = ["".join(self.out).rstrip("\n"), "</blockquote>"]
            self._block_end()

    def _fence(self, token: Any) -> None:
        lang = (token.info or "").strip().split(maxsplit=1)[0] if (token.info or "").strip() else ""
        self._code(token.content, lang)

    def _code_block(self, token: Any) -> None:
        self._code(token.content, "")

    def _code(self, content: str, lang: str) -> None:
        body = escape(content.rstrip("\n")) or " "
        if self.item_start:
            self.out.append(self._prefix().rstrip() + "\n")
        if lang and all(c.isalnum() or c in "+-_#." for c in lang) and len(lang) <= 32:
            self.out.append(f'<pre><code class="language-{lang}">{body}</code></pre>')
        else:
            self.out.append(f"<pre>{body}</pre>")
        self._block_end()

    def _hr(self, token: Any) -> None:
        self.out.append(HR)
        self._block_end()

    def _html_block(self, token: Any) -> None:  # only with html enabled; kept as text all the same
        self.out.append(escape(token.content))

    def _table_open(self, token: Any) -> None:
        self.in_table = True

    def _table_close(self, token: Any) -> None:
        self.in_table = False
        self.out.append("\n")

    def _tr_open(self, token: Any) -> None:
        self.row = []

    def _tr_close(self, token: Any) -> None:
        self.out.append(" | ".join(self.row) + "\n")
        self.row = []


def _inline(children: list[Any]) -> str:
    out: list[str] = []
    links: list[bool] = []  # per open link: whether it was given a tag
    for child in children:
        kind = child.type
        if kind == "text":
            out.append(escape(child.content))
        elif kind == "code_inline":
            out.append(f"<code>{escape(child.content)}</code>" if child.content else "")
        elif kind in ("softbreak", "hardbreak"):
            out.append("\n")
        elif kind.endswith("_open") and kind[:-5] in _INLINE_TAGS:
            out.append(f"<{_INLINE_TAGS[kind[:-5]]}>")
        elif kind.endswith("_close") and kind[:-6] in _INLINE_TAGS:
            out.append(f"</{_INLINE_TAGS[kind[:-6]]}>")
        elif kind == "link_open":
            href = str(child.attrGet("href") or "")
            tagged = href.lower().startswith(_LINK_SCHEMES) and not links  # no link inside a link
            links.append(tagged)
            if tagged:
                out.append(f'<a href="{escape_attr(href)}">')
        elif kind == "link_close":
            if links and links.pop():
                out.append("</a>")
        elif kind == "image":
            alt = "".join(c.content for c in (child.children or []) if c.type == "text") or "image"
            out.append(escape(f"{alt} ({child.attrGet('src') or ''})"))
        elif kind == "html_inline":
            out.append(escape(child.content))
        elif child.content:
            out.append(escape(child.content))
    while links:  # markdown-it always closes what it opens; be safe all the same
        if links.pop():
            out.append("</a>")
    return "".join(out)
