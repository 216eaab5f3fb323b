"""send_session_message: deliver text from a turn to its own chat or another one."""

from __future__ import annotations

from typing import TYPE_CHECKING

from picobot.channels import outbound
from picobot.channels.access import agent_for
from picobot.domain.messages import ChatMessage
from picobot.storage import messages, sessions

if TYPE_CHECKING:
    from picobot.runtime.services import Runtime

MARKER_SESSION_MESSAGE = "session_message"


class SessionMessenger:
    def __init__(self, rt: "Runtime", session_id: str, channel: str, chat_id: str):
        self.rt = rt
        self.session_id = session_id
        self.channel = channel
        self.chat_id = chat_id

    def __call__(self, text: str, *, channel: str | None = None, chat_id: str | None = None) -> str:
        channel = channel or self.channel
        chat_id = chat_id or self.chat_id
        external = self.rt.channels.external(channel)
        with self.rt.db.write() as s:
            target = sessions.get_or_create_current(s, channel, chat_id, agent_for(self.rt, channel))
            target_id = target.id
            if target_id != self.session_id:
                # the current session records it through this tool call's own result
                messages.append(s.connection(), target_id, None, [
                    ChatMessage(role="assistant", content=text, marker=MARKER_SESSION_MESSAGE)
                ])
            if external:  # a platform chat: delivered from the outbox, recorded in this transaction
                outbound.record_message(s.connection(), channel, chat_id, text, session_id=target_id)
        if external:
            outbound.wake(self.rt, channel, chat_id)
        self.rt.publisher.publish({
            "type": "message", "session_id": target_id, "text": text, "from_session": self.session_id,
        })
        return f"Delivered to {channel}:{chat_id} (session {target_id})."
