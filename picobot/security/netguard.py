"""The network guard: tools connect only where the network policy allows.

The check runs at connect time, inside httpcore's network backend: the host is resolved
once, every address it resolved to is checked, and the socket connects to a checked
address itself. There is no second lookup, so a name cannot resolve to a public address
for the check and to 127.0.0.1 for the connection (DNS rebinding), and every hop of a
redirect chain passes through the same check because every hop connects here.

    client = guarded_client(NetworkPolicy.from_settings(ctx.settings), timeout=30)

The egress proxy uses `connect_checked` for the same decision on the bash tool's traffic.
"""

from __future__ import annotations

import socket
from typing import Any, Iterable, Mapping

import httpcore
import httpx

from picobot.errors import NetworkRefused
from picobot.security.netpolicy import NetworkPolicy, parse_ip

__all__ = ["NetworkPolicy", "NetworkRefused", "connect_checked", "guarded_client", "resolve_checked"]

AddrInfo = tuple[Any, ...]  # (family, type, proto, canonname, sockaddr), as getaddrinfo returns


def resolve_checked(policy: NetworkPolicy, host: str, port: int) -> list[AddrInfo]:
    """Every address `host` resolves to, each allowed by the policy; NetworkRefused if any is not.

    A name that resolves to one public and one private address is refused as a whole:
    which one a client would use is not ours to predict.
    """
    host = host.strip("[]")
    infos = _resolve(host, port)
    for info in infos:
        why = policy.refusal(host, info[4][0], port)
        if why is not None:
            raise NetworkRefused(why)
    return infos


def connect_checked(policy: NetworkPolicy, host: str, port: int, timeout: float | None) -> socket.socket:
    """A TCP socket connected to a checked address of host:port (see resolve_checked)."""
    infos = resolve_checked(policy, host, port)
    error: OSError | None = None
    for family, kind, proto, _, sockaddr in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.settimeout(timeout)
            sock.connect(sockaddr)  # the checked address itself: no second lookup
            return sock
        except OSError as exc:
            sock.close()
            error = exc
    raise error or OSError(f"no address to connect to for {host}")


def _resolve(host: str, port: int) -> list[AddrInfo]:
    # A literal address must never go to DNS; AI_NUMERICHOST makes sure it does not.
    flags = socket.AI_NUMERICHOST if _is_literal(host) else 0
    infos = socket.getaddrinfo(host, port, 0, socket.SOCK_STREAM, socket.IPPROTO_TCP, flags)
    if not infos:
        raise OSError(f"{host} did not resolve to any address")
    return infos


def _is_literal(host: str) -> bool:
    try:
        parse_ip(host)
    except ValueError:
        return False
    return True


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
