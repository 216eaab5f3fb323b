"""Which addresses the agent's tools may reach: the decision alone, with no I/O.

By default a tool may reach public addresses only. Refused: loopback, link-local (cloud
metadata at 169.254.169.254 included), private, carrier-grade NAT, multicast, unspecified,
documentation, benchmarking and reserved ranges, in IPv4 and IPv6, and IPv6 forms that
carry a refused IPv4 address inside (IPv4-mapped, IPv4-compatible, NAT64, 6to4) or can
carry any (Teredo). `tools.network.allow` opens host names (exact, or `*.example.com` for
its subdomains) and addresses or CIDRs.

The guard that uses this (`netguard`) decides on the address a name resolved to, right
before it connects to that same address.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Union

IPAddress = Union[ipaddress.IPv4Address, ipaddress.IPv6Address]
IPNetwork = Union[ipaddress.IPv4Network, ipaddress.IPv6Network]

ALLOW_KEY = "tools.network.allow"
MAX_HOST_CHARS = 253
_LABEL = re.compile(r"^(?!-)[a-z0-9_-]{1,63}(?<!-)$")

_PRIVATE = "a private address (RFC 1918)"
_DOCS = "a documentation address"
_REFUSED_V4: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", 'an unspecified ("this network") address'),
    ("10.0.0.0/8", _PRIVATE),
    ("100.64.0.0/10", "a carrier-grade NAT address (shared address space, RFC 6598)"),
    ("127.0.0.0/8", "a loopback address"),
    ("169.254.0.0/16", "a link-local address (where cloud metadata services answer)"),
    ("172.16.0.0/12", _PRIVATE),
    ("192.0.0.0/24", "an IETF protocol-assignment address"),
    ("192.0.2.0/24", _DOCS),
    ("192.88.99.0/24", "a 6to4 relay anycast address"),
    ("192.168.0.0/16", _PRIVATE),
    ("198.18.0.0/15", "a benchmarking address"),
    ("198.51.100.0/24", _DOCS),
    ("203.0.113.0/24", _DOCS),
    ("224.0.0.0/4", "a multicast address"),
    ("240.0.0.0/4", "a reserved or broadcast address"),
)
_REFUSED_V6: tuple[tuple[str, str], ...] = (
    ("::/128", "an unspecified address"),
    ("::1/128", "a loopback address"),
    ("100::/64", "a discard-only address"),
    ("2001::/32", "a Teredo tunnel address (it can hide any IPv4 address)"),
    ("2001:2::/48", "a benchmarking address"),
    ("2001:db8::/32", _DOCS),
    ("3fff::/20", _DOCS),
    ("64:ff9b:1::/48", "a local-use NAT64 address"),
    ("fc00::/7", "a private address (unique local, fc00::/7)"),
    ("fe80::/10", "a link-local address"),
    ("fec0::/10", "a site-local (private) address"),
    ("ff00::/8", "a multicast address"),
)
_V4_NETS = tuple((ipaddress.IPv4Network(net), why) for net, why in _REFUSED_V4)
_V6_NETS = tuple((ipaddress.IPv6Network(net), why) for net, why in _REFUSED_V6)

# IPv6 prefixes whose low 32 bits are an IPv4 address the packet really goes to.
_EMBEDDING_V6 = (
    (ipaddress.IPv6Network("::ffff:0:0/96"), "an IPv4-mapped IPv6 address"),
    (ipaddress.IPv6Network("::ffff:0:0:0/96"), "an IPv4-translated IPv6 address"),
    (ipaddress.IPv6Network("64:ff9b::/96"), "a NAT64 IPv6 address"),
    (ipaddress.IPv6Network("::/96"), "an IPv4-compatible IPv6 address"),
)


def parse_ip(value: str | IPAddress) -> IPAddress:
    """An IP address from text such as '10.0.0.1', '::1', '[::1]' or 'fe80::1%eth0'; ValueError if not one."""
    if not isinstance(value, str):
        return value
    text = value.strip()
    if text.startswith("[") and text.endswith("]"):
        text = text[1:-1]
    return ipaddress.ip_address(text.split("%", 1)[0])  # the zone names an interface, not a host


def embedded_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, str] | None:
    """The IPv4 address an IPv6 address stands for (mapped, compatible, NAT64, 6to4), with its form."""
    if ip.version == 4:
        return None
    assert isinstance(ip, ipaddress.IPv6Address)
    if ip.sixtofour is not None:
        return ip.sixtofour, "a 6to4 IPv6 address"
    for net, form in _EMBEDDING_V6:
        if ip in net and not (form.startswith("an IPv4-compatible") and int(ip) <= 1):  # :: and ::1 are themselves
            return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), form
    return None


def refused_reason(ip: str | IPAddress) -> str | None:
    """Why this address is closed by default ("a loopback address", ...), or None for a public one."""
    addr = parse_ip(ip)
    inner = embedded_ipv4(addr)
    if inner is not None:
        why = _table_reason(inner[0])
        return f"{inner[1]} of {inner[0]} ({why})" if why else None
    return _table_reason(addr)


def _table_reason(addr: IPAddress) -> str | None:
    table = _V4_NETS if addr.version == 4 else _V6_NETS
    return next((why for net, why in table if addr in net), None)


# --- the allow list -------------------------------------------------------------------


@dataclass(frozen=True)
class AllowEntry:
    """One parsed entry of tools.network.allow: a host, a `*.` suffix, or a network."""

    host: str | None = None
    suffix: str | None = None  # ".example.com" for "*.example.com"
    network: IPNetwork | None = None


def parse_allow_entry(raw: Any) -> AllowEntry:
    """Parse one allow entry; ValueError says what is wrong and what would be right."""
    if not isinstance(raw, str):
        raise ValueError(f"must be text (a host name, *.domain, an IP address or a CIDR), not {type(raw).__name__}")
    text = raw.strip()
    if not text:
        raise ValueError("is empty; give a host name, *.domain, an IP address or a CIDR such as 10.0.0.0/8")
    if "/" in text:
        return AllowEntry(network=_parse_network(text))
    try:
        ip = parse_ip(text)
    except ValueError:
        pass
    else:
        return AllowEntry(network=ipaddress.ip_network(ip))
    if text.startswith("*."):
        return AllowEntry(suffix="." + _parse_host(text[2:], raw))
    return AllowEntry(host=_parse_host(text, raw))


def _parse_network(text: str) -> IPNetwork:
    try:
        return ipaddress.ip_network(text, strict=False)
    except ValueError as exc:
        raise ValueError(
            f"{_shown(text)} is not a valid CIDR ({exc}); write it as 10.0.0.0/8 or fd00::/8"
        ) from None


def normalise_host(host: str) -> str:
    """Lower case, without a trailing dot, non-ASCII labels in their xn-- (IDNA) form."""
    host = host.strip().rstrip(".").lower()
    if host.isascii():
        return host
    return ".".join(label if label.isascii() else label.encode("idna").decode("ascii") for label in host.split("."))


def _parse_host(text: str, raw: str) -> str:
    try:
        host = normalise_host(text)
    except UnicodeError:
        raise ValueError(f"{_shown(raw)} is not a valid host name") from None
    if ":" in host:
        raise ValueError(
            f"{_shown(raw)} has a port or is not a valid address; give the host alone (ports are not filtered)"
        )
    if "*" in host:
        raise ValueError(
            f"{_shown(raw)}: a wildcard may only start an entry, as in *.example.com; to allow every "
            'address add "0.0.0.0/0" and "::/0"'
        )
    if len(host) > MAX_HOST_CHARS or not all(_LABEL.match(label) for label in host.split(".")):
        raise ValueError(f"{_shown(raw)} is not a valid host name, IP address or CIDR")
    return host


def _shown(text: str) -> str:
    # repr() escapes control characters and lone surrogates, so the error stays printable.
    return repr(text if len(text) <= 80 else text[:80] + "...")


# --- the policy -------------------------------------------------------------------


@dataclass(frozen=True)
class NetworkPolicy:
    """The decision for one connection: may a tool reach `ip`, which `host` resolved to?"""

    hosts: frozenset[str] = frozenset()
    suffixes: tuple[str, ...] = ()
    networks: tuple[IPNetwork, ...] = field(default_factory=tuple)

    @classmethod
    def from_allow(cls, allow: Iterable[str]) -> NetworkPolicy:
        """A policy from the entries of tools.network.allow; ValueError names the bad entry."""
        entries = []
        for i, raw in enumerate(allow):
            try:
                entries.append(parse_allow_entry(raw))
            except ValueError as exc:
                raise ValueError(f"{ALLOW_KEY}[{i}] {exc}") from None
        return cls(
            hosts=frozenset(e.host for e in entries if e.host),
            suffixes=tuple(e.suffix for e in entries if e.suffix),
            networks=tuple(e.network for e in entries if e.network is not None),
        )

    @classmethod
    def from_settings(cls, settings: Mapping[str, Any]) -> NetworkPolicy:
        """The policy from a tool context's settings (`cfg.tools.model_dump()`)."""
        network = settings.get("network") if isinstance(settings, Mapping) else None
        allow = network.get("allow") if isinstance(network, Mapping) else None
        return cls.from_allow(allow if isinstance(allow, (list, tuple)) else ())

    def allows_host(self, host: str) -> bool:
        try:
            name = normalise_host(host)
        except UnicodeError:
            return False
        return name in self.hosts or any(name.endswith(suffix) for suffix in self.suffixes)

    def allows_ip(self, ip: str | IPAddress) -> bool:
        addr = parse_ip(ip)
        inner = embedded_ipv4(addr)
        candidates = (addr,) if inner is None else (addr, inner[0])
        return any(a in net for a in candidates for net in self.networks if a.version == net.version)

    def refusal(self, host: str, ip: str | IPAddress, port: int | None = None) -> str | None:
        """None when `host` (resolved to `ip`) may be reached; otherwise why not and how to allow it."""
        addr = parse_ip(ip)
        why = refused_reason(addr)
        if why is None or self.allows_host(host) or self.allows_ip(addr):
            return None
        return refusal_text(host, addr, port, why)


def refusal_text(host: str, addr: IPAddress, port: int | None, why: str) -> str:
    shown = f"[{addr}]" if addr.version == 6 and port is not None else str(addr)
    target = f"{shown}:{port}" if port is not None else shown
    # For an IPv6 form of an IPv4 address, allowing the IPv4 address is what the user means.
    inner = embedded_ipv4(addr)
    allowed = addr if inner is None else inner[0]
    options = [f'"{allowed}/{allowed.max_prefixlen}"']
    named = _is_name(host)
    if named:
        options.insert(0, f'"{_clip(host)}"')
    via = f" ({_clip(host)})" if named else ""
    return (
        f"Refused to connect to {target}{via}: it is {why}, which PicoBot's tools may not reach by "
        f"default. If the user wants this, add {' or '.join(options)} to {ALLOW_KEY} in config.json."
    )


def _is_name(host: str) -> bool:
    if not host:
        return False
    try:
        parse_ip(host)
    except ValueError:
        return True
    return False


def _clip(host: str) -> str:
    # The host comes from a URL the model (or a web page) chose: keep it short and printable.
    text = "".join(c if c.isprintable() and c != '"' else "?" for c in host[:100])
    return text if len(host) <= 100 else text + "..."
