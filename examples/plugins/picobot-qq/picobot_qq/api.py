"""OneBot API calls (`send_private_msg`, `send_group_msg`, …): over HTTP to `http_url`, or relayed
through Redis to the process holding the channel's WebSocket.

A delivery runs in a Celery worker, not where the WebSocket is: `RelayedApi.call` pushes the call
onto `qq:<channel>:calls` and waits on `qq:<channel>:reply:<echo>`; the holder (link.py) sends it,
and pushes the answer frame back. With no holder connected it fails at once, as a transient error.
A call carries its deadline: a holder that comes back later drops it instead of sending it late.
"""

from __future__ import annotations

import json
import math
import time
import uuid
from typing import Any

import httpx

from picobot_qq import state

# OneBot retcodes a retry cannot fix: bad parameters, no such target, refused
PERMANENT_RETCODES = frozenset({100, 102, 1400, 1403, 1404})


class ApiError(Exception):
    def __init__(self, message: str, *, transient: bool, retcode: int | None = None) -> None:
        super().__init__(message)
        self.transient = transient
        self.retcode = retcode


def answer_data(frame: Any) -> Any:
    """The `data` of an answer frame; ApiError when the platform says it failed."""
    if not isinstance(frame, dict):
        raise ApiError("the platform answered something that is not a OneBot answer", transient=True)
    retcode = frame.get("retcode")
    if frame.get("status") in ("ok", "async") or retcode in (0, 1):
        return frame.get("data")
    code = retcode if isinstance(retcode, int) and not isinstance(retcode, bool) else None
    why = frame.get("wording") or frame.get("message") or frame.get("msg") or frame.get("status") or "failed"
    return _raise(f"retcode {code}: {str(why)[:200]}", code)


def _raise(message: str, code: int | None) -> Any:
    raise ApiError(message, transient=code not in PERMANENT_RETCODES, retcode=code)


class RelayedApi:
    def __init__(self, r: Any, channel: str, timeout: float) -> None:
        self.r, self.channel, self.timeout = r, channel, timeout

    def call(self, action: str, params: dict[str, Any]) -> Any:
        if not state.connected(self.r, self.channel):
            raise ApiError(f"QQ channel {self.channel} is not connected (no process holds its WebSocket)",
                           transient=True)
        echo = uuid.uuid4().hex
        call = {"action": action, "params": params, "echo": echo, "expires": time.time() + self.timeout}
        calls = state.key(self.channel, "calls")
        self.r.rpush(calls, json.dumps(call, ensure_ascii=False))
        self.r.expire(calls, 600)
        got = self.r.blpop([state.key(self.channel, "reply", echo)], timeout=max(1, math.ceil(self.timeout)))
        if got is None:
            raise ApiError(f"{action}: no answer within {self.timeout:g} s", transient=True)
        try:
            frame = json.loads(state.text(got[1]) or "")
        except ValueError:
            frame = None
        return answer_data(frame)


class HttpApi:
    def __init__(self, base_url: str, token: str, timeout: float) -> None:
        self.base_url, self.timeout = base_url.rstrip("/"), timeout
        self.headers = {"Authorization": f"Bearer {token}"} if token else {}

    def call(self, action: str, params: dict[str, Any]) -> Any:
        try:
            response = httpx.post(f"{self.base_url}/{action}", json=params, headers=self.headers, timeout=self.timeout)
        except httpx.HTTPError as exc:
            raise ApiError(f"{action}: {type(exc).__name__}", transient=True) from None
        if response.status_code in (401, 403):
            raise ApiError(f"{action}: the platform refused the access token ({response.status_code})", transient=False)
        if response.status_code == 404:
            raise ApiError(f"{action}: the platform has no such API (404)", transient=False)
        if response.status_code >= 300:
            raise ApiError(f"{action}: HTTP {response.status_code}", transient=True)
        try:
            frame = response.json()
        except ValueError:
            frame = None
        return answer_data(frame)
