"""TurnController: reduces a turn's events into full TurnSnapshots (ordered blocks, monotonic revision)."""

from __future__ import annotations

import threading
from typing import Any, Callable

from picobot.domain.messages import ToolCall, text_of
from picobot.security.redact import replace_secrets

Listener = Callable[[], None]  # told that a new revision exists; pulls snapshot() when it wants


class TurnController:
    """The single owner of an active turn's visible state. Thread-safe."""

    def __init__(self, session_id: str, turn_id: str, listener: Listener | None = None,
                 show_tool_results: bool = True, result_preview_chars: int = 2000,
                 secrets: frozenset[str] = frozenset()):
        self.session_id = session_id
        # configured secret values, masked in every snapshot: a model may echo one it was tricked into
        self.secrets = secrets
        self.turn_id = turn_id
        self.blocks: list[dict[str, Any]] = []
        self.revision = 0
        self.status = "running"
        self.inbound_seqs: list[int] = []
        self.listener = listener
        self._show_results = show_tool_results
        self._preview = result_preview_chars
        self._lock = threading.RLock()
        self._streaming_tools: dict[int, dict[str, Any]] = {}
        self._call_text = ""  # text of the model call in flight, kept if the turn is stopped
        self._call_start = 0
        self._call_prefix = -1
        self.answered_by: str | None = None

    # --- events ----------------------------------------------------------------------

    def user(self, seq: int, content: Any) -> None:
        with self._lock:
            self.inbound_seqs.append(seq)
            self.blocks.append({"type": "user", "seq": seq, "text": text_of(content)})
            self._bump()

    def reasoning(self, text: str) -> None:
        self._append_text("reasoning", text)

    def text(self, text: str) -> None:
        with self._lock:
            self._call_text += text
        self._append_text("text", text)

    def model_call_started(self) -> None:
        with self._lock:
            self._streaming_tools = {}
            self._call_text = ""
            # where this call's output starts, so a restarted call can take it back
            last = self.blocks[-1] if self.blocks else None
            self._call_start = len(self.blocks)
            self._call_prefix = len(last["text"]) if last and last["type"] in ("text", "reasoning") else -1

    def restart_call(self) -> None:
        """Forget what the model call in flight has shown: it starts again elsewhere (a fallback)."""
        with self._lock:
            del self.blocks[self._call_start:]
            if self._call_prefix >= 0 and self.blocks:
                self.blocks[-1]["text"] = self.blocks[-1]["text"][:self._call_prefix]
            self._streaming_tools = {}
            self._call_text = ""
            self._bump()

    def answered(self, label: str) -> None:
        """Record which `<provider>:<model>` answered (a fallback chain); shown in the snapshot."""
        with self._lock:
            self.answered_by = label

    def partial_text(self) -> str:
        """What the model in flight had said so far (for a stopped turn's record)."""
        with self._lock:
            return replace_secrets(self._call_text, self.secrets) if self.secrets else self._call_text

    def tool_call_streaming(self, index: int, call_id: str | None, name: str | None, arguments: str) -> None:
        with self._lock:
            block = self._streaming_tools.get(index)
            if block is None:
                block = {"type": "tool", "id": call_id or "", "name": name or "", "arguments": "", "status": "pending"}
                self._streaming_tools[index] = block
                self.blocks.append(block)
            if call_id:
                block["id"] = call_id
            if name:
                block["name"] = name
            block["arguments"] += arguments
            self._bump()

    def tool_waiting(self, call: ToolCall) -> None:
        """A call of the batch about to run: its block exists (in request order), `pending` until it starts."""
        with self._lock:
            if self._find_tool(call.id) is None:
                self.blocks.append({"type": "tool", "id": call.id, "name": call.name, "arguments": call.arguments,
                                    "status": "pending"})
                self._bump()

    def tool_started(self, call: ToolCall) -> None:
        with self._lock:
            block = self._find_tool(call.id)
            if block is None:
                block = {"type": "tool", "id": call.id, "name": call.name, "arguments": call.arguments}
                self.blocks.append(block)
            block.update(status="running", arguments=call.arguments, name=call.name)
            self._bump()

    def tool_finished(self, call: ToolCall, result: str, is_error: bool) -> None:
        with self._lock:
            block = self._find_tool(call.id)
            if block is None:
                block = {"type": "tool", "id": call.id, "name": call.name, "arguments": call.arguments}
                self.blocks.append(block)
            block["status"] = "error" if is_error else "done"
            if self._show_results or is_error:
                block["result"] = result[: self._preview]
            self._bump()

    def subagent_started(self, run_id: str, info: dict[str, Any]) -> None:
        """A nested block for a sub-agent run; `info` holds its type, description, status, background."""
        with self._lock:
            self.blocks.append({"type": "subagent", "run_id": run_id, **info, "blocks": []})
            self._bump()

    def subagent_progress(self, run_id: str, blocks: list[dict[str, Any]] | None = None, **fields: Any) -> None:
        """The run's own blocks (a fresh list each time, never changed after) and changed fields."""
        with self._lock:
            block = next((b for b in reversed(self.blocks)
                          if b["type"] == "subagent" and b.get("run_id") == run_id), None)
            if block is None:
                return
            if blocks is not None:
                block["blocks"] = blocks
            block.update(fields)
            self._bump()

    def finish(self, status: str) -> None:
        with self._lock:
            self.status = status
            self._bump()

    # --- state -----------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return self._snapshot()

    def _snapshot(self) -> dict[str, Any]:
        return {
            "type": "turn_updated", "session_id": self.session_id, "turn_id": self.turn_id,
            "revision": self.revision, "status": self.status, "inbound_seqs": list(self.inbound_seqs),
            "blocks": [self._masked(b) for b in self.blocks],
            **({"answered_by": self.answered_by} if self.answered_by else {}),
        }

    def _masked(self, block: dict[str, Any]) -> dict[str, Any]:
        out = dict(block)
        if self.secrets:
            for key in ("text", "arguments", "result"):
                if isinstance(out.get(key), str):
                    out[key] = replace_secrets(out[key], self.secrets)
        return out

    def _append_text(self, kind: str, text: str) -> None:
        if not text:
            return
        with self._lock:
            if self.blocks and self.blocks[-1]["type"] == kind:
                self.blocks[-1]["text"] += text
            else:
                self.blocks.append({"type": kind, "text": text})
            self._bump()

    def _find_tool(self, call_id: str) -> dict[str, Any] | None:
        for block in reversed(self.blocks):
            if block["type"] == "tool" and block.get("id") == call_id:
                return block
        return None

    def _bump(self) -> None:
        self.revision += 1
        if self.listener is not None:
            self.listener()
