"""Keep secrets out of what PicoBot prints and logs.

`masked(config)` is what `picobot config` prints; `secret_values(config)` feeds a log
filter that calls `redact(text, secrets)` on every record.

A value is secret when its key says so (api_key, app_secret, token, password, anything
containing key/secret/token/password/auth/cookie/credential), when it is the password
(or bare user) part of a URL, a secret-looking URL query parameter, a `Bearer ...`
(or `Basic ...`) credential, or a well-known API key shape (`sk-...`, `ghp_...`, `xoxb-...`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Iterable
from urllib.parse import unquote

if TYPE_CHECKING:
    from picobot.config.schema import Config

MASK = "********"
MIN_SECRET_LEN = 4  # shorter values would redact ordinary words all over a log
MIN_TOKEN_USER_LEN = 16

_SECRET_KEY_PARTS = ("key", "secret", "token", "password", "passwd", "auth", "cookie", "credential")

_URL_USERINFO = re.compile(
    r"(?P<scheme>\b[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s/?#@:]*)(?::(?P<pw>[^\s/?#@]*))?@"
)
_QUERY_PARAM = re.compile(r"(?P<pre>[?&](?P<name>[A-Za-z0-9_.\-]+)=)(?P<value>[^&#\s\"']+)")
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


def _mask_url_userinfo(match: re.Match[str], found: set[str]) -> str:
    user, password = match["user"], match["pw"]
    if password is not None:
        if password:
            found.update({password, unquote(password)})
        return f"{match['scheme']}{user}:{MASK}@"
    # A long bare user name is a token (https://<token>@host); a short one is just a
    # user ("postgresql://picobot@db") and redacting it would blank that word in logs.
    if len(user) >= MIN_TOKEN_USER_LEN:
        found.update({user, unquote(user)})
        return f"{match['scheme']}{MASK}@"
    return match[0]


def _mask_query_param(match: re.Match[str], found: set[str]) -> str:
    if not is_secret_key(match["name"]):
        return match[0]
    found.update({match["value"], unquote(match["value"])})
    return match["pre"] + MASK


def _mask_auth_scheme(match: re.Match[str], found: set[str]) -> str:
    found.add(match["value"])
    return match["pre"] + MASK


def _mask_basic(match: re.Match[str], found: set[str]) -> str:
    # Base64 has digits, +/= or inner capitals; prose after "Basic" ("Basic setup") has not.
    value = match["value"]
    if any(c.isdigit() or c in "+/=" for c in value) or any(c.isupper() for c in value[1:]):
        return _mask_auth_scheme(match, found)
    return match[0]


def _mask_key_shape(match: re.Match[str], found: set[str]) -> str:
    found.add(match[0])
    return MASK


def mask_text(text: str, found: set[str] | None = None) -> str:
    """Mask credentials recognisable by their shape; add what was masked to `found`."""
    sink = set() if found is None else found
    text = _URL_USERINFO.sub(lambda m: _mask_url_userinfo(m, sink), text)
    text = _QUERY_PARAM.sub(lambda m: _mask_query_param(m, sink), text)
    text = _BEARER.sub(lambda m: _mask_auth_scheme(m, sink), text)
    text = _BASIC.sub(lambda m: _mask_basic(m, sink), text)
    return _KEY_SHAPES.sub(lambda m: _mask_key_shape(m, sink), text)


def _mask_tree(value: Any, secret: bool, found: set[str]) -> Any:
    # `secret` is inherited: everything under a secret-named key is secret. Numbers
    # and booleans stay (`max_tokens` is not a credential).
    if isinstance(value, dict):
        return {k: _mask_tree(v, secret or is_secret_key(str(k)), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_mask_tree(item, secret, found) for item in value]
    if isinstance(value, str):
        if secret and value:
            found.add(value)
            mask_text(value, found)  # also the bare token of "Bearer <token>", for logs
            return MASK
        return mask_text(value, found)
    return value


def _replace_tree(value: Any, secrets: Iterable[str]) -> Any:
    if isinstance(value, dict):
        return {k: _replace_tree(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_tree(item, secrets) for item in value]
    if isinstance(value, str):
        return redact(value, secrets)
    return value


def masked_value(name: str, value: Any) -> Any:
    """`value` with its secrets masked, judged by its key `name` and its content."""
    return _mask_tree(value, is_secret_key(name), set())


def _effective_tree(config: Config) -> dict[str, Any]:
    data = config.model_dump(mode="json", by_alias=True)
    # Not file keys, but an operator asking "what is running" wants to see them.
    data["_runtime"] = {
        "home": str(config.home),
        "config_path": str(config.config_path) if config.config_path else None,
        "database_url": config.database_url,
        "redis_url": config.redis_url,
    }
    return data


def _scan(config: Config) -> tuple[Any, set[str]]:
    found: set[str] = set()
    tree = _mask_tree(_effective_tree(config), False, found)
    return tree, {s for s in found if len(s) >= MIN_SECRET_LEN}


def masked(config: Config) -> dict[str, Any]:
    """The effective config as a JSON-able dict (file key spellings), secrets masked."""
    tree, secrets = _scan(config)
    # A secret may also be pasted into an innocent-looking field; mask it there too.
    return _replace_tree(tree, secrets)


def secret_values(config: Config) -> set[str]:
    """Every secret string in the config (at least MIN_SECRET_LEN long), for redaction."""
    return _scan(config)[1]


def redact(text: str, secrets: Iterable[str]) -> str:
    """`text` with each known secret, Bearer credential, key-shaped string and URL
    credential replaced by MASK."""
    # Longest first, so a secret that contains another is replaced whole.
    for secret in sorted({s for s in secrets if len(s) >= MIN_SECRET_LEN}, key=len, reverse=True):
        text = text.replace(secret, MASK)
    return mask_text(text)
