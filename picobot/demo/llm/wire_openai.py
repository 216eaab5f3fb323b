"""OpenAI Chat Completions wire format: request parsing, JSON bodies, SSE chunks, errors."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

from picobot.demo.llm.behaviour import Reply, RequestView, split_fixed, split_words

NAME = "openai"
ERROR_TYPES = {400: "invalid_request_error", 401: "invalid_request_error", 403: "permission_denied",
               404: "invalid_request_error", 429: "rate_limit_exceeded", 500: "server_error", 503: "server_error"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
    return ""


TOOL_IMAGES_TEXT = "(images from the tool results above)"  # picobot/providers/openai_provider.py


def parse_request(body: dict[str, Any]) -> RequestView:
    messages: list[dict[str, Any]] = body.get("messages") or []
    call_names = {
        c.get("id"): (c.get("function") or {}).get("name", "")
        for m in messages if m.get("role") == "assistant" for c in m.get("tool_calls") or []
    }
    # The user message PicoBot sends right after tool results with their images (a tool message holds
    # text only) belongs to the results, not to what the user said.
    images = {i for i, m in enumerate(messages) if m.get("role") == "user" and i and messages[i - 1].get("role") == "tool"
              and _text(m.get("content")) == TOOL_IMAGES_TEXT}
    said = [m for i, m in enumerate(messages) if i not in images]
    tool_results: list[tuple[str, str]] = []
    for m in reversed(said):
        if m.get("role") != "tool":
            break
        tool_results.insert(0, (call_names.get(m.get("tool_call_id"), m.get("name") or "tool"), _text(m.get("content"))))
    user_texts = [_text(m.get("content")) for m in said if m.get("role") == "user"]
    messages = said
    return RequestView(
        model=str(body.get("model") or "fake-model"),
        stream=bool(body.get("stream")),
        tool_names=[(t.get("function") or {}).get("name", "") for t in body.get("tools") or []],
        last_user_text=next((t for t in reversed(user_texts) if t), ""),
        last_is_user=bool(messages) and messages[-1].get("role") == "user",
        tool_results=tool_results,
        input_chars=len(json.dumps(messages)),
        include_usage=bool((body.get("stream_options") or {}).get("include_usage")),
    )


def validate(body: dict[str, Any]) -> str | None:
    """The error message a real server would give for a malformed request, or None."""
    messages = body.get("messages")
    if not body.get("model"):
        return "you must provide a model parameter"
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    pending: set[str] = set()
    for i, m in enumerate(messages):
        role = m.get("role")
        if role not in ("system", "developer", "user", "assistant", "tool"):
            return f"messages[{i}].role: invalid value {role!r}"
        if role == "tool":
            if m.get("tool_call_id") not in pending:
                return f"messages[{i}]: 'tool' messages must answer a preceding tool_calls id"
            pending.discard(m.get("tool_call_id"))
            continue
        if pending:
            return f"messages[{i}]: tool_call_ids did not have response messages: {sorted(pending)}"
        if role == "assistant":
            pending = {c.get("id") for c in m.get("tool_calls") or []}
    return None


def _chunk_base(cid: str, model: str) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion.chunk", "created": int(time.time()), "model": model,
            "system_fingerprint": "fp_fake"}


def _frame(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data)
    return f"data: {text}\n\n".encode()


def _tool_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def stream_frames(reply: Reply, view: RequestView) -> list[bytes]:
    cid = "chatcmpl-" + uuid.uuid4().hex[:24]
    base = _chunk_base(cid, view.model)
    usage_field = {"usage": None} if view.include_usage else {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        return _frame({**base, "choices": [choice], **usage_field})

    frames = [chunk({"role": "assistant", "content": "" if not reply.tool_calls else None, "refusal": None})]
    frames += [chunk({"reasoning_content": piece}) for piece in split_words(reply.reasoning) if reply.reasoning]
    frames += [chunk({"content": piece}) for piece in split_words(reply.content) if reply.content]
    for index, call in enumerate(reply.tool_calls):
        first = {"index": index, "id": _tool_id(), "type": "function", "function": {"name": call.name, "arguments": ""}}
        frames.append(chunk({"tool_calls": [first]}))
        frames += [chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]})
                   for piece in split_fixed(call.arguments) if piece]
    frames.append(chunk({}, reply.finish_reason))
    if view.include_usage:
        frames.append(_frame({**base, "choices": [], "usage": _usage(reply)}))
    frames.append(_frame("[DONE]"))
    return frames


def _usage(reply: Reply) -> dict[str, Any]:
    usage: dict[str, Any] = {"prompt_tokens": reply.input_tokens, "completion_tokens": reply.output_tokens,
                             "total_tokens": reply.input_tokens + reply.output_tokens}
    if reply.cached_input_tokens:
        usage["prompt_tokens_details"] = {"cached_tokens": reply.cached_input_tokens}
    return usage


def json_body(reply: Reply, view: RequestView) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": reply.content or None, "refusal": None}
    if reply.reasoning:
        message["reasoning_content"] = reply.reasoning
    if reply.tool_calls:
        message["tool_calls"] = [
            {"id": _tool_id(), "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in reply.tool_calls
        ]
    return {
        "id": "chatcmpl-" + uuid.uuid4().hex[:24], "object": "chat.completion", "created": int(time.time()),
        "model": view.model, "system_fingerprint": "fp_fake",
        "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": reply.finish_reason}],
        "usage": _usage(reply),
    }


def error_body(status: int, message: str, error_type: str | None = None, code: str | None = None) -> dict[str, Any]:
    kind = error_type or ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}


def context_error() -> tuple[int, dict[str, Any]]:
    message = ("This model's maximum context length is 128000 tokens. However, your messages resulted in "
               "131072 tokens. Please reduce the length of the messages.")
    body = error_body(400, message, "invalid_request_error", "context_length_exceeded")
    body["error"]["param"] = "messages"
    return 400, body


def stream_error_frame(message: str, error_type: str | None) -> bytes:
    return _frame(error_body(500, message, error_type or "server_error"))
