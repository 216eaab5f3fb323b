"""Whose a chat is: the socket channels (the owner's own clients) and a sender's memory scope."""

from __future__ import annotations

from picobot.errors import MemoryRejected

# The web UI and the terminal client are paired devices of the install's owner: one scope for both.
SOCKET_CHANNELS = frozenset({"web", "cli_chat"})
OWNER_CHANNELS = SOCKET_CHANNELS
OWNER_SCOPE = "owner"
MAX_SCOPE_KEY = 320


def scope_key_for(channel: str, sender_id: str) -> str:
    """The user scope of a sender: `channel:sender_id`, or `owner` for the web UI and terminal."""
    if channel in OWNER_CHANNELS:
        return OWNER_SCOPE
    if not channel or not sender_id:
        raise MemoryRejected("This chat has no sender to keep memories for.")
    return f"{channel}:{sender_id}"[:MAX_SCOPE_KEY]
