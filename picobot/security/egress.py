"""A small HTTP forward proxy on a Unix socket that lets sandboxed commands out as the network policy allows.

The bash sandbox has no network of its own; a forwarder inside it relays 127.0.0.1:<port>
to this socket, and HTTP(S)_PROXY point there. The proxy understands two requests:

    CONNECT host:port HTTP/1.1          a tunnel (https and anything else over TCP)
    GET http://host[:port]/path HTTP/1.1  plain http, forwarded with Connection: close

and connects through `netguard.connect_checked`, the same resolve-check-connect the
URL-fetching tools use. A refused address gets `403` with the refusal text (why, and how
to allow it); a request it cannot parse gets `400`; the proxy keeps serving either way.
"""

from __future__ import annotations

import logging
import os
import re
import selectors
import socket
import socketserver
import stat
import threading
from pathlib import Path
from urllib.parse import urlsplit

from picobot.errors import NetworkRefused
from picobot.security.netguard import connect_checked
from picobot.security.netpolicy import NetworkPolicy

log = logging.getLogger("picobot.egress")

MAX_HEAD_BYTES = 64 * 1024
HEAD_TIMEOUT_SECS = 30.0
CONNECT_TIMEOUT_SECS = 30.0
_CHUNK = 64 * 1024
_METHOD = re.compile(r"^[A-Z]{1,20}$")
_HOST = re.compile(r"^(?:[A-Za-z0-9_.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\])$")
_HOP_HEADERS = {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}
_REASONS = {400: "Bad Request", 403: "Forbidden", 431: "Request Header Fields Too Large",
            502: "Bad Gateway", 503: "Service Unavailable"}


class _Reject(Exception):
    """A request answered with an error status instead of being forwarded."""

    def __init__(self, status: int, text: str) -> None:
        super().__init__(text)
        self.status = status
        self.text = text


class EgressProxy:
    """`EgressProxy(policy, socket_path).start()`; `stop()` closes the socket and every tunnel."""

    def __init__(self, policy: NetworkPolicy, socket_path: str | os.PathLike[str], *,
                 idle_timeout: float = 300.0, max_connections: int = 64) -> None:
        self.policy = policy
        self.socket_path = str(socket_path)
        self.idle_timeout = idle_timeout
        self._slots = threading.BoundedSemaphore(max_connections)
        self._live: set[socket.socket] = set()
        self._lock = threading.Lock()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> EgressProxy:
        _remove_stale_socket(self.socket_path)
        self._server = _Server(self.socket_path, self)
        os.chmod(self.socket_path, 0o600)  # only this user's processes (and its sandboxes) may use it
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="egress-proxy", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        with self._lock:
            live, self._live = set(self._live), set()
        for sock in live:
            _shut(sock)
        _remove_stale_socket(self.socket_path)

    def __enter__(self) -> EgressProxy:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # --- one client connection ---------------------------------------------------------

    def serve(self, client: socket.socket) -> None:
        if not self._slots.acquire(blocking=False):
            _answer(client, 503, "Too many connections through the proxy at once; try again shortly.")
            return
        try:
            self._track(client)
            self._serve(client)
        finally:
            self._slots.release()
            self._untrack(client)

    def _serve(self, client: socket.socket) -> None:
        client.settimeout(HEAD_TIMEOUT_SECS)
        try:
            head, rest = _read_head(client)
            method, target, version, headers = _parse_head(head)
            if method == "CONNECT":
                upstream = self._open(*_authority(target))
                greeting, first = f"{version} 200 Connection Established\r\n\r\n".encode("ascii"), rest
            else:
                host, port, path = _absolute_http(target)
                upstream = self._open(host, port)
                greeting, first = b"", _forward_head(method, path, version, headers) + rest
        except _Reject as exc:
            _answer(client, exc.status, exc.text)
            return
        except OSError:  # the client went away or stalled before a whole request arrived
            return
        self._tunnel(client, upstream, greeting, first)

    def _open(self, host: str, port: int) -> socket.socket:
        try:
            return connect_checked(self.policy, host, port, CONNECT_TIMEOUT_SECS)
        except NetworkRefused as exc:
            log.info("egress refused: %s:%s", host, port)
            raise _Reject(403, str(exc)) from None
        except socket.gaierror as exc:
            raise _Reject(502, f"Could not resolve {host}: {exc.strerror or exc}.") from None
        except OSError as exc:
            raise _Reject(502, f"Could not connect to {host}:{port}: {exc.strerror or exc}.") from None

    def _tunnel(self, client: socket.socket, upstream: socket.socket, greeting: bytes, first: bytes) -> None:
        """Relay between client and upstream after sending each its opening bytes; closes upstream."""
        self._track(upstream)
        try:
            client.sendall(greeting)
            upstream.sendall(first)
            _relay(client, upstream, self.idle_timeout)
        except OSError:
            pass  # either side reset: the tunnel is over
        finally:
            self._untrack(upstream)
            upstream.close()

    def _track(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.add(sock)

    def _untrack(self, sock: socket.socket) -> None:
        with self._lock:
            self._live.discard(sock)


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, path: str, proxy: EgressProxy) -> None:
        self.proxy = proxy
        super().__init__(path, _Handler)


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        self.server.proxy.serve(self.request)


# --- parsing ----------------------------------------------------------------------------


def _read_head(sock: socket.socket) -> tuple[bytes, bytes]:
    """The request head (up to the blank line) and whatever body bytes came with it."""
    data = b""
    while b"\r\n\r\n" not in data:
        if len(data) > MAX_HEAD_BYTES:
            raise _Reject(431, f"The request head is over {MAX_HEAD_BYTES} bytes.")
        chunk = sock.recv(_CHUNK)
        if not chunk:
            raise _Reject(400, "The connection closed before a whole request head arrived.")
        data += chunk
    head, _, rest = data.partition(b"\r\n\r\n")
    if len(head) > MAX_HEAD_BYTES:
        raise _Reject(431, f"The request head is over {MAX_HEAD_BYTES} bytes.")
    return head, rest


def _parse_head(head: bytes) -> tuple[str, str, str, list[tuple[str, str]]]:
    try:
        text = head.decode("ascii")
    except UnicodeDecodeError:
        raise _Reject(400, "The request head is not ASCII.") from None
    line, *lines = text.split("\r\n")
    parts = line.split(" ")
    if len(parts) != 3 or not _METHOD.match(parts[0]) or parts[2] not in ("HTTP/1.0", "HTTP/1.1"):
        raise _Reject(400, "Not an HTTP/1.x request line; send 'CONNECT host:port HTTP/1.1' "
                           "or 'GET http://host/path HTTP/1.1'.")
    if any(not c.isprintable() for c in parts[1]):
        raise _Reject(400, "The request target holds control characters.")
    headers = []
    for raw in lines:
        name, colon, value = raw.partition(":")
        if not colon or not name or name != name.strip() or any(not c.isprintable() for c in raw):
            raise _Reject(400, "A request header line is malformed.")
        headers.append((name, value.strip()))
    return parts[0], parts[1], parts[2], headers


def _authority(target: str) -> tuple[str, int]:
    """(host, port) of a CONNECT target 'host:port' or '[v6]:port'."""
    host, colon, port = target.rpartition(":")
    if not colon or not _HOST.match(host) or not port.isdigit() or not 0 < int(port) < 65536:
        raise _Reject(400, f"CONNECT needs host:port, got {target[:100]!r}.")
    return host.strip("[]"), int(port)


def _absolute_http(target: str) -> tuple[str, int, str]:
    """(host, port, origin-form path) of an absolute http:// request target."""
    if target.lower().startswith("https://"):
        raise _Reject(400, "For https, send CONNECT host:443 and speak TLS through the tunnel.")
    if not target.lower().startswith("http://"):
        raise _Reject(400, "A proxy request needs an absolute http:// URL (or CONNECT for https).")
    try:
        parts = urlsplit(target)
        port = parts.port or 80
    except ValueError:
        raise _Reject(400, f"The URL {target[:100]!r} has a bad host or port.") from None
    host = parts.hostname or ""
    if not _HOST.match(host if ":" not in host else f"[{host}]"):
        raise _Reject(400, f"The URL {target[:100]!r} has no valid host.")
    path = parts.path or "/"
    return host, port, path + (f"?{parts.query}" if parts.query else "")


def _forward_head(method: str, path: str, version: str, headers: list[tuple[str, str]]) -> bytes:
    # One request per upstream connection: with Connection: close the server ends the
    # response by closing, so the tunnel needs no HTTP framing of its own.
    kept = [f"{name}: {value}" for name, value in headers if name.lower() not in _HOP_HEADERS]
    lines = [f"{method} {path} {version}", *kept, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("ascii")


# --- moving bytes -------------------------------------------------------------------------


def _relay(a: socket.socket, b: socket.socket, idle_timeout: float) -> None:
    """Copy both ways until both sides have finished sending, or nothing moves for idle_timeout."""
    peers = {a: b, b: a}
    for sock in peers:
        sock.settimeout(idle_timeout)
    with selectors.DefaultSelector() as sel:
        for sock in peers:
            sel.register(sock, selectors.EVENT_READ)
        reading = set(peers)
        while reading:
            ready = sel.select(idle_timeout)
            if not ready:
                return
            for key, _ in ready:
                src = key.fileobj
                assert isinstance(src, socket.socket)
                data = src.recv(_CHUNK)
                if data:
                    peers[src].sendall(data)
                    continue
                sel.unregister(src)
                reading.discard(src)
                _shut(peers[src], socket.SHUT_WR)  # pass the end of this direction along


def _answer(client: socket.socket, status: int, text: str) -> None:
    body = (text + "\n").encode("utf-8", "replace")
    head = (f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}\r\n"
            "Content-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n")
    try:
        client.sendall(head.encode("ascii") + body)
    except OSError:
        pass  # the client is gone; nothing to tell


def _shut(sock: socket.socket, how: int = socket.SHUT_RDWR) -> None:
    try:
        sock.shutdown(how)
    except OSError:
        pass


def _remove_stale_socket(path: str) -> None:
    # Only a socket is removed: a mistyped path must never delete someone's file.
    try:
        if stat.S_ISSOCK(os.lstat(path).st_mode):
            os.unlink(path)
    except FileNotFoundError:
        pass
    Path(path).parent.mkdir(parents=True, exist_ok=True)
