"""The network guard for the browser: every request a page makes is judged before it connects.

Two layers, both on the project's one decision (`picobot.security.netpolicy` through `netguard`):

1. A route on every context (`context.route("**/*")`, `route_web_socket`) sees each request the
   page makes — navigations, subresources, fetch/XHR, WebSockets — resolves its host and aborts a
   refused one before Chromium opens any connection. Its decisions are recorded (`refused`), and
   the page's answer names them.
2. Chromium's only way out is a local HTTP proxy (the bash sandbox's `EgressProxy`, served here
   on 127.0.0.1) that connects through `connect_checked`: the address checked is the address
   connected to. So what a route does not see — each hop of a redirect, a name that resolves
   elsewhere the second time (DNS rebinding) — is refused there.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from dataclasses import dataclass, field
from typing import Any, Callable
from urllib.parse import urlsplit

from picobot.errors import NetworkRefused
from picobot.security.egress import EgressProxy
from picobot.security.netguard import resolve_checked
from picobot.security.netpolicy import NetworkPolicy

log = logging.getLogger("picobot.browser")

# Schemes a page may load without the network (inline data, its own blobs, the blank page).
LOCAL_SCHEMES = frozenset({"data", "blob", "about"})
NETWORK_SCHEMES = {"http": 80, "https": 443, "ws": 80, "wss": 443}
MAX_RECORDED = 200


@dataclass(frozen=True)
class RecordingPolicy(NetworkPolicy):
    """The configured policy; each refusal is also told to `record` (what the proxy refused)."""

    record: Callable[[str], None] = field(default=lambda _why: None, compare=False)

    def refusal(self, host: str, ip: Any, port: int | None = None) -> str | None:
        why = super().refusal(host, ip, port)
        if why is not None:
            self.record(f"{host}:{port}")
        return why


class Guard:
    """The decision for one URL, and the list of what was refused (newest last, bounded)."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self._lock = threading.Lock()
        self.refused: list[str] = []
        self.policy = policy
        # the proxy's: what it refuses (a redirect hop) is recorded as host:port
        self.proxy_policy = RecordingPolicy(policy.hosts, policy.suffixes, policy.networks, record=self.note)

    def note(self, what: str) -> None:
        with self._lock:
            self.refused = (self.refused + [what])[-MAX_RECORDED:]

    def refusal(self, url: str) -> str | None:
        """None when the page may request `url`; otherwise why not (blocking: it may resolve a name)."""
        try:
            parts = urlsplit(url)
            scheme = parts.scheme.lower()
            if scheme in LOCAL_SCHEMES:
                return None
            if scheme not in NETWORK_SCHEMES or not parts.hostname:
                return f"Refused {scheme or 'this'}: URL: a page may load only http(s) and ws(s) addresses."
            port = parts.port or NETWORK_SCHEMES[scheme]
        except ValueError:
            return "Refused a URL that does not parse."
        try:
            resolve_checked(self.policy, parts.hostname, port)
        except NetworkRefused as exc:
            return str(exc)
        except OSError:  # does not resolve: Chromium reports it as a normal network error
            return None
        return None

    async def check(self, url: str, sink: list[tuple[str, str]]) -> str | None:
        """The refusal of `url` or None; a refusal is recorded here and in `sink` (the context's own list)."""
        why = await asyncio.get_running_loop().run_in_executor(None, self.refusal, url)
        if why is not None:
            self.note(url)
            sink.append((url, why))
            del sink[:-MAX_RECORDED]
        return why

    def handlers(self, sink: list[tuple[str, str]]) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        """(route, route_web_socket) handlers for one context, recording its refusals in `sink`."""

        async def route(route: Any) -> None:  # abort a refused request before it connects
            if await self.check(route.request.url, sink):
                await route.abort("blockedbyclient")
            else:
                await route.continue_()

        async def web_socket(ws: Any) -> None:  # a refused WebSocket is closed before it connects
            if await self.check(ws.url, sink):
                await ws.close(code=1008, reason="refused by the network policy")
            else:
                ws.connect_to_server()

        return route, web_socket


class ProxyFront:
    """The egress proxy on a TCP port of 127.0.0.1, for Chromium's `--proxy-server` (see the module docstring)."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self._proxy = EgressProxy(policy, socket_path="", max_connections=256)
        self._sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._sock.bind(("127.0.0.1", 0))
        self._sock.listen(128)
        self.port = self._sock.getsockname()[1]
        self._closed = False
        threading.Thread(target=self._accept, name="browser-proxy", daemon=True).start()

    @property
    def server(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _accept(self) -> None:
        while not self._closed:
            try:
                conn, _ = self._sock.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(conn,), name="browser-proxy-conn", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            self._proxy.serve(conn)
        except Exception:  # one connection's failure is that page's network error
            log.debug("browser proxy connection failed", exc_info=True)
        finally:
            conn.close()

    def close(self) -> None:
        self._closed = True
        try:
            self._sock.close()
        finally:
            self._proxy.stop()
