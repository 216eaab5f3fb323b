"""Messages to a chat outside a turn's own answer: `send_session_message`, a job's message, notices.

Socket chats (web, cli_chat) get a stored message in their current dialog and a `message` event;
an external chat gets an outbox delivery, recorded in the same transaction by the plugin that owns
its channel (`picobot_outbox_message`), and woken after the commit.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable, Sequence

from picobot.domain.messages import ChatMessage
from picobot.config.access import agent_for
from picobot.storage import messages, sessions

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.turns")

MARKER_SESSION_MESSAGE = "session_message"


def record_outbox(conn: "Connection", ports: "Ports", channel: str, chat_id: str, text: str, kind: str = "message",
                  key: str | None = None, session_id: str | None = None,
                  buttons: Sequence[tuple[str, str]] = ()) -> list[Callable[[], Any]]:
    """Offer a message for an external chat to the plugins (in the caller's transaction); returns what
    to run after the commit — empty when no plugin owns the channel. `buttons`: (label, command) pairs."""
    return ports.plugins.call("picobot_outbox_message", conn=conn, channel=channel, chat_id=chat_id, text=text,
                              kind=kind, key=key, session_id=session_id, ports=ports, buttons=tuple(buttons))


def run_after(callbacks: list[Callable[[], Any]]) -> None:
    """Run what hooks asked to run after a commit (waking a delivery lane): best effort each."""
    for callback in callbacks:
        if callable(callback):
            try:
                callback()
            except Exception:  # a lost wake-up is the sweeper's to repair
                log.exception("an after-commit hook failed")


def send_to_chat(ports: "Ports", channel: str, chat_id: str, text: str, kind: str = "message",
                 key: str | None = None, buttons: Sequence[tuple[str, str]] = ()) -> None:
    """Deliver text to an external chat through its channel plugin; ValueError when none owns it."""
    with ports.db.begin() as conn:
        after = record_outbox(conn, ports, channel, chat_id, text, kind, key, buttons=buttons)
        if not after:
            raise ValueError(f"channel {channel!r} is not a configured, enabled external channel")
    run_after(after)


class SessionMessenger:
    def __init__(self, ports: "Ports", session_id: str, channel: str, chat_id: str):
        self.ports = ports
        self.session_id = session_id
        self.channel = channel
        self.chat_id = chat_id

    def __call__(self, text: str, *, channel: str | None = None, chat_id: str | None = None) -> str:
        channel = channel or self.channel
        chat_id = chat_id or self.chat_id
        with self.ports.db.write() as s:
            target = sessions.get_or_create_current(s, channel, chat_id, agent_for(self.ports.config, channel))
            target_id = target.id
            if target_id != self.session_id:
                # the current session records it through this tool call's own result
                messages.append(s.connection(), target_id, None, [
                    ChatMessage(role="assistant", content=text, marker=MARKER_SESSION_MESSAGE)
                ])
            after = record_outbox(s.connection(), self.ports, channel, chat_id, text, session_id=target_id)
        run_after(after)
        self.ports.publisher.publish({
            "type": "message", "session_id": target_id, "text": text, "from_session": self.session_id,
        })
        return f"Delivered to {channel}:{chat_id} (session {target_id})."
