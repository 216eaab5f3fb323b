"""OpenAI response objects: a `chat.completion`, the `chat.completion.chunk`s of a stream, SSE framing.

JSON is written with ASCII escapes, so a lone surrogate in an answer can never break the encoding.
"""

from __future__ import annotations

import json
from typing import Any


def usage(input_tokens: int, output_tokens: int) -> dict[str, int]:
    return {"prompt_tokens": input_tokens, "completion_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens}


def completion(cid: str, model: str, created: int, text: str, tokens: dict[str, int]) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion", "created": created, "model": model,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text, "refusal": None},
                         "logprobs": None, "finish_reason": "stop"}],
            "usage": tokens}


def chunk(cid: str, model: str, created: int, delta: dict[str, Any], finish: str | None = None,
          **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}]}
    body.update(extra)
    return body


def progress_chunk(cid: str, model: str, created: int, info: dict[str, Any]) -> dict[str, Any]:
    """Tool progress as an extension field on a chunk with no choices: standard clients skip it."""
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
            "picobot": info}


def usage_chunk(cid: str, model: str, created: int, tokens: dict[str, int]) -> dict[str, Any]:
    return {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model, "choices": [],
            "usage": tokens}


def sse(obj: dict[str, Any]) -> str:
    return f"data: {json.dumps(obj, separators=(',', ':'))}\n\n"


DONE = "data: [DONE]\n\n"
