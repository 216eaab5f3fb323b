"""`web_fetch`: download a web page and return it as readable text (stdlib html.parser only)."""

from __future__ import annotations

import re
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any
from urllib.parse import urljoin

from picobot.errors import ToolError
from picobot.security.netguard import NetworkPolicy, guarded_client
from picobot.tools.base import Tool, ToolContext
from picobot.tools.http import check_url, decode_body, describe_http_error, is_text, read_body
from picobot.tools.http_cancel import CancelCut
from picobot.tools.registry import truncate

if TYPE_CHECKING:  # httpx is imported on the first fetch (see security/netguard.guarded_client)
    import httpx

DEFAULT_MAX_CHARS = 50_000
MAX_CHARS_LIMIT = 500_000
DEFAULT_MAX_BYTES = 2_000_000
DEFAULT_TIMEOUT_SECS = 30
USER_AGENT = "Mozilla/5.0 (compatible; PicoBot/0.1; +web_fetch)"
ACCEPT = "text/html,application/xhtml+xml,text/plain;q=0.9,*/*;q=0.8"

SKIP_TAGS = {"script", "style", "nav", "noscript", "template", "svg", "iframe"}
HEADINGS = {"h1": 1, "h2": 2, "h3": 3, "h4": 4, "h5": 5, "h6": 6}
PARAGRAPH_TAGS = {
    "p", "blockquote", "pre", "table", "section", "article", "header", "footer", "main",
    "aside", "figure", "hr", "dl", "address", "details", "form", "fieldset",
}
LINE_TAGS = {"div", "tr", "dt", "dd", "figcaption", "summary", "caption", "option", "li", "ul", "ol"}
_CHARSET_META = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?([\w.:-]+)""", re.IGNORECASE)


class WebFetchTool(Tool):
    name = "web_fetch"
    description = (
        "Read a web page as its title and main text, links kept. Pages needing JavaScript or clicks: "
        "browser. APIs: http_request."
    )
    parameters = {
        "type": "object",
        "properties": {
            "url": {"type": "string"},
            "max_chars": {
                "type": "integer",
                "minimum": 100,
                "maximum": MAX_CHARS_LIMIT,
                "description": f"Default {DEFAULT_MAX_CHARS}.",
            },
        },
        "required": ["url"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        url = check_url(args["url"])
        max_chars = int(args.get("max_chars") or ctx.settings.get("web_fetch_max_chars", DEFAULT_MAX_CHARS))
        timeout = float(ctx.settings.get("web_fetch_timeout_secs", DEFAULT_TIMEOUT_SECS))
        max_bytes = int(ctx.settings.get("web_fetch_max_bytes", DEFAULT_MAX_BYTES))
        headers = {"User-Agent": USER_AGENT, "Accept": ACCEPT}
        policy = NetworkPolicy.from_settings(ctx.settings)
        import httpx

        try:
            with (
                CancelCut(ctx.cancel) as cutter,
                guarded_client(policy, timeout=timeout, headers=headers) as client,
                client.stream("GET", url, extensions=cutter.extensions) as response,
            ):
                body, cut = read_body(response, max_bytes, ctx)
        except httpx.HTTPError as exc:
            raise ToolError(describe_http_error(exc, url, timeout)) from None
        if response.status_code >= 400:
            status = f"HTTP {response.status_code} {response.reason_phrase}"
            raise ToolError(f"{status} for {response.url}{_snippet(response, body)}")
        page = _page_text(response, body)
        if cut:
            page += f"\n\n[page cut at the {max_bytes} byte download limit]"
        return truncate(page, max_chars)


def _snippet(response: httpx.Response, body: bytes) -> str:
    try:
        return "\n" + _page_text(response, body)[:1000]
    except ToolError:
        return ""


def _page_text(response: httpx.Response, body: bytes) -> str:
    content_type = response.headers.get("content-type", "")
    kind = content_type.split(";")[0].strip().lower()
    header = f"URL: {response.url}\n"
    if kind in ("text/html", "application/xhtml+xml") or (not kind and _looks_like_html(body)):
        html = decode_body(body, response.charset_encoding or _meta_charset(body))
        title, text = html_to_text(html, str(response.url))
        return f"Title: {title or '(none)'}\n{header}\n{text or '(no text found on the page)'}"
    if is_text(content_type, body):
        return f"{header}Content-Type: {content_type or 'unknown'}\n\n{decode_body(body, response.charset_encoding)}"
    raise ToolError(
        f"{response.url} is not a text page ({content_type or 'unknown type'}, {len(body)} bytes); "
        "web_fetch only returns HTML, plain text and JSON."
    )


def html_to_text(html: str, base_url: str = "") -> tuple[str, str]:
    """(title, readable text) of an HTML document."""
    parser = _HtmlToText(base_url)
    parser.feed(html)
    parser.close()
    return parser.title(), parser.text()


class _HtmlToText(HTMLParser):
    def __init__(self, base_url: str) -> None:
        super().__init__(convert_charrefs=True)
        self._base = base_url
        self._out: list[str] = []
        self._title: list[str] = []
        self._in_title = False
        self._skip = 0
        self._pre = 0
        self._lists = 0
        self._links: list[tuple[str, int]] = []  # (href, index in _out where its text starts)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag in SKIP_TAGS:
            self._skip += 1
        if self._skip:
            return
        if tag == "title":
            self._in_title = True
        elif tag in HEADINGS:
            self._break(2)
            self._out.append("#" * HEADINGS[tag] + " ")
        elif tag == "li":
            self._break(1)
            self._out.append("  " * max(self._lists - 1, 0) + "- ")
        elif tag == "br":
            self._break(1, force=True)
        elif tag in ("td", "th"):
            self._cell()
        elif tag == "a":
            self._links.append((self._href(dict(attrs).get("href")), len(self._out)))
        elif tag == "img":
            alt = (dict(attrs).get("alt") or "").strip()
            if alt:
                self._inline(f"[image: {alt}]")
        self._block_start(tag)

    def handle_endtag(self, tag: str) -> None:
        if tag in SKIP_TAGS:
            self._skip = max(self._skip - 1, 0)
            return
        if self._skip:
            return
        if tag == "title":
            self._in_title = False
        elif tag == "a" and self._links:
            self._close_link(*self._links.pop())
        elif tag in ("ul", "ol"):
            self._lists = max(self._lists - 1, 0)
            self._break(1 if self._lists else 2)
        elif tag == "pre":
            self._pre = max(self._pre - 1, 0)
        if tag in HEADINGS or tag in PARAGRAPH_TAGS:
            self._break(2)
        elif tag in LINE_TAGS:
            self._break(1)

    def handle_data(self, data: str) -> None:
        if self._skip:
            return
        if self._in_title:
            self._title.append(data)
        elif self._pre:
            self._out.append(data)
        else:
            self._inline(data)

    def title(self) -> str:
        return " ".join("".join(self._title).split())

    def text(self) -> str:
        text = "".join(self._out)
        text = re.sub(r"[ \t]+\n", "\n", text)
        text = re.sub(r"\n{3,}", "\n\n", text)
        return text.strip()

    def _block_start(self, tag: str) -> None:
        if tag in ("ul", "ol"):
            self._lists += 1
            self._break(1)
        elif tag == "pre":
            self._pre += 1
            self._break(2)
        elif tag in PARAGRAPH_TAGS:
            self._break(2)
        elif tag in LINE_TAGS and tag != "li":
            self._break(1)

    def _inline(self, data: str) -> None:
        text = re.sub(r"\s+", " ", data)
        if self._last_char() in ("", " ", "\n"):
            text = text.lstrip()
        if text:
            self._out.append(text)

    def _last_char(self) -> str:
        for piece in reversed(self._out):
            if piece:
                return piece[-1]
        return ""

    def _break(self, newlines: int, force: bool = False) -> None:
        """End the current line; newlines=2 leaves a blank line. Repeated breaks collapse."""
        if self._out and not force:
            self._out[-1] = self._out[-1].rstrip(" ")
        if force:
            self._out.append("\n")
            return
        tail = "".join(self._out[-3:])
        have = len(tail) - len(tail.rstrip("\n"))
        if self._out and have < newlines:
            self._out.append("\n" * (newlines - have))

    def _cell(self) -> None:
        if self._last_char() not in ("", "\n"):
            self._out.append(" | ")

    def _href(self, href: str | None) -> str:
        href = (href or "").strip()
        if not href or href.startswith(("#", "javascript:")):
            return ""
        return urljoin(self._base, href) if self._base else href

    def _close_link(self, href: str, start: int) -> None:
        label = "".join(self._out[start:]).strip()
        if href and label and label != href:
            self._out.append(f" ({href})")


def _looks_like_html(body: bytes) -> bool:
    head = body[:1024].lstrip().lower()
    return head.startswith((b"<!doctype html", b"<html")) or b"<body" in head


def _meta_charset(body: bytes) -> str | None:
    match = _CHARSET_META.search(body[:4096])
    return match.group(1).decode("ascii", "replace") if match else None
