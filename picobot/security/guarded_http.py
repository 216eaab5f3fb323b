"""The network guard's HTTP client: httpx on a connection pool whose sockets pass the guard.

Split from picobot/security/netguard.py (the decision, with no HTTP library) so that only a process that makes
a tool request imports httpx.
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

import httpcore
import httpx

from picobot.errors import NetworkRefused
from picobot.security.netguard import resolve_checked
from picobot.security.netpolicy import NetworkPolicy


class GuardedBackend(httpcore.SyncBackend):
    """httpcore's socket backend with the policy checked on the resolved address of every connection."""

    def __init__(self, policy: NetworkPolicy) -> None:
        self.policy = policy

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:
            infos = resolve_checked(self.policy, host, port)
        except OSError as exc:  # the name did not resolve (gaierror)
            raise httpcore.ConnectError(str(exc)) from exc
        failure: httpcore.ConnectError | httpcore.ConnectTimeout | None = None
        for info in infos:
            try:  # a literal address: the stock backend connects to it without another lookup
                return super().connect_tcp(info[4][0], port, timeout, local_address, socket_options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
        assert failure is not None  # resolve_checked never returns an empty list
        raise failure

    def connect_unix_socket(self, path: str, timeout: float | None = None,
                            socket_options: Iterable[Any] | None = None) -> httpcore.NetworkStream:
        raise NetworkRefused("Refused to connect to a Unix socket: PicoBot's tools reach only TCP addresses.")


class GuardedTransport(httpx.HTTPTransport):
    """httpx's own transport, on a connection pool whose sockets come from GuardedBackend."""

    def __init__(self, policy: NetworkPolicy) -> None:
        super().__init__()
        limits = httpx.Limits()
        # httpx has no public way to hand its pool a network backend, so the pool it built
        # is replaced by an identical one that has ours. SSL_CERT_FILE/DIR still apply
        # (httpx.create_ssl_context reads them); proxies from the environment do not.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=GuardedBackend(policy),
        )


def guarded_client(
    policy: NetworkPolicy,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    follow_redirects: bool = True,
) -> httpx.Client:
    """An httpx.Client whose every connection, redirects included, obeys `policy`.

    trust_env=False: an HTTP(S)_PROXY in the environment would make the proxy, not this
    guard, choose where to connect.
    """
    return httpx.Client(
        transport=GuardedTransport(policy),
        timeout=timeout,
        headers=headers,
        follow_redirects=follow_redirects,
        trust_env=False,
    )
