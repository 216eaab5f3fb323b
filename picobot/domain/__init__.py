"""Plain data shared by every layer: messages, tool calls, cancellation."""

from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage, ToolCall, Usage, text_of

__all__ = ["CancelToken", "ChatMessage", "ToolCall", "Usage", "text_of"]
