"""The QR login: show iLink's QR code in the terminal, wait for the scan and the confirmation, save the login.

`get_bot_qrcode` gives a key and the URL to encode; `get_qrcode_status` is held by iLink up to ~35 s
and answers wait | scaned | confirmed (token, bot id, base URL) | expired (a new QR, at most 3) |
scaned_but_redirect (poll `redirect_host` from then on) | binded_redirect (this client is bound
already: the saved login stays) | need_verifycode | verify_code_blocked. Gives up after 480 s.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

from picobot.channels.wechat import creds
from picobot.channels.wechat.api import IlinkApi, IlinkError

MAX_QR_REFRESHES = 3
LOGIN_TIMEOUT_SECS = 480.0
POLL_SECS = 1.0


class LoginFailed(Exception):
    """The QR login did not complete (expired too often, blocked, timed out)."""


def render_qr(data: str) -> str:
    """The QR code of `data` as text for a terminal (two characters a module, dark on light)."""
    import segno

    qr = segno.make(data, error="l")
    rows = []
    for row in qr.matrix_iter(scale=1, border=2):
        rows.append("".join("██" if dark else "  " for dark in row))
    return "\n".join(rows)


class QrLogin:
    def __init__(self, base_url: str, cred_path: Path, out: Callable[[str], None] = print,
                 timeout: float = LOGIN_TIMEOUT_SECS, poll_secs: float = POLL_SECS):
        self.base_url = base_url.rstrip("/")
        self.cred_path = cred_path
        self.out = out
        self.timeout = timeout
        self.poll_secs = poll_secs
        self.api = IlinkApi(self.base_url)

    def run(self) -> creds.Credentials:
        try:
            return self._run()
        finally:
            self.api.close()

    def _new_qr(self) -> str:
        saved = creds.load(self.cred_path)
        body = self.api.get_bot_qrcode([saved.token] if saved else [])
        key, url = body.get("qrcode"), body.get("qrcode_img_content")
        if not isinstance(key, str) or not key or not isinstance(url, str) or not url:
            raise LoginFailed("iLink gave no QR code")
        self.out(render_qr(url))
        self.out(f"Scan with WeChat (or open on the phone): {url}")
        return key

    def _run(self) -> creds.Credentials:
        deadline = time.monotonic() + self.timeout
        key, refreshes, base, scanned = self._new_qr(), 0, self.base_url, False
        while time.monotonic() < deadline:
            try:
                body = self.api.qrcode_status(key, base=base)
            except IlinkError as exc:
                if not exc.transient:
                    raise LoginFailed(str(exc)) from None
                time.sleep(self.poll_secs)
                continue
            state = str(body.get("status") or "wait")
            if state == "confirmed":
                return self._save(body, base)
            if state == "scaned" and not scanned:
                scanned = True
                self.out("Scanned: confirm the login on the phone.")
            elif state == "expired":
                refreshes += 1
                if refreshes > MAX_QR_REFRESHES:
                    raise LoginFailed(f"the QR code expired {refreshes} times; run the login again")
                self.out(f"The QR code expired; a new one ({refreshes}/{MAX_QR_REFRESHES}):")
                key, scanned = self._new_qr(), False
            elif state == "scaned_but_redirect":
                base = self._redirect(body, base)
            elif state == "binded_redirect":
                saved = creds.load(self.cred_path)
                if saved is None:
                    raise LoginFailed("this WeChat account is bound to this client, but no saved login was found")
                self.out("Already bound to this client: the saved login stays.")
                return saved
            elif state in ("need_verifycode", "verify_code_blocked"):
                raise LoginFailed(f"iLink asks for a verification code ({state}); log in from the WeChat app first")
            time.sleep(self.poll_secs)
        raise LoginFailed(f"no confirmation within {self.timeout:.0f} s")

    def _redirect(self, body: dict, base: str) -> str:
        host = body.get("redirect_host")
        if not isinstance(host, str) or not host or "/" in host:
            return base
        scheme = urlsplit(self.base_url).scheme or "https"
        return f"{scheme}://{host}"

    def _save(self, body: dict, base: str) -> creds.Credentials:
        token = body.get("bot_token")
        if not isinstance(token, str) or not token:
            raise LoginFailed("iLink confirmed the login but gave no bot token")
        base_url = body.get("baseurl") if isinstance(body.get("baseurl"), str) and body.get("baseurl") else base
        login = creds.Credentials(token=token, base_url=str(base_url).rstrip("/"),
                                  user_id=str(body.get("ilink_user_id") or ""),
                                  bot_id=str(body.get("ilink_bot_id") or ""), saved_at=time.time())
        creds.save(self.cred_path, login)
        self.out(f"Logged in as bot {login.bot_id or '?'}; the login is saved in {self.cred_path} (mode 600).")
        return login
