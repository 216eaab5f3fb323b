"""InboundMessage: what every channel adapter turns a platform event into."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from picobot.domain.channel import InboundMessage

__all__ = ["InboundMessage", "Reply"]


@dataclass
class Reply:
    """The gateway's answer to one input."""

    kind: str  # "accepted" | "rejected" | "command"
    session_id: str | None = None
    seq: int | None = None
    fate: str | None = None  # started | steered | queued | rejected
    code: str | None = None
    text: str = ""
    data: dict[str, Any] | None = None
    session_changed: bool = False
    retry_after: int | None = None  # seconds, with code "rate_limited"

    def to_frame(self) -> dict[str, Any]:
        frame: dict[str, Any] = {"type": self.kind}
        for key in ("session_id", "seq", "fate", "code", "retry_after", "data"):
            value = getattr(self, key)
            if value is not None:
                frame[key] = value
        if self.kind == "rejected":
            frame["error"] = self.text
        elif self.text:
            frame["text"] = self.text
        return frame
