"""Cut an HTTP request the moment its turn is cancelled.

Closing an httpx client from another thread does not wake a thread blocked reading its
socket, so a stalled server could hold a stopped turn's tool for the whole read timeout.
Shutting the socket down does wake it. The sockets are learnt from httpcore's `trace`
extension as each connection is made (redirects to other hosts included), and are shut
down from a CancelToken callback.
"""

from __future__ import annotations

import socket
import threading
from types import TracebackType
from typing import Any, Callable

from picobot.domain.cancel import CancelToken
from picobot.errors import TurnCancelled

# httpcore trace events whose return value is a freshly connected (or TLS-wrapped) stream.
_CONNECTED = ("connect_tcp.complete", "start_tls.complete")


class CancelCut:
    """`with CancelCut(ctx.cancel) as cut: client.stream(..., extensions=cut.extensions)`.

    Inside the block a cancel shuts down every socket the request opened; leaving the block
    with an error after a cancel raises TurnCancelled, so the stop is reported as a stop
    and not as a network failure.
    """

    def __init__(self, cancel: CancelToken) -> None:
        self._cancel = cancel
        self._lock = threading.Lock()
        self._removers: list[Callable[[], None]] = []
        self.extensions: dict[str, Any] = {"trace": self._trace}

    def __enter__(self) -> CancelCut:
        self._cancel.raise_if_cancelled()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        with self._lock:
            removers, self._removers = self._removers, []
        for remove in removers:
            remove()
        if exc is not None and not isinstance(exc, TurnCancelled) and self._cancel.cancelled:
            raise TurnCancelled(self._cancel.reason or "stopped") from None

    def _trace(self, event: str, info: dict[str, Any]) -> None:
        if not event.endswith(_CONNECTED):
            return
        stream = info.get("return_value")
        sock = stream.get_extra_info("socket") if stream is not None else None
        if isinstance(sock, socket.socket):
            remove = self._cancel.on_cancel(lambda: _shut_down(sock))  # at once if already cancelled
            with self._lock:
                self._removers.append(remove)


def _shut_down(sock: socket.socket) -> None:
    # socket.socket.shutdown, not SSLSocket's override: that one drops the TLS state under
    # the reading thread's feet; this only ends the TCP stream, which wakes the reader.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # already closed
        pass
