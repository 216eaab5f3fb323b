"""One HTTP client for the tests' own requests.

`httpx.get(...)` and friends build a new client per call, and with it an SSL context that loads the CA
bundle: ~20 ms of CPU each, which the polls of `wait_for` (every 0.1 s) multiplied into minutes of the
suite's CPU. This client is built once. It keeps no connection alive, so every request still opens its
own connection, as `httpx.get` does: a web restarted on the same port or a server that closes after an
error is met exactly as before. Nor does it keep cookies.
"""

from __future__ import annotations

from http.cookiejar import CookieJar, DefaultCookiePolicy

import httpx


class _StoresNothing(DefaultCookiePolicy):
    """No cookie a response sets is kept: one test's session cookie must not sign in the next test's requests.
    A request that needs a cookie sends it in its own `Cookie` header."""

    def set_ok(self, cookie, request) -> bool:  # type: ignore[no-untyped-def]
        return False


HTTP = httpx.Client(limits=httpx.Limits(max_keepalive_connections=0), timeout=5.0,
                    cookies=CookieJar(policy=_StoresNothing()))
