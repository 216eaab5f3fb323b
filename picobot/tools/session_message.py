"""`send_session_message`: send a message to the current chat or another one, mid-turn."""

from __future__ import annotations

from typing import Any

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext


class SendSessionMessageTool(Tool):
    name = "send_session_message"
    description = (
        "Send a message now: progress, a scheduled task's result, or to another chat the user named; "
        "not your final answer."
    )
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "Markdown allowed."},
            "channel": {"type": "string"},
            "chat_id": {"type": "string", "description": "Default: this chat."},
        },
        "required": ["text"],
        "additionalProperties": False,
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if ctx.send_message is None:
            raise ToolError("sending messages is not available in this context")
        text = args["text"]
        if not text.strip():
            raise ToolError("The message text is empty.")
        with ctx.gate.side_effect():  # a stopped turn sends nothing more
            receipt = ctx.send_message(text, channel=args.get("channel"), chat_id=args.get("chat_id"))
        return receipt or "Message sent."
