"""IlinkApi: the iLink bot HTTP API (JSON POSTs, QR status GETs) and its errors (/work notes: wechat.md).

Headers per request: `AuthorizationType: ilink_bot_token`, `Authorization: Bearer <token>` (not on QR
calls), `X-WECHAT-UIN` = base64 of a random uint32's decimal string, `iLink-App-Id`,
`iLink-App-ClientVersion`. Every authenticated body carries `base_info`. Success is `ret: 0`; a
failure is `ret`/`errcode` + `errmsg`, usually with HTTP 200 — IlinkError keeps the code.
"""

from __future__ import annotations

import base64
import random
from typing import Any

import httpx

CHANNEL_VERSION = "2.4.8"
BOT_AGENT = "PicoBot"
CLIENT_VERSION = str((2 << 16) | (4 << 8) | 8)
SESSION_EXPIRED = -14  # token revoked (bound elsewhere) or expired: log in again
WINDOW = -2  # mostly the delivery window: the user has to write first


class IlinkError(Exception):
    """An iLink call failed: `code` is ret/errcode (None for HTTP/network failures); `transient` = worth retrying."""

    def __init__(self, message: str, code: int | None = None, transient: bool = True) -> None:
        super().__init__(message)
        self.code = code
        self.transient = transient

    @property
    def session_expired(self) -> bool:
        return self.code == SESSION_EXPIRED

    @property
    def permanent(self) -> bool:  # read by the event inbox: a transient error does not use up attempts
        return not self.transient


def _uin() -> str:
    return base64.b64encode(str(random.getrandbits(32)).encode()).decode()


def base_info() -> dict[str, str]:
    return {"channel_version": CHANNEL_VERSION, "bot_agent": BOT_AGENT}


def _code(body: Any) -> int:
    if not isinstance(body, dict):
        return 0
    for key in ("ret", "errcode"):
        value = body.get(key)
        if isinstance(value, int) and not isinstance(value, bool) and value != 0:
            return value
    return 0


class IlinkApi:
    def __init__(self, base_url: str, token: str = "", timeout: float = 15.0) -> None:
        self.base_url = base_url.rstrip("/")
        self.token = token
        self._http = httpx.Client(timeout=timeout, follow_redirects=False)

    def close(self) -> None:
        self._http.close()

    def _headers(self, auth: bool) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "AuthorizationType": "ilink_bot_token",
                   "X-WECHAT-UIN": _uin(), "iLink-App-Id": "bot", "iLink-App-ClientVersion": CLIENT_VERSION}
        if auth and self.token:
            headers["Authorization"] = f"Bearer {self.token}"
        return headers

    def _result(self, call: str, response: httpx.Response) -> dict[str, Any]:
        if response.status_code >= 500 or response.status_code == 429:
            raise IlinkError(f"{call}: HTTP {response.status_code}")
        if response.status_code >= 400:
            raise IlinkError(f"{call}: HTTP {response.status_code}", transient=response.status_code in (408, 409))
        try:
            body = response.json()
        except ValueError:
            raise IlinkError(f"{call}: the answer is not JSON") from None
        if not isinstance(body, dict):
            raise IlinkError(f"{call}: the answer is not a JSON object")
        code = _code(body)
        if code:
            message = str(body.get("errmsg") or "")[:200]
            raise IlinkError(f"{call}: ret {code} {message}".strip(), code=code,
                             transient=code not in (SESSION_EXPIRED,))
        return body

    def post(self, path: str, body: dict[str, Any], timeout: float | None = None, auth: bool = True,
             base: str | None = None) -> dict[str, Any]:
        call = path.rsplit("/", 1)[-1]
        payload = {**body, "base_info": base_info()} if auth else body
        try:
            response = self._http.post(f"{base or self.base_url}{path}", json=payload, headers=self._headers(auth),
                                       timeout=timeout if timeout is not None else httpx.USE_CLIENT_DEFAULT)
        except httpx.TimeoutException:
            raise IlinkError(f"{call}: timed out") from None
        except httpx.HTTPError as exc:
            raise IlinkError(f"{call}: {type(exc).__name__}") from None
        return self._result(call, response)

    def get(self, path: str, params: dict[str, str], timeout: float, base: str | None = None) -> dict[str, Any]:
        call = path.rsplit("/", 1)[-1]
        try:
            response = self._http.get(f"{base or self.base_url}{path}", params=params, headers=self._headers(False),
                                      timeout=timeout)
        except httpx.TimeoutException:
            raise IlinkError(f"{call}: timed out") from None
        except httpx.HTTPError as exc:
            raise IlinkError(f"{call}: {type(exc).__name__}") from None
        return self._result(call, response)

    # ---- login -------------------------------------------------------------------------------

    def get_bot_qrcode(self, local_tokens: list[str]) -> dict[str, Any]:
        return self.post("/ilink/bot/get_bot_qrcode?bot_type=3", {"local_token_list": local_tokens[:10]},
                         auth=False)

    def qrcode_status(self, qrcode: str, base: str | None = None, timeout: float = 40.0) -> dict[str, Any]:
        return self.get("/ilink/bot/get_qrcode_status", {"qrcode": qrcode}, timeout, base=base)

    # ---- messages ----------------------------------------------------------------------------

    def get_updates(self, cursor: str, hold_secs: float) -> dict[str, Any]:
        return self.post("/ilink/bot/getupdates", {"get_updates_buf": cursor}, timeout=hold_secs + 10)

    def send_message(self, to_user: str, client_id: str, context_token: str, item: dict[str, Any]) -> dict[str, Any]:
        msg = {"from_user_id": "", "to_user_id": to_user, "client_id": client_id, "message_type": 2,
               "message_state": 2, "context_token": context_token, "item_list": [item]}
        return self.post("/ilink/bot/sendmessage", {"msg": msg})

    def typing_ticket(self, user_id: str, context_token: str) -> str:
        body = self.post("/ilink/bot/getconfig", {"ilink_user_id": user_id, "context_token": context_token})
        return str(body.get("typing_ticket") or "")

    def send_typing(self, user_id: str, ticket: str, typing: bool) -> None:
        self.post("/ilink/bot/sendtyping", {"ilink_user_id": user_id, "typing_ticket": ticket,
                                            "status": 1 if typing else 2}, timeout=5.0)

    def upload_url(self, body: dict[str, Any]) -> dict[str, Any]:
        return self.post("/ilink/bot/getuploadurl", body)
