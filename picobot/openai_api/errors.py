"""Errors in OpenAI's shape, `{"error": {"message", "type", "param", "code"}}`, for every /v1 answer.

Clients built on the official SDKs pick their exception class from the status (401 →
AuthenticationError, 404 → NotFoundError, 429 → RateLimitError …) and show `message`.
"""

from __future__ import annotations

from typing import Any

INVALID = "invalid_request_error"
AUTH = "authentication_error"
PERMISSION = "permission_error"
NOT_FOUND = "not_found_error"
RATE_LIMIT = "rate_limit_error"
SERVER = "server_error"
TIMEOUT = "timeout_error"


class ApiError(Exception):
    """A /v1 request that gets an error answer; `message` never repeats a credential."""

    def __init__(self, status: int, message: str, type_: str = INVALID, param: str | None = None,
                 code: str | None = None, retry_after: int | None = None):
        super().__init__(message)
        self.status = status
        self.message = message
        self.type = type_
        self.param = param
        self.code = code
        self.retry_after = retry_after

    def body(self) -> dict[str, Any]:
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def bad_request(message: str, param: str | None = None, code: str | None = None) -> ApiError:
    return ApiError(400, message, INVALID, param, code)


# The gateway's rejection codes (picobot/gateway/intake.py) as HTTP statuses and OpenAI error types.
REJECTIONS: dict[str, tuple[int, str]] = {
    "forbidden": (403, PERMISSION),
    "rate_limited": (429, RATE_LIMIT),
    "queue_full": (429, RATE_LIMIT),
    "too_large": (413, INVALID),
    "empty": (400, INVALID),
    "bad_content": (400, INVALID),
}


def rejected(code: str | None, text: str, retry_after: int | None = None) -> ApiError:
    status, type_ = REJECTIONS.get(code or "", (400, INVALID))
    return ApiError(status, text, type_, "messages" if status in (400, 413) else None, code, retry_after)
