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
from typing import TYPE_CHECKING, Any, Mapping

from picobot.errors import NetworkRefused
from picobot.security.netpolicy import NetworkPolicy, parse_ip

if TYPE_CHECKING:
    import httpx

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


def guarded_client(
    policy: NetworkPolicy,
    *,
    timeout: float,
    headers: Mapping[str, str] | None = None,
    follow_redirects: bool = True,
) -> "httpx.Client":
    """An httpx.Client whose every connection, redirects included, obeys `policy` (picobot/security/guarded_http.py).

    httpx is imported here, on a tool's first request, not when the tools are registered: a web or worker
    process that never fetches anything does not load it (in an environment with `rich` installed, httpx's
    import also loads its command-line client's dependencies)."""
    from picobot.security.guarded_http import guarded_client as make

    return make(policy, timeout=timeout, headers=headers, follow_redirects=follow_redirects)
