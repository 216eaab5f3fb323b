"""`send_session_message`: send a message to the current chat or another one, mid-turn."""

from __future__ import annotations

from typing import Any

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext


class SendSessionMessageTool(Tool):
    name = "send_session_message"
    description = (
        "Send a message to a chat right now, without ending your turn. Without channel and "
        "chat_id it goes to the current chat: use it for progress updates during long work or "
        "for delivering results from scheduled tasks. Give channel and chat_id to message a "
        "different chat the user has asked you to reach. Your final answer is delivered "
        "anyway, so do not repeat it with this tool. Returns a delivery receipt."
    )
    parameters = {
        "type": "object",
        "properties": {
            "text": {"type": "string", "minLength": 1, "description": "The message text (Markdown allowed)."},
            "channel": {
                "type": "string",
                "description": "Target channel, e.g. \"web\", \"telegram\", \"feishu\". Default: the current one.",
            },
            "chat_id": {"type": "string", "description": "Target chat id on that channel. Default: the current chat."},
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
        receipt = ctx.send_message(text, channel=args.get("channel"), chat_id=args.get("chat_id"))
        return receipt or "Message sent."
