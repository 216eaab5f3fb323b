"""How an MCP tool is named and described to the model.

`mcp_{server_key}_{tool_name}`, every character outside [a-zA-Z0-9_-] replaced by `_`
(the function-name alphabet OpenAI and Anthropic accept). Names longer than 64 characters
(their limit) are cut and end in `_` plus 8 hex digits of a hash of the full original name,
so two long names that share a beginning stay distinct and the same tool always gets the
same name.
"""

from __future__ import annotations

import hashlib
import re

MAX_NAME_CHARS = 64
HASH_CHARS = 8
DESCRIPTION_CHARS = 1024  # per tool: a chatty server must not eat the prompt

_UNSAFE = re.compile(r"[^a-zA-Z0-9_-]")


def exposed_name(server_key: str, tool_name: str, force_hash: bool = False) -> str:
    """The registry name of one MCP tool; `force_hash` adds the hash even to a short name
    (used when two tools of a server sanitise to the same name)."""
    raw = f"mcp_{server_key}_{tool_name}"
    clean = _UNSAFE.sub("_", raw)
    if len(clean) <= MAX_NAME_CHARS and not force_hash:
        return clean
    digest = hashlib.sha256(raw.encode("utf-8", "surrogatepass")).hexdigest()[:HASH_CHARS]
    return f"{clean[:MAX_NAME_CHARS - HASH_CHARS - 1]}_{digest}"


def trim_description(text: str | None, server_name: str, limit: int = DESCRIPTION_CHARS) -> str:
    """The tool's description for the model, prefixed with its server, cut to `limit` characters."""
    body = " ".join((text or "").split()) or "(no description)"
    full = f"[MCP {server_name}] {body}"
    return full if len(full) <= limit else full[: limit - 1] + "…"
