"""The audit log: every tool call, its result and every final answer as one JSON line, secrets masked.

Config: `plugins.audit_log.enabled` and `plugins.audit_log.path` (relative to the PicoBot home).
Lines are appended under a lock, one `write` each, so concurrent turns never interleave a line.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

from picobot.plugins import hookimpl
from picobot.security.redact import masked_value, redact_tree

MAX_FIELD_CHARS = 4000  # a tool result or answer is logged up to this many characters


class AuditLogPlugin:
    def __init__(self, config: Any) -> None:
        path = Path(config.plugins.audit_log.path).expanduser()
        self.path = path if path.is_absolute() else config.home / path
        from picobot.config.secrets import secret_values

        self._secrets = frozenset(secret_values(config))
        self._lock = threading.Lock()

    def _write(self, record: dict[str, Any]) -> None:
        clean = redact_tree(masked_value("", record), self._secrets)
        line = json.dumps({"time": round(time.time(), 3), **clean}, ensure_ascii=False, default=str)
        line = line.encode("utf-8", "replace").decode("utf-8")  # a lone surrogate never breaks the file
        with self._lock:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                f.write(line + "\n")

    @staticmethod
    def _who(ctx: Any) -> dict[str, Any]:
        return {"session_id": ctx.session_id, "turn_id": ctx.turn_id, "channel": ctx.channel,
                "chat_id": ctx.chat_id, "sender_id": ctx.sender_id}

    @hookimpl(trylast=True)  # after every other plugin: the arguments that will really run
    def before_toolcall(self, ctx: Any, call: Any) -> None:
        self._write({"event": "tool_call", **self._who(ctx), "tool": call.name, "call_id": call.id,
                     "arguments": call.arguments})

    @hookimpl(trylast=True)
    def after_toolcall(self, ctx: Any, call: Any, result: str) -> None:
        self._write({"event": "tool_result", **self._who(ctx), "tool": call.name, "call_id": call.id,
                     "result": _cut(result)})

    @hookimpl
    def after_output(self, ctx: Any, turn: Any) -> None:
        self._write({"event": "answer", **self._who(ctx), "status": turn.status,
                     "text": _cut(turn.final_text or ""), "error": turn.error})


def _cut(text: str) -> str:
    return text if len(text) <= MAX_FIELD_CHARS else text[:MAX_FIELD_CHARS] + f"… [{len(text)} characters]"
