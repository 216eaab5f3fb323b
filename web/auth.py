"""Device pairing at the web edge: who may use `/`, `/ws` and `/api/*`, and how a browser pairs.

One `before_request` guard covers every route, so a page or endpoint added later is
protected without remembering to be. Open without a token: `/health` (monitoring), the
pairing page and exchange, and the stylesheet/icon the pairing page needs.

Credentials: browsers carry the token in an HttpOnly, SameSite=Strict cookie (script in
the page can never read it); the terminal client and scripts send `Authorization: Bearer`.
Cross-site requests: a write (any method but GET/HEAD/OPTIONS) or a /ws handshake whose
Origin / Sec-Fetch-Site says it came from another site is refused with 403, paired or not;
a cookie-authenticated write must also carry one of those headers (every current browser
sends them), so a cookie alone never authorises a write.
"""

from __future__ import annotations

import ipaddress
import re
import time
from typing import Any
from urllib.parse import urlsplit

from flask import Blueprint, Flask, Response, current_app, g, jsonify, redirect, request
from werkzeug.wrappers import Response as BaseResponse

from picobot.auth.pairing import ALPHABET, CODE_LEN, Device, FailureLimiter, Pairing, display_code, normalize_code
from picobot.app import App as Runtime
from web.ui import render_pair_page

COOKIE = "picobot_token"
COOKIE_MAX_AGE = 400 * 24 * 3600  # the longest lifetime Chromium accepts for a cookie
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")
OPEN_PATHS = {"/health", "/pair", "/api/pair"}
LOCAL_OPEN_PATHS = {"/metrics"}  # open to a client on this machine, else a paired token like /api
FORWARDING_HEADERS = ("X-Forwarded-For", "Forwarded", "X-Real-IP")
OPEN_ASSET = re.compile(r"^/assets/[0-9a-f]+/(css|img)/[\w.-]+$")  # what the pairing page loads
HOW_TO_PAIR = ("This device is not paired with PicoBot. On the server run `picobot pair` and open the URL "
               "it prints (or enter its code at /pair); terminal clients pass --token or PICOBOT_TOKEN.")

bp = Blueprint("auth", __name__)


def init_app(app: Flask) -> None:
    rt: Runtime = app.extensions["picobot"]
    app.extensions["picobot.pairing"] = Pairing(rt.db)
    app.extensions["picobot.limiter"] = FailureLimiter(rt.redis)
    app.before_request(guard)
    app.register_blueprint(bp)


def pairing() -> Pairing:
    return current_app.extensions["picobot.pairing"]


def _runtime() -> Runtime:
    return current_app.extensions["picobot"]


# --- the guard ---------------------------------------------------------------------------


def request_token() -> tuple[str | None, str | None]:
    """(token, how it came): a Bearer header wins over the cookie."""
    header = request.headers.get("Authorization", "")
    if header[:7].lower() == "bearer ":
        return header[7:].strip(), "bearer"
    cookie = request.cookies.get(COOKIE)
    return (cookie, "cookie") if cookie else (None, None)


def _allowed_origins() -> set[str]:
    hosts = {request.host.lower()}
    public = _runtime().config.gateway.public_url
    if public:
        hosts.add(urlsplit(public).netloc.lower())
    return hosts


def cross_site() -> bool:
    """True when the browser tells us another site made this request."""
    fetch_site = request.headers.get("Sec-Fetch-Site")
    if fetch_site is not None:  # set by the browser itself, page script cannot forge it: decisive
        return fetch_site not in ("same-origin", "none")
    origin = request.headers.get("Origin")
    if origin is None:
        return False
    return origin == "null" or urlsplit(origin).netloc.lower() not in _allowed_origins()


def is_webhook_path(path: str) -> bool:
    """True for a path left to its own checks (a plugin's route, such as a platform webhook; a signed /hooks
    path; /v1), and anything under it."""
    hooks = current_app.extensions.get("picobot.webhook_paths", ())
    return any(path == p or path.startswith(p.rstrip("/") + "/") for p in hooks)


def _is_api(path: str) -> bool:
    return (path == "/ws" or path.startswith(("/api/", "/hooks/")) or path == "/api"
            or path in LOCAL_OPEN_PATHS)


def guard() -> Any:
    path = request.path
    if is_webhook_path(path):
        return None  # a platform webhook proves itself with its own token and signature (web/plugin_routes.py)
    write = request.method not in SAFE_METHODS
    if (write or path == "/ws") and cross_site():
        return _refuse(403, "cross_site", "Cross-site requests are refused; use PicoBot from its own address.")
    if path in OPEN_PATHS or OPEN_ASSET.match(path):
        return None
    if path in LOCAL_OPEN_PATHS and request.method in SAFE_METHODS and local_client(
            request.remote_addr, _forwarded(), _runtime().config.gateway.trusted_proxies):
        return None  # a scraper on this machine (see local_client)
    if not _runtime().config.gateway.pairing_required:
        g.device = None
        return None
    token, via = request_token()
    device = pairing().verify(token) if token else None
    if device is None:
        return unauthorized(had_cookie=via == "cookie")
    if write and via == "cookie" and not (request.headers.get("Origin") or request.headers.get("Sec-Fetch-Site")):
        return _refuse(403, "origin_required", "A write with the browser cookie must come from the PicoBot page.")
    g.device = device
    g.auth_via = via
    return None


def local_client(remote_addr: str | None, forwarded: bool, trusted_proxies: int) -> bool:
    """Whether a request comes from this machine itself (a loopback address), for /metrics.

    With `trusted_proxies: 0` a request that carries forwarding headers is never local: a reverse
    proxy on this machine would make every outside client look like 127.0.0.1. With proxies trusted,
    `remote_addr` is already the client the proxies report (ProxyFix), so loopback there is local.
    """
    if forwarded and trusted_proxies <= 0:
        return False
    try:
        ip = ipaddress.ip_address((remote_addr or "").strip())
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def _forwarded() -> bool:
    return any(h in request.headers for h in FORWARDING_HEADERS)


def _refuse(status: int, code: str, text: str) -> Response:
    resp = jsonify({"error": code, "message": text})
    resp.status_code = status
    return resp


def unauthorized(had_cookie: bool = False) -> Response:
    if _is_api(request.path):
        resp = _refuse(401, "not_paired", HOW_TO_PAIR)
        resp.headers["WWW-Authenticate"] = 'Bearer realm="picobot"'
    else:
        resp = render_pair_page(status=401, message="This browser is not paired with PicoBot yet.")
    if had_cookie:  # revoked or from another database: drop it so the page stops sending it
        resp.delete_cookie(COOKIE, path="/", samesite="Strict")
    return resp


def current_device() -> Device | None:
    return g.get("device")


def client_address() -> str:
    """Whom per-address limits count: the client's IPv4 address, or its IPv6 /64 (one host
    usually holds a whole /64, so counting single IPv6 addresses would let it rotate freely).

    `remote_addr` is the peer of the socket, or with `gateway.trusted_proxies` the address the
    proxies report (web/app.py); a client cannot choose it by sending X-Forwarded-For itself.
    """
    raw = request.remote_addr or "unknown"
    try:
        ip = ipaddress.ip_address(raw)
    except ValueError:
        return raw[:64]
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:1.2.3.4 is the IPv4 client 1.2.3.4
    if mapped is not None:
        return str(mapped)
    return str(ipaddress.ip_network(f"{ip}/64", strict=False)) if ip.version == 6 else str(ip)


def client_key() -> str:
    """Whom per-device limits count: the paired device, or the client address when pairing is off."""
    device = current_device()
    return f"dev:{device.id}" if device is not None else f"addr:{client_address()}"


# --- pairing: the form (no script needed) and the JSON API -----------------------------------


def device_name(user_agent: str) -> str:
    """A readable default name such as "Chrome on Linux" for the devices list."""
    browser = next((name for key, name in (("Edg/", "Edge"), ("Firefox/", "Firefox"), ("Chrome/", "Chrome"),
                                           ("Safari/", "Safari")) if key in user_agent), "Browser")
    system = next((name for key, name in (("iPhone", "iPhone"), ("iPad", "iPad"), ("Android", "Android"),
                                          ("Windows", "Windows"), ("Mac OS X", "macOS"), ("Linux", "Linux"))
                   if key in user_agent), "")
    return f"{browser} on {system}" if system else browser


def _clean_code(text: str) -> str:
    code = normalize_code(text or "")
    return code if len(code) <= CODE_LEN and all(ch in ALPHABET for ch in code) else ""


def _redeem(code: str, name: str, kind: str = "browser") -> tuple[int, str, Any]:
    """(status, error code, issued token or None), with failures counted per client address."""
    limiter: FailureLimiter = current_app.extensions["picobot.limiter"]
    client = client_address()
    try:
        wait = limiter.retry_after(client)
    except Exception:  # no Redis, no limit: refuse rather than allow unlimited guessing
        return 503, "unavailable", None
    if wait is not None:
        g.retry_after = wait
        return 429, "rate_limited", None
    issued = pairing().redeem(code, name, kind)
    if issued is None:
        try:
            limiter.failed(client)
        except Exception:
            pass
        return 401, "bad_code", None
    try:
        limiter.clear(client)
    except Exception:
        pass
    return 200, "", issued


def set_token_cookie(resp: BaseResponse, token: str) -> None:
    secure = request.is_secure or request.headers.get("X-Forwarded-Proto", "") == "https"
    resp.set_cookie(COOKIE, token, max_age=COOKIE_MAX_AGE, path="/", httponly=True, samesite="Strict",
                    secure=secure)


MESSAGES = {
    "bad_code": "That code is wrong, expired or already used. Run `picobot pair` on the server for a new one.",
    "rate_limited": "Too many failed attempts from this address. Wait a few minutes and try again.",
    "unavailable": "PicoBot cannot check pairing codes right now (Redis is unavailable). Try again shortly.",
}


@bp.get("/pair")
def pair_page() -> BaseResponse:
    token, _ = request_token()
    if token and pairing().verify(token):
        return redirect("/", code=303)
    return render_pair_page(status=200, code=display_code(_clean_code(request.args.get("code", ""))))


@bp.post("/pair")
def pair_form() -> BaseResponse:
    code = request.form.get("code", "")
    name = (request.form.get("name") or "").strip()[:128] or device_name(request.headers.get("User-Agent", ""))
    status, error, issued = _redeem(code, name)
    if issued is None:
        page = render_pair_page(status=status, code=_clean_code(code), message=MESSAGES[error], error=True)
        if status == 429:
            page.headers["Retry-After"] = str(g.retry_after)
        return page
    resp = redirect("/", code=303)
    set_token_cookie(resp, issued.token)
    return resp


@bp.post("/api/pair")
def pair_api() -> Response:
    body = request.get_json(silent=True)
    if not isinstance(body, dict) or not isinstance(body.get("code"), str):
        return _refuse(400, "bad_request", 'Send JSON {"code": "...", "name": "...", "cookie": true}.')
    name = str(body.get("name") or "").strip()[:128] or device_name(request.headers.get("User-Agent", ""))
    use_cookie = body.get("cookie", True) is not False
    status, error, issued = _redeem(body["code"], name, "browser" if use_cookie else "api")
    if issued is None:
        resp = _refuse(status, error, MESSAGES[error])
        if status == 429:
            resp.headers["Retry-After"] = str(g.retry_after)
        return resp
    payload: dict[str, Any] = {"device": issued.device.to_dict(), "paired_at": time.time()}
    if not use_cookie:
        payload["token"] = issued.token  # for scripts and remote terminals; shown this once
    resp = jsonify(payload)
    if use_cookie:
        set_token_cookie(resp, issued.token)
    return resp
