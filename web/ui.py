"""Serves the web UI: the app shell at `/`, versioned static assets, and the security headers.

The UI is plain ES modules and CSS in web/static (no build step, no Node.js). Asset URLs
carry a version — a hash of every file under web/static — so browsers may cache them for
a year (`immutable`) and an upgrade is picked up by the next load of `/` (never cached).
Relative imports inside the modules resolve under the same versioned prefix.
"""

from __future__ import annotations

import hashlib
import html
from functools import lru_cache
from pathlib import Path

from flask import Blueprint, Response, abort, send_from_directory

STATIC = Path(__file__).parent / "static"
YEAR = 365 * 24 * 3600

# No inline script or style anywhere: the policy forbids both, so injected markup cannot run.
# img-src allows data: (attached images) and https: (images a model links to).
# media-src data: blob: (a recorded voice message before it is sent, and as stored in the input).
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data: https:; "
       "media-src 'self' data: blob:; "
       "connect-src 'self'; font-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
       "frame-ancestors 'none'")
SECURITY_HEADERS = {
    "Content-Security-Policy": CSP,
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    # The pairing URL carries a code: never send it to another site in a Referer. ("no-referrer"
    # would also make the browser send `Origin: null` on our own form posts.)
    "Referrer-Policy": "same-origin",
    "Cross-Origin-Opener-Policy": "same-origin",
}

bp = Blueprint("ui", __name__)


@lru_cache(maxsize=1)
def asset_version() -> str:
    h = hashlib.sha256()
    for path in sorted(STATIC.rglob("*")):
        if path.is_file():
            h.update(path.relative_to(STATIC).as_posix().encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:12]


def asset_prefix() -> str:
    return f"/assets/{asset_version()}"


@lru_cache(maxsize=4)
def _template(name: str) -> str:
    return (STATIC / name).read_text(encoding="utf-8").replace("{{ASSETS}}", asset_prefix())


def _html(body: str, status: int = 200) -> Response:
    resp = Response(body, status=status, mimetype="text/html")
    resp.headers["Cache-Control"] = "no-store"
    return resp


def render_pair_page(status: int = 200, code: str = "", message: str = "", error: bool = False) -> Response:
    """The pairing page; also the 401 page of every unpaired browser request."""
    note = ""
    if message:
        note = f'<p class="pair-note{" pair-error" if error else ""}" role="alert">{html.escape(message)}</p>'
    body = _template("pair.html").replace("{{CODE}}", html.escape(code, quote=True)).replace("{{NOTE}}", note)
    return _html(body, status)


@bp.get("/")
def index() -> Response:
    return _html(_template("index.html"))


@bp.get("/assets/<version>/<path:filename>")
def asset(version: str, filename: str) -> Response:
    if filename.endswith(".html"):
        abort(404)  # templates are rendered, never served raw
    current = version == asset_version()
    resp = send_from_directory(STATIC, filename, max_age=YEAR if current else 0)
    if current:
        resp.headers["Cache-Control"] = f"public, max-age={YEAR}, immutable"
    else:  # a page from before an upgrade: serve today's file, but do not let it stick
        resp.headers["Cache-Control"] = "no-cache"
    return resp


@bp.after_app_request
def security_headers(resp: Response) -> Response:
    for name, value in SECURITY_HEADERS.items():
        resp.headers.setdefault(name, value)
    return resp
