"""`http_request`: one HTTP call with httpx, plus the helpers web_fetch shares."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from picobot.errors import ToolError, TurnCancelled
from picobot.security.netguard import NetworkPolicy, guarded_client
from picobot.security.redact import header_secrets, redact
from picobot.tools.base import Tool, ToolContext
from picobot.tools.http_cancel import CancelCut
from picobot.tools.registry import truncate

if TYPE_CHECKING:  # httpx is imported on the first request (see security/netguard.guarded_client)
    import httpx

METHODS = ["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]
DEFAULT_TIMEOUT_SECS = 30
MAX_TIMEOUT_SECS = 120
DEFAULT_MAX_CHARS = 20_000
DEFAULT_MAX_BYTES = 5_000_000
USER_AGENT = "PicoBot/0.1"
# Said up front so the model does not retry a refused host; the refusal itself says how to allow one.
# Private and local hosts are refused unless the user allows them: the refusal itself says so and how
# (security/netpolicy.refusal_text), so the descriptions sent with every call do not repeat it.

# Response headers worth showing the model; others are noise.
SHOWN_HEADERS = (
    "content-type",
    "content-length",
    "location",
    "retry-after",
    "etag",
    "last-modified",
    "cache-control",
    "www-authenticate",
    "link",
)
SHOWN_HEADER_PREFIXES = ("x-ratelimit-", "ratelimit-")
REDACTED = "[redacted]"
_TEXT_SUBTYPES = "json|xml|javascript|ecmascript|x-www-form-urlencoded|yaml|x-yaml|csv|graphql|x-ndjson"
_TEXT_TYPES = re.compile(rf"^(text/|application/([\w.+-]*\+)?({_TEXT_SUBTYPES})\b)")


class HttpRequestTool(Tool):
    name = "http_request"
    description = (
        "One HTTP request, for APIs; returns status, headers and body. Send body or json, not both. "
        "Web pages: web_fetch."
    )
    parameters = {
        "type": "object",
        "properties": {
            "method": {"type": "string", "enum": METHODS},
            "url": {"type": "string"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": "string", "description": "Raw text."},
            "json": {"description": "JSON body; sets Content-Type."},
            "timeout_secs": {
                "type": "number",
                "exclusiveMinimum": 0,
                "maximum": MAX_TIMEOUT_SECS,
                "description": f"Default {DEFAULT_TIMEOUT_SECS}.",
            },
        },
        "required": ["method", "url"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if "body" in args and "json" in args:
            raise ToolError("Give either body or json, not both.")
        url = check_url(args["url"])
        headers = dict(args.get("headers") or {})
        secrets = header_secrets(headers)
        timeout = float(args.get("timeout_secs") or ctx.settings.get("http_timeout_secs", DEFAULT_TIMEOUT_SECS))
        max_bytes = int(ctx.settings.get("http_max_bytes", DEFAULT_MAX_BYTES))
        max_chars = int(ctx.settings.get("http_max_chars", DEFAULT_MAX_CHARS))
        import httpx

        merged = httpx.Headers({"User-Agent": USER_AGENT})
        merged.update(headers)  # case-insensitive: the model's own User-Agent wins
        request: dict[str, Any] = {"headers": merged}
        if "body" in args:
            request["content"] = args["body"].encode("utf-8")
        if "json" in args:
            request["json"] = args["json"]
        try:
            result = _request(args["method"], url, request, timeout, max_bytes, max_chars, ctx)
        except ToolError as exc:
            raise ToolError(redact(str(exc), secrets, mask=REDACTED)) from None
        except (ValueError, TypeError) as exc:  # bad header values, unserialisable json, ...
            raise ToolError(redact(f"Invalid request: {type(exc).__name__}: {exc}", secrets, mask=REDACTED)) from None
        return redact(result, secrets, mask=REDACTED)


def _request(
    method: str, url: str, request: dict[str, Any], timeout: float, max_bytes: int, max_chars: int, ctx: ToolContext
) -> str:
    import httpx

    policy = NetworkPolicy.from_settings(ctx.settings)
    with CancelCut(ctx.cancel) as cutter, guarded_client(policy, timeout=timeout) as client:
        try:
            with client.stream(method, url, extensions=cutter.extensions, **request) as response:
                body, cut = read_body(response, max_bytes, ctx)
                return _render(response, url, body, cut, max_chars)
        except httpx.HTTPError as exc:
            raise ToolError(describe_http_error(exc, url, timeout)) from None


def _render(response: httpx.Response, url: str, body: bytes, cut: bool, max_chars: int) -> str:
    import httpx

    lines = [f"HTTP {response.status_code} {response.reason_phrase}".rstrip()]
    if response.url != httpx.URL(url):
        lines.append(f"Final URL: {response.url}")
    for name, value in response.headers.items():
        if name in SHOWN_HEADERS or name.startswith(SHOWN_HEADER_PREFIXES):
            lines.append(f"{name}: {value}")
    lines.append("")
    content_type = response.headers.get("content-type", "")
    if not body:
        lines.append("(empty body)")
    elif is_text(content_type, body):
        text = decode_body(body, response.charset_encoding)
        lines.append(truncate(text, max_chars))
    else:
        lines.append(f"[binary body not shown: {content_type or 'unknown type'}, {len(body)} bytes]")
    if cut:
        lines.append(f"[body cut at the {max_bytes_text(len(body))} download limit]")
    return "\n".join(lines)


def check_url(url: str) -> str:
    """The URL if it is an absolute http(s) URL with a host; ToolError otherwise."""
    url = url.strip()
    parts = urlsplit(url)
    if parts.scheme.lower() not in ("http", "https"):
        raise ToolError(f"Only http:// and https:// URLs are supported, not {url[:100]!r}.")
    if not parts.hostname:
        raise ToolError(f"The URL {url[:100]!r} has no host.")
    return url


def read_body(response: httpx.Response, max_bytes: int, ctx: ToolContext) -> tuple[bytes, bool]:
    """Up to max_bytes of the (decompressed) body, and whether more was left unread."""
    chunks: list[bytes] = []
    size = 0
    for chunk in response.iter_bytes():
        if ctx.cancel.cancelled:
            raise TurnCancelled(ctx.cancel.reason or "stopped")
        chunks.append(chunk)
        size += len(chunk)
        if size >= max_bytes:
            return b"".join(chunks)[:max_bytes], True
    return b"".join(chunks), False


def is_text(content_type: str, body: bytes) -> bool:
    kind = content_type.split(";")[0].strip().lower()
    if kind:
        return bool(_TEXT_TYPES.match(kind))
    head = body[:4096]
    if b"\x00" in head:
        return False
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        return exc.start >= len(head) - 3  # only a multi-byte character cut at the end
    return True


def decode_body(body: bytes, charset: str | None) -> str:
    try:
        return body.decode(charset or "utf-8", errors="replace")
    except LookupError:
        return body.decode("utf-8", errors="replace")


def describe_http_error(exc: httpx.HTTPError, url: str, timeout: float) -> str:
    import httpx

    host = urlsplit(url).hostname or url
    if isinstance(exc, httpx.TimeoutException):
        return f"The request to {host} timed out after {timeout:g} s."
    if isinstance(exc, httpx.ConnectError):
        return f"Could not connect to {host}: {exc or 'connection failed'}."
    if isinstance(exc, httpx.TooManyRedirects):
        return f"Too many redirects starting from {url}."
    if isinstance(exc, (httpx.UnsupportedProtocol, httpx.InvalidURL)):
        return f"Invalid URL {url!r}: {exc}."
    return f"The request to {host} failed: {type(exc).__name__}: {exc or 'no details'}."


def max_bytes_text(size: int) -> str:
    return f"{size / 1_000_000:g} MB" if size >= 1_000_000 else f"{size} bytes"
