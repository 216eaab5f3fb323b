"""The one redactor: keeps secrets out of logs, errors, tool results and printed config.

`redact(text, secrets)` replaces each known secret and anything shaped like a credential.
It depends on nothing else in PicoBot, so config, providers, tools and logging all use it.

A value is secret when its key says so (api_key, app_secret, token, password, anything
containing key/secret/token/password/auth/cookie/credential/signature), when it is the
password (or long bare user) part of a URL, a secret-looking URL query parameter, the
value of a credential header written out (`Authorization: ...`, `x-api-key=...`), a
`Bearer ...` (or `Basic ...`) credential, or a well-known API key shape (`sk-...`,
`ghp_...`, `xoxb-...`).
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping
from urllib.parse import unquote

MASK = "********"
MIN_SECRET_LEN = 4  # shorter values would redact ordinary words all over a log
MIN_TOKEN_USER_LEN = 16
MIN_HEADER_PART_LEN = 6  # the token of "Bearer <token>" is a secret on its own; shorter parts are not

_SECRET_KEY_PARTS = (
    "key", "secret", "token", "password", "passwd", "auth", "cookie", "credential", "signature",
)

_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]*)(?::(?P<pw>[^\s/?#@]*))?@"
)
_QUERY_PARAM = re.compile(r"(?P<pre>[?&](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s\"']+)")
# A credential header as it shows up in SDK errors and dumps: `x-api-key: v`, `'authorization': 'Bearer v'`.
_HEADER_VALUE = re.compile(
    r"(?i)(?P<pre>\b(?:authorization|proxy-authorization|x-api-key|api[-_]?key|access[-_]?token)"
    r"[\"']?\s*[:=]\s*[\"']?(?:(?:bearer|basic)\s+)?)(?P<value>[^\s\"',;&#}]+)"
)
_BEARER = re.compile(r"\b(?P<pre>Bearer\s+)(?P<value>[A-Za-z0-9._~+/=\-]{4,})", re.IGNORECASE)
_BASIC = re.compile(r"\b(?P<pre>Basic\s+)(?P<value>[A-Za-z0-9+/]{6,}={0,2})")
_KEY_SHAPES = re.compile(
    r"\b(?:sk-[A-Za-z0-9_\-]{8,}|gh[pousr]_[A-Za-z0-9]{16,}|github_pat_[A-Za-z0-9_]{16,}"
    r"|xox[abposr]-[A-Za-z0-9\-]{8,})"
)


def is_secret_key(name: str) -> bool:
    """True when a key or header name says its value is a credential."""
    lowered = name.lower()
    return any(part in lowered for part in _SECRET_KEY_PARTS)


def redact(text: str, secrets: Iterable[str], *, mask: str = MASK) -> str:
    """`text` with each known secret, Bearer credential, key-shaped string and URL
    credential replaced by `mask`."""
    # Longest first, so a secret that contains another is replaced whole.
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(secret, mask)
    return mask_text(text, mask=mask)


def replace_secrets(text: str, secrets: Iterable[str], *, mask: str = MASK) -> str:
    """`text` with only the known secret values replaced (no pattern guessing): for text the
    model wrote, such as tool arguments, where a credential-shaped string may be legitimate."""
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        if secret in text:
            text = text.replace(secret, mask)
    return text


def header_secrets(headers: Mapping[str, str]) -> set[str]:
    """Values of credential headers, and the token part of `Bearer <token>` and the like."""
    found: set[str] = set()
    for name, value in headers.items():
        if not (isinstance(value, str) and is_secret_key(str(name)) and len(value) >= MIN_SECRET_LEN):
            continue
        found.add(value)
        words = value.split()
        found.update(word for word in words[1:] if len(word) >= MIN_HEADER_PART_LEN)
    return found


def mask_text(text: str, found: set[str] | None = None, *, mask: str = MASK) -> str:
    """Mask credentials recognisable by their shape; add what was masked to `found`."""
    sink: set[str] = set() if found is None else found
    text = _URL_USERINFO.sub(lambda m: _mask_url_userinfo(m, sink, mask), text)
    text = _QUERY_PARAM.sub(lambda m: _mask_query_param(m, sink, mask), text)
    text = _HEADER_VALUE.sub(lambda m: _mask_value(m, sink, mask), text)
    text = _BEARER.sub(lambda m: _mask_value(m, sink, mask), text)
    text = _BASIC.sub(lambda m: _mask_basic(m, sink, mask), text)
    return _KEY_SHAPES.sub(lambda m: _mask_key_shape(m, sink, mask), text)


def masked_value(name: str, value: Any) -> Any:
    """`value` with its secrets masked, judged by its key `name` and its content."""
    return mask_tree(value, is_secret_key(name), set())


def mask_tree(value: Any, secret: bool, found: set[str]) -> Any:
    """A JSON-like tree with secret values masked; what was masked is added to `found`."""
    # `secret` is inherited: everything under a secret-named key is secret. Numbers
    # and booleans stay (`max_tokens` is not a credential).
    if isinstance(value, dict):
        return {k: mask_tree(v, secret or is_secret_key(str(k)), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [mask_tree(item, secret, found) for item in value]
    if isinstance(value, str):
        if secret and value:
            found.add(value)
            mask_text(value, found)  # also the bare token of "Bearer <token>", for logs
            return MASK
        return mask_text(value, found)
    return value


def redact_tree(value: Any, secrets: Iterable[str]) -> Any:
    """A JSON-like tree with `redact` applied to every string in it."""
    if isinstance(value, dict):
        return {k: redact_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [redact_tree(item, secrets) for item in value]
    if isinstance(value, str):
        return redact(value, secrets)
    return value


def _mask_url_userinfo(match: re.Match[str], found: set[str], mask: str) -> str:
    user, password = match["user"], match["pw"]
    if password is not None:
        if password:
            found.update({password, unquote(password)})
        return f"{match['scheme']}{user}:{mask}@"
    # A long bare user name is a token (https://<token>@host); a short one is just a
    # user ("postgresql://picobot@db") and redacting it would blank that word in logs.
    if len(user) >= MIN_TOKEN_USER_LEN:
        found.update({user, unquote(user)})
        return f"{match['scheme']}{mask}@"
    return match[0]


def _mask_query_param(match: re.Match[str], found: set[str], mask: str) -> str:
    if not is_secret_key(match["name"]):
        return match[0]
    found.update({match["value"], unquote(match["value"])})
    return match["pre"] + mask


def _mask_value(match: re.Match[str], found: set[str], mask: str) -> str:
    if match["value"].startswith(mask):
        return match[0]  # already masked by an earlier pattern
    found.add(match["value"])
    return match["pre"] + mask


def _mask_basic(match: re.Match[str], found: set[str], mask: str) -> str:
    # Base64 has digits, +/= or inner capitals; prose after "Basic" ("Basic setup") has not.
    value = match["value"]
    if any(c.isdigit() or c in "+/=" for c in value) or any(c.isupper() for c in value[1:]):
        return _mask_value(match, found, mask)
    return match[0]


def _mask_key_shape(match: re.Match[str], found: set[str], mask: str) -> str:
    found.add(match[0])
    return mask
