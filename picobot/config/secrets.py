"""Keep secrets out of what PicoBot prints and logs, judged against the config.

`masked(config)` is what `picobot config` prints; `secret_values(config)` feeds a log
filter that calls `redact(text, secrets)` on every record. The masking rules themselves
live in `picobot.security.redact`, which knows nothing of the config; they are
re-exported here for the config's users.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.security.redact import (
    MASK,
    MIN_SECRET_LEN,
    is_secret_key,
    mask_text,
    mask_tree,
    masked_value,
    redact,
    redact_tree,
)

if TYPE_CHECKING:  # only for annotations: the schema imports the redactor, not this module
    from picobot.config.schema import Config

__all__ = ["MASK", "is_secret_key", "mask_text", "masked", "masked_value", "redact", "secret_values"]


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
    tree = mask_tree(_effective_tree(config), False, found)
    return tree, {s for s in found if len(s) >= MIN_SECRET_LEN}


def masked(config: Config) -> dict[str, Any]:
    """The effective config as a JSON-able dict (file key spellings), secrets masked."""
    tree, secrets = _scan(config)
    # A secret may also be pasted into an innocent-looking field; mask it there too.
    return redact_tree(tree, secrets)


def secret_values(config: Config) -> set[str]:
    """Every secret string in the config (at least MIN_SECRET_LEN long), for redaction."""
    return _scan(config)[1]
