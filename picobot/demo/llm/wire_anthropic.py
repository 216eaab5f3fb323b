"""Anthropic Messages wire format: request parsing, JSON bodies, SSE events, errors."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from typing import Any

from picobot.demo.llm.behaviour import Reply, RequestView, split_fixed, split_words

NAME = "anthropic"
ERROR_TYPES = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
               404: "not_found_error", 413: "request_too_large", 429: "rate_limit_error",
               500: "api_error", 529: "overloaded_error"}
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def _blocks(content: Any) -> list[dict[str, Any]]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return [b for b in content or [] if isinstance(b, dict)]


def _text(blocks: list[dict[str, Any]]) -> str:
    return "".join(b.get("text", "") for b in blocks if b.get("type") == "text")


def _result_text(block: dict[str, Any]) -> str:
    content = block.get("content")
    return content if isinstance(content, str) else _text(_blocks(content))


def parse_request(body: dict[str, Any]) -> RequestView:
    messages: list[dict[str, Any]] = body.get("messages") or []
    use_names = {
        b.get("id"): b.get("name", "")
        for m in messages if m.get("role") == "assistant" for b in _blocks(m.get("content")) if b.get("type") == "tool_use"
    }
    last = _blocks(messages[-1].get("content")) if messages else []
    last_is_user = bool(messages) and messages[-1].get("role") == "user"
    results = [(use_names.get(b.get("tool_use_id"), "tool"), _result_text(b)) for b in last if b.get("type") == "tool_result"]
    user_texts = [_text(_blocks(m.get("content"))) for m in messages if m.get("role") == "user"]
    return RequestView(
        model=str(body.get("model") or "fake-model"),
        stream=bool(body.get("stream")),
        tool_names=[t.get("name", "") for t in body.get("tools") or []],
        last_user_text=next((t for t in reversed(user_texts) if t), ""),
        last_is_user=last_is_user and not results,
        tool_results=results if last_is_user else [],
        input_chars=len(json.dumps(messages)) + len(json.dumps(body.get("system") or "")),
    )


def validate(body: dict[str, Any]) -> str | None:
    """The error message the real API would give for a malformed request, or None."""
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: at least one message is required"
    if any(m.get("role") not in ("user", "assistant") for m in messages):
        return 'messages: roles must be "user" or "assistant"; use the top-level `system` parameter for system text'
    pending: set[str] = set()
    for i, m in enumerate(messages):
        blocks = _blocks(m.get("content"))
        if any(b.get("type") == "text" and not b.get("text") for b in blocks) and not isinstance(m.get("content"), str):
            return f"messages.{i}: text content blocks must be non-empty"
        for j, b in enumerate(blocks):  # without its id a block cannot be paired (nor its id sorted into a message)
            field = {"tool_use": "id", "tool_result": "tool_use_id"}.get(str(b.get("type")))
            if field is not None and not isinstance(b.get(field), str):
                return f"messages.{i}.content.{j}.{b['type']}.{field}: Field required"
        answered = {b["tool_use_id"] for b in blocks if b.get("type") == "tool_result"}
        if pending and not pending <= answered:
            return (f"messages.{i}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                    f"{', '.join(sorted(pending - answered))}")
        if answered - pending:
            return f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: {sorted(answered - pending)}"
        if any(b.get("type") == "thinking" and not b.get("signature") for b in blocks):
            return f"messages.{i}: thinking blocks need their signature"
        pending = {b["id"] for b in blocks if b.get("type") == "tool_use"} if m.get("role") == "assistant" else set()
    return None


def _frame(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def signature_for(thinking: str) -> str:
    return base64.b64encode(hashlib.sha256(thinking.encode()).digest()).decode()


def _content_blocks(reply: Reply) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if reply.reasoning:
        blocks.append({"type": "thinking", "thinking": reply.reasoning, "signature": signature_for(reply.reasoning)})
    if reply.redacted_thinking:
        blocks.append({"type": "redacted_thinking", "data": reply.redacted_thinking})
    if reply.content:
        blocks.append({"type": "text", "text": reply.content})
    for call in reply.tool_calls:
        blocks.append({"type": "tool_use", "id": "toolu_" + uuid.uuid4().hex[:24], "name": call.name,
                       "input": call.arguments})  # raw text here; parsed where the wire needs an object
    return blocks


def _message_shell(reply: Reply, view: RequestView) -> dict[str, Any]:
    return {"id": "msg_" + uuid.uuid4().hex[:24], "type": "message", "role": "assistant", "model": view.model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": reply.input_tokens, "output_tokens": 1}}


def _parsed_input(raw: str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return {}


def json_body(reply: Reply, view: RequestView) -> dict[str, Any]:
    body = _message_shell(reply, view)
    content = _content_blocks(reply)
    for block in content:
        if block["type"] == "tool_use":
            block["input"] = _parsed_input(block["input"])
    body.update(content=content, stop_reason=STOP_REASONS.get(reply.finish_reason, reply.finish_reason))
    body["usage"] = {"input_tokens": reply.input_tokens, "output_tokens": reply.output_tokens}
    return body


def _block_frames(index: int, block: dict[str, Any]) -> list[bytes]:
    kind = block["type"]
    if kind == "thinking":
        start: dict[str, Any] = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in split_words(block["thinking"])]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    elif kind == "text":
        start = {"type": "text", "text": ""}
        deltas = [{"type": "text_delta", "text": p} for p in split_words(block["text"])]
    elif kind == "tool_use":
        start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in split_fixed(block["input"])]
    else:  # redacted_thinking arrives whole
        start, deltas = block, []
    frames = [_frame("content_block_start", {"type": "content_block_start", "index": index, "content_block": start})]
    frames += [_frame("content_block_delta", {"type": "content_block_delta", "index": index, "delta": d}) for d in deltas]
    frames.append(_frame("content_block_stop", {"type": "content_block_stop", "index": index}))
    return frames


def stream_frames(reply: Reply, view: RequestView) -> list[bytes]:
    frames = [_frame("message_start", {"type": "message_start", "message": _message_shell(reply, view)}),
              _frame("ping", {"type": "ping"})]
    for index, block in enumerate(_content_blocks(reply)):
        frames += _block_frames(index, block)
    stop = STOP_REASONS.get(reply.finish_reason, reply.finish_reason)
    frames.append(_frame("message_delta", {"type": "message_delta",
                                           "delta": {"stop_reason": stop, "stop_sequence": None},
                                           "usage": {"output_tokens": reply.output_tokens}}))
    frames.append(_frame("message_stop", {"type": "message_stop"}))
    return frames


def error_body(status: int, message: str, error_type: str | None = None) -> dict[str, Any]:
    kind = error_type or ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_" + uuid.uuid4().hex[:24]}


def context_error() -> tuple[int, dict[str, Any]]:
    return 400, error_body(400, "prompt is too long: 215304 tokens > 200000 maximum", "invalid_request_error")


def stream_error_frame(message: str, error_type: str | None) -> bytes:
    return _frame("error", error_body(529, message, error_type or "overloaded_error"))
