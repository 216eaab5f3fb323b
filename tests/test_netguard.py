"""The network guard, the egress proxy and the policy behind both.

Every packet these tests send goes to 127.0.0.0/8 or ::1. Addresses outside loopback
(cloud metadata, private ranges) are proven refused by the policy's decision; where a
test drives the real guard at such an address, a tripwire (a Python audit hook) makes any
attempt to resolve a name or connect outside loopback fail before a packet leaves, so a
broken guard fails the test instead of reaching the network.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from picobot.agent.loop import AgentLoop, LoopSettings
from picobot.agent.snapshot import TurnController
from picobot.config import Config, load_config
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ChatMessage
from picobot.errors import ConfigError, NetworkRefused, ToolError
from picobot.providers.openai_provider import OpenAIProvider
from picobot.security.egress import EgressProxy
from picobot.security.netguard import guarded_client
from picobot.security.netpolicy import NetworkPolicy, parse_allow_entry, refused_reason
from picobot.tools import build_registry
from picobot.tools.base import ToolContext
from picobot.tools.http import HttpRequestTool
from picobot.tools.web_fetch import WebFetchTool
from picobot.cli.embedded_redis import free_port
from tests.conftest import add_rule
from tests.stack import Stack, base_config

# --- the tripwire ------------------------------------------------------------------------

# Names the resolver answers from /etc/hosts or parses as numbers (inet_aton), without DNS.
_LOOPBACK_NAMES = {"localhost", "2130706433", "0x7f.1", "127.1", "017700000001"}
_tripwire = {"armed": False, "lookups": [], "connects": []}


def _is_loopback(host: object) -> bool:
    try:
        return ipaddress.ip_address(str(host).split("%", 1)[0]).is_loopback
    except ValueError:
        return False


def _is_literal(host: str) -> bool:
    try:
        ipaddress.ip_address(host.split("%", 1)[0])
    except ValueError:
        return False
    return True


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if not _tripwire["armed"]:
        return
    if event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else str(args[0])
        _tripwire["lookups"].append(host)
        if host not in _LOOPBACK_NAMES and not _is_literal(host):  # a literal needs no DNS packet
            raise RuntimeError(f"tripwire: a test tried to resolve {host!r}")
    elif event == "socket.connect":
        sock, address = args
        if sock.family in (socket.AF_INET, socket.AF_INET6):
            _tripwire["connects"].append(address[0])
            if not _is_loopback(address[0]):
                raise RuntimeError(f"tripwire: a test tried to connect to {address!r}")


sys.addaudithook(_audit)  # hooks cannot be removed; it acts only while armed


@pytest.fixture(autouse=True)
def loopback_only() -> Iterator[dict[str, Any]]:
    _tripwire.update(armed=True, lookups=[], connects=[])
    try:
        yield _tripwire
    finally:
        _tripwire["armed"] = False


def test_the_tripwire_itself_stops_a_connection_outside_loopback() -> None:
    with socket.socket() as sock, pytest.raises(RuntimeError, match="tripwire"):
        sock.connect(("169.254.169.254", 80))


# --- test servers ----------------------------------------------------------------------------


class _Handler(BaseHTTPRequestHandler):
    redirect_to = ""
    seen: list[str] = []  # each server gets its own list (see _serve)

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        self.seen.append(self.path)
        if self.path.startswith("/hop") and self.redirect_to:
            self.send_response(302)
            self.send_header("Location", self.redirect_to)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        body = json.dumps({"ok": True, "path": self.path}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


def _serve(host: str, redirect_to: str = "") -> tuple[ThreadingHTTPServer, str]:
    handler = type("Handler", (_Handler,), {"redirect_to": redirect_to, "seen": []})
    httpd = ThreadingHTTPServer((host, 0), handler)
    httpd.daemon_threads = True
    threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return httpd, f"http://{host}:{httpd.server_address[1]}"


@pytest.fixture(scope="module")
def target() -> Iterator[str]:
    """A plain server on 127.0.0.1 (stands for the gateway, Redis' neighbours, anything local)."""
    httpd, url = _serve("127.0.0.1")
    yield url
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="module")
def redirector(target: str) -> Iterator[str]:
    """A server on 127.0.0.2 whose /hop redirects to the 127.0.0.1 target."""
    httpd, url = _serve("127.0.0.2", redirect_to=f"{target}/health")
    yield url
    httpd.shutdown()
    httpd.server_close()


def _ctx(tmp_path: Path, allow: list[str] | None = None) -> ToolContext:
    # Settings shaped exactly as the worker builds them: cfg.tools.model_dump().
    tools = Config.model_validate({"tools": {"network": {"allow": allow or []}}}).tools
    return ToolContext(session_id="s", channel="cli_chat", chat_id="c", sender_id="u", turn_id="t",
                       workspace=tmp_path, cancel=CancelToken(), settings=tools.model_dump())


# --- the decision --------------------------------------------------------------------------

REFUSED = [
    ("127.0.0.1", "loopback"), ("127.255.0.9", "loopback"), ("0.0.0.0", "unspecified"),
    ("0.1.2.3", "unspecified"), ("10.1.2.3", "private"), ("172.16.0.1", "private"),
    ("172.31.255.254", "private"), ("192.168.1.1", "private"), ("100.64.0.1", "carrier-grade NAT"),
    ("100.127.255.254", "carrier-grade NAT"), ("169.254.169.254", "link-local"),
    ("169.254.0.1", "link-local"), ("224.0.0.1", "multicast"), ("239.255.255.250", "multicast"),
    ("255.255.255.255", "broadcast"), ("240.0.0.1", "reserved"), ("192.0.0.8", "IETF"),
    ("192.0.2.1", "documentation"), ("198.51.100.7", "documentation"), ("203.0.113.9", "documentation"),
    ("198.18.0.1", "benchmarking"), ("192.88.99.1", "6to4 relay"),
    ("::1", "loopback"), ("::", "unspecified"), ("fe80::1", "link-local"), ("fe80::1%2", "link-local"),
    ("febf:ffff::1", "link-local"), ("fc00::1", "private"), ("fd12:3456::1", "private"),
    ("fec0::1", "site-local"), ("ff02::1", "multicast"), ("2001:db8::1", "documentation"),
    ("100::1", "discard"), ("2001::1", "Teredo"), ("64:ff9b:1::a", "NAT64"),
    ("::ffff:127.0.0.1", "IPv4-mapped IPv6 address of 127.0.0.1 (a loopback"),
    ("::ffff:169.254.169.254", "IPv4-mapped IPv6 address of 169.254.169.254 (a link-local"),
    ("::ffff:10.0.0.1", "IPv4-mapped IPv6 address of 10.0.0.1 (a private"),
    ("::ffff:0:127.0.0.1", "IPv4-translated"),
    ("::127.0.0.1", "IPv4-compatible IPv6 address of 127.0.0.1"),
    ("::10.0.0.1", "IPv4-compatible IPv6 address of 10.0.0.1"),
    ("64:ff9b::7f00:1", "NAT64 IPv6 address of 127.0.0.1"),
    ("64:ff9b::a9fe:a9fe", "NAT64 IPv6 address of 169.254.169.254"),
    ("2002:7f00:1::1", "6to4 IPv6 address of 127.0.0.1"),
    ("2002:a9fe:a9fe::", "6to4 IPv6 address of 169.254.169.254"),
    ("2002:c0a8:101::1", "6to4 IPv6 address of 192.168.1.1"),
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "100.128.0.1", "172.32.0.1", "169.255.0.1",
          "2606:4700:4700::1111", "2a00:1450:4001::200e", "::ffff:8.8.8.8", "64:ff9b::808:808",
          "2002:808:808::1"]


@pytest.mark.parametrize("ip,why", REFUSED)
def test_refused_by_default(ip: str, why: str) -> None:
    text = NetworkPolicy().refusal("example.org", ip, 80)
    assert text is not None and why in text, text
    assert "tools.network.allow" in text and "may not reach by default" in text


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_pass(ip: str) -> None:
    assert NetworkPolicy().refusal("example.org", ip, 443) is None


def test_refusal_text_says_why_and_how() -> None:
    text = NetworkPolicy().refusal("localhost", "127.0.0.1", 8080)
    assert text == (
        "Refused to connect to 127.0.0.1:8080 (localhost): it is a loopback address, which PicoBot's "
        'tools may not reach by default. If the user wants this, add "localhost" or "127.0.0.1/32" to '
        "tools.network.allow in config.json."
    )
    literal = NetworkPolicy().refusal("::1", "::1", 80)
    assert literal is not None and literal.startswith("Refused to connect to [::1]:80: it is a loopback")
    assert '"::1/128"' in literal and "(::1)" not in literal
    mapped = NetworkPolicy().refusal("h", "::ffff:10.0.0.1", 80)
    assert mapped is not None and '"10.0.0.1/32"' in mapped  # the IPv4 the user actually means


def test_allow_by_host_wildcard_and_cidr() -> None:
    policy = NetworkPolicy.from_allow(["Metadata.Internal.", "*.corp.example", "10.0.0.0/8", "fd00::/8",
                                       "127.0.0.1", "169.254.169.254"])
    assert policy.refusal("metadata.internal", "10.200.0.1", 80) is None  # allowed by name ...
    assert policy.refusal("metadata.internal", "192.168.0.1", 80) is None  # ... whatever it resolves to
    assert policy.refusal("git.corp.example", "192.168.0.1", 80) is None
    assert policy.refusal("a.b.corp.example", "192.168.0.1", 80) is None
    assert policy.refusal("corp.example", "192.168.0.1", 80) is not None  # *.x matches subdomains only
    assert policy.refusal("evilcorp.example", "192.168.0.1", 80) is not None
    assert policy.refusal("other", "10.9.9.9", 80) is None  # by CIDR
    assert policy.refusal("other", "::ffff:10.9.9.9", 80) is None  # its mapped form too
    assert policy.refusal("other", "fd00::5", 80) is None
    assert policy.refusal("other", "127.0.0.1", 80) is None  # a single address
    assert policy.refusal("other", "127.0.0.2", 80) is not None
    assert policy.refusal("other", "169.254.169.254", 80) is None
    assert policy.refusal("other", "172.16.0.1", 80) is not None


def test_policy_from_settings_tolerates_missing_and_wrong_shapes() -> None:
    for settings_ in ({}, {"network": None}, {"network": {"allow": "10.0.0.0/8"}}, {"network": []}):
        assert NetworkPolicy.from_settings(settings_).refusal("h", "10.0.0.1", 80) is not None
    with pytest.raises(ValueError, match=r"tools.network.allow\[1\]"):
        NetworkPolicy.from_allow(["ok.example", "10.0.0.0/99"])


@pytest.mark.parametrize("entry,message", [
    ("10.0.0.0/33", "not a valid CIDR"),
    ("fd00::/129", "not a valid CIDR"),
    ("300.1.1.1/8", "not a valid CIDR"),
    ("", "is empty"),
    ("   ", "is empty"),
    ("*", "a wildcard may only start an entry"),
    ("a.*.example", "a wildcard may only start an entry"),
    ("example.com:8080", "has a port"),
    ("exa mple.com", "not a valid host name"),
    ("-bad-.example", "not a valid host name"),
    ("a" * 300, "not a valid host name"),
    ("\ud800.example", "not a valid host name"),
    ("\x00", "not a valid host name"),
])
def test_bad_allow_entries_fail_config_load_with_the_key_path(tmp_path: Path, entry: str, message: str) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    config = {"tools": {"network": {"allow": ["localhost", entry]}}}
    (cwd / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(home=tmp_path / "home", environ={}, cwd=cwd)
    assert info.value.key_path == "tools.network.allow[1]" and message in info.value.reason
    str(info.value).encode("utf-8")  # printable, even for a lone surrogate


@pytest.mark.parametrize("allow", [5, [5], [None], [["10.0.0.0/8"]], "10.0.0.0/8", {"a": 1}])
def test_allow_of_the_wrong_type_fails_config_load(tmp_path: Path, allow: Any) -> None:
    with pytest.raises(ValidationError) as info:
        Config.model_validate({"tools": {"network": {"allow": allow}}})
    assert "allow" in str(info.value)


def test_good_allow_entries_load(tmp_path: Path) -> None:
    cfg = Config.model_validate({"tools": {"network": {"allow": ["*.corp.example", "10.0.0.0/8", "::1",
                                                                "[fe80::1]", "bücher.example"]}}})
    policy = NetworkPolicy.from_settings(cfg.tools.model_dump())
    assert policy.refusal("xn--bcher-kva.example", "10.5.5.5", 80) is None
    assert policy.refusal("x", "fe80::1", 80) is None and policy.refusal("x", "fe80::2", 80) is not None


@settings(max_examples=300, deadline=None)
@given(st.integers(min_value=0, max_value=2**32 - 1))
def test_ipv6_forms_of_an_ipv4_address_are_judged_like_it(value: int) -> None:
    v4 = ipaddress.IPv4Address(value)
    verdict = refused_reason(v4) is None
    forms = [ipaddress.IPv6Address(f"::ffff:{v4}"), ipaddress.IPv6Address((0x64FF9B << 96) | value),
             ipaddress.IPv6Address((0x2002 << 112) | (value << 80))]
    if value > 1:  # ::0.0.0.0 and ::0.0.0.1 are :: and ::1 themselves
        forms.append(ipaddress.IPv6Address(value))
    for form in forms:
        assert (refused_reason(form) is None) == verdict, (v4, form)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=300))
def test_any_allow_entry_parses_or_says_why(raw: str) -> None:
    try:
        parse_allow_entry(raw)
    except ValueError as exc:
        str(exc).encode("utf-8")


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300), st.integers(min_value=0, max_value=2**128 - 1))
def test_refusal_text_is_always_printable(host: str, value: int) -> None:
    text = NetworkPolicy().refusal(host, ipaddress.IPv6Address(value), 80)
    if text is not None:
        text.encode("utf-8")
        assert "\n" not in text


# --- the guarded client ----------------------------------------------------------------------


def test_client_refuses_loopback_and_allows_it_when_listed(target: str) -> None:
    with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused, match="loopback"):
        client.get(f"{target}/health")
    with guarded_client(NetworkPolicy.from_allow(["127.0.0.1/32"]), timeout=5) as client:
        assert client.get(f"{target}/health").json()["ok"] is True


def test_client_checks_the_address_a_name_resolves_to(target: str, loopback_only: dict[str, Any]) -> None:
    url = target.replace("127.0.0.1", "localhost")
    with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused) as info:
        client.get(url)
    assert "(localhost): it is a loopback address" in str(info.value)
    assert '"localhost" or "127.0.0.1/32"' in str(info.value) or '"localhost" or "::1/128"' in str(info.value)
    loopback_only["lookups"].clear()
    with guarded_client(NetworkPolicy.from_allow(["localhost"]), timeout=5) as client:
        assert client.get(url).status_code == 200
    # Resolved once; every later lookup is of a literal address (no DNS, no rebinding window).
    assert loopback_only["lookups"][0] == "localhost"
    assert all(_is_loopback(host) for host in loopback_only["lookups"][1:])


def test_client_refuses_a_redirect_hop(redirector: str, target: str) -> None:
    policy = NetworkPolicy.from_allow(["127.0.0.2/32"])
    with guarded_client(policy, timeout=5) as client:
        assert client.get(f"{redirector}/page").status_code == 200  # the allowed server itself
        with pytest.raises(NetworkRefused, match=rf"Refused to connect to 127\.0\.0\.1:{target.rsplit(':', 1)[1]}"):
            client.get(f"{redirector}/hop")


def test_client_ignores_environment_proxies(target: str, monkeypatch: pytest.MonkeyPatch) -> None:
    proxy, proxy_url = _serve("127.0.0.1")
    seen = proxy.RequestHandlerClass.seen  # type: ignore[attr-defined]
    try:
        for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
            monkeypatch.setenv(name, proxy_url)
        with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused):
            client.get(f"{target}/health")
        assert seen == []
    finally:
        proxy.shutdown()
        proxy.server_close()


@pytest.mark.parametrize("host", ["2130706433", "0x7f.1", "127.1", "017700000001"])
def test_other_spellings_of_loopback_are_judged_by_what_they_resolve_to(
        host: str, loopback_only: dict[str, Any]) -> None:
    with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused) as info:
        client.get(f"http://{host}:9/")
    assert f"Refused to connect to 127.0.0.1:9 ({host}): it is a loopback address" in str(info.value)
    assert loopback_only["connects"] == []


def test_metadata_address_is_refused_before_any_connection(loopback_only: dict[str, Any]) -> None:
    with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused, match="link-local"):
        client.get("http://169.254.169.254/latest/meta-data/")
    with guarded_client(NetworkPolicy(), timeout=5) as client, pytest.raises(NetworkRefused, match="private"):
        client.get("http://[::ffff:10.0.0.1]:8080/")
    assert loopback_only["connects"] == []


# --- the tools, directly and through the agent ---------------------------------------------------


def test_tools_refuse_without_the_allow_entry_and_fetch_with_it(tmp_path: Path, target: str) -> None:
    with pytest.raises(ToolError, match="loopback address"):
        HttpRequestTool().execute({"method": "GET", "url": f"{target}/health"}, _ctx(tmp_path))
    with pytest.raises(ToolError, match="loopback address"):
        WebFetchTool().execute({"url": f"{target}/health"}, _ctx(tmp_path))
    allowed = _ctx(tmp_path, ["127.0.0.1/32"])
    assert HttpRequestTool().execute({"method": "GET", "url": f"{target}/health"}, allowed).startswith("HTTP 200")
    assert '"ok": true' in WebFetchTool().execute({"url": f"{target}/health"}, allowed)


def _agent_tool_result(llm: Any, tmp_path: Path, trigger: str, tool: str, args: dict[str, Any],
                       allow: list[str] | None = None) -> ChatMessage:
    add_rule(llm, trigger, {"tool_calls": [{"name": tool, "arguments": args}]}, {"content": "done"})
    provider = OpenAIProvider("default", base_url=f"{llm.url}/v1", api_key="sk-netguard-test", timeout=10)
    loop = AgentLoop(provider, build_registry(), LoopSettings(model="fake"))
    result = loop.run([], [ChatMessage(role="user", content=trigger)], _ctx(tmp_path, allow),
                      TurnController("s", "t"), lambda: [])
    assert result.status == "completed"
    return next(m for m in result.messages if m.role == "tool")


def test_agent_http_request_to_a_local_server_is_refused(llm: Any, tmp_path: Path, target: str) -> None:
    res = _agent_tool_result(llm, tmp_path, "fetch-local-health", "http_request",
                             {"method": "GET", "url": f"{target}/health"})
    assert res.is_error and "Refused to connect to 127.0.0.1" in str(res.content)
    assert '"127.0.0.1/32" to tools.network.allow' in str(res.content)
    assert '"ok"' not in str(res.content)


def test_agent_web_fetch_redirect_to_loopback_is_refused_at_the_hop(
        llm: Any, tmp_path: Path, redirector: str, target: str) -> None:
    res = _agent_tool_result(llm, tmp_path, "follow-the-hop", "web_fetch", {"url": f"{redirector}/hop"},
                             allow=["127.0.0.2/32"])
    port = target.rsplit(":", 1)[1]
    assert res.is_error and f"Refused to connect to 127.0.0.1:{port}: it is a loopback" in str(res.content)


def test_agent_metadata_fetch_is_refused(llm: Any, tmp_path: Path, loopback_only: dict[str, Any]) -> None:
    res = _agent_tool_result(llm, tmp_path, "fetch-metadata", "http_request",
                             {"method": "GET", "url": "http://169.254.169.254/latest/meta-data/iam/"})
    assert res.is_error and "link-local address (where cloud metadata services answer)" in str(res.content)
    assert not [a for a in loopback_only["connects"] if not _is_loopback(a)]


# --- the egress proxy ---------------------------------------------------------------------------


@pytest.fixture
def proxy_path(tmp_path: Path) -> Path:
    # AF_UNIX paths are short (~107 bytes); pytest's tmp_path can be longer.
    import tempfile

    folder = Path(tempfile.mkdtemp(prefix="pb-egress-"))
    return folder / "egress.sock"


def _through(path: Path, request: bytes, then: bytes = b"") -> bytes:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(request)
        if then:
            first = sock.recv(4096)
            sock.sendall(then)
            return first + _read_all(sock)
        return _read_all(sock)


def _read_all(sock: socket.socket) -> bytes:
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def _hostport(url: str) -> str:
    return url.split("://", 1)[1]


def test_proxy_connect_to_an_allowed_server(proxy_path: Path, target: str) -> None:
    with EgressProxy(NetworkPolicy.from_allow(["127.0.0.1"]), proxy_path) as proxy:
        assert proxy.socket_path == str(proxy_path)
        hp = _hostport(target)
        out = _through(proxy_path, f"CONNECT {hp} HTTP/1.1\r\nHost: {hp}\r\n\r\n".encode(),
                       b"GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 200 Connection Established\r\n\r\n")
    assert b'"path": "/health"' in out


def test_proxy_plain_http_absolute_uri(proxy_path: Path, target: str) -> None:
    with EgressProxy(NetworkPolicy.from_allow(["127.0.0.1"]), proxy_path):
        out = _through(proxy_path, f"GET {target}/plain?q=1 HTTP/1.1\r\nHost: x\r\n"
                                   "Proxy-Connection: keep-alive\r\n\r\n".encode())
    assert out.startswith(b"HTTP/1.0 200") or out.startswith(b"HTTP/1.1 200")
    assert b'"path": "/plain?q=1"' in out


def test_proxy_refuses_without_the_allow_entry(proxy_path: Path, target: str) -> None:
    with EgressProxy(NetworkPolicy(), proxy_path):
        hp = _hostport(target)
        out = _through(proxy_path, f"CONNECT {hp} HTTP/1.1\r\n\r\n".encode())
        plain = _through(proxy_path, f"GET {target}/health HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    for answer in (out, plain):
        assert answer.startswith(b"HTTP/1.1 403 Forbidden")
        assert f"Refused to connect to {hp}: it is a loopback address".encode() in answer
        assert b'"ok"' not in answer


def test_proxy_refuses_metadata_without_a_packet_leaving(proxy_path: Path,
                                                         loopback_only: dict[str, Any]) -> None:
    with EgressProxy(NetworkPolicy(), proxy_path):
        out = _through(proxy_path, b"CONNECT 169.254.169.254:80 HTTP/1.1\r\n\r\n")
        mapped = _through(proxy_path, b"GET http://[::ffff:a9fe:a9fe]/latest/ HTTP/1.1\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 403") and b"cloud metadata" in out
    assert mapped.startswith(b"HTTP/1.1 403") and b"169.254.169.254" in mapped
    assert loopback_only["connects"] == []


@pytest.mark.parametrize("garbage", [
    b"\x00\x01\x02 hello\r\n\r\n",
    b"GET\r\n\r\n",
    b"CONNECT nohost HTTP/1.1\r\n\r\n",
    b"CONNECT 127.0.0.1:0 HTTP/1.1\r\n\r\n",
    b"CONNECT 127.0.0.1:99999 HTTP/1.1\r\n\r\n",
    b"CONNECT bad\x7fhost:80 HTTP/1.1\r\n\r\n",
    b"GET /relative HTTP/1.1\r\n\r\n",
    b"GET https://127.0.0.1/ HTTP/1.1\r\n\r\n",
    b"GET http://127.0.0.1:notaport/ HTTP/1.1\r\n\r\n",
    "GET http://bücher.example/ HTTP/1.1\r\n\r\n".encode(),
    b"GET http://127.0.0.1/ HTTP/1.1\r\nno colon here\r\n\r\n",
    b"GET http://127.0.0.1/ SPDY/3\r\n\r\n",
    b"partial head then close",
])
def test_proxy_answers_garbage_with_400_and_keeps_serving(proxy_path: Path, target: str, garbage: bytes) -> None:
    with EgressProxy(NetworkPolicy.from_allow(["127.0.0.1"]), proxy_path):
        if garbage.endswith(b"\r\n\r\n"):
            assert _through(proxy_path, garbage).startswith(b"HTTP/1.1 400 Bad Request")
        else:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(str(proxy_path))
                sock.sendall(garbage)
                sock.shutdown(socket.SHUT_WR)
                assert sock.recv(100).startswith(b"HTTP/1.1 400")
        hp = _hostport(target)
        out = _through(proxy_path, f"CONNECT {hp} HTTP/1.1\r\n\r\n".encode(),
                       b"GET /after HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    assert b'"path": "/after"' in out


def test_proxy_limits_the_request_head(proxy_path: Path) -> None:
    with EgressProxy(NetworkPolicy(), proxy_path):
        out = _through(proxy_path, b"GET http://127.0.0.1/ HTTP/1.1\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431")


def test_proxy_stop_ends_open_tunnels_and_removes_the_socket(proxy_path: Path, target: str) -> None:
    proxy = EgressProxy(NetworkPolicy.from_allow(["127.0.0.1"]), proxy_path).start()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(proxy_path))
        sock.sendall(f"CONNECT {_hostport(target)} HTTP/1.1\r\n\r\n".encode())
        assert sock.recv(100).startswith(b"HTTP/1.1 200")
        proxy.stop()
        assert _read_all(sock) == b""  # the tunnel was closed, not left hanging
    assert not proxy_path.exists()


def test_proxy_socket_is_private_and_a_stale_one_is_replaced(proxy_path: Path) -> None:
    proxy_path.parent.mkdir(parents=True, exist_ok=True)
    stale = socket.socket(socket.AF_UNIX)
    stale.bind(str(proxy_path))
    stale.close()
    with EgressProxy(NetworkPolicy(), proxy_path):
        assert proxy_path.stat().st_mode & 0o777 == 0o600
    not_a_socket = proxy_path.parent / "file"
    not_a_socket.write_text("keep me")
    with pytest.raises(OSError):
        EgressProxy(NetworkPolicy(), not_a_socket).start()
    assert not_a_socket.read_text() == "keep me"


@pytest.fixture(scope="module")
def shared_proxy() -> Iterator[EgressProxy]:
    import tempfile

    with EgressProxy(NetworkPolicy(), Path(tempfile.mkdtemp(prefix="pb-egress-")) / "p.sock") as proxy:
        yield proxy


@settings(max_examples=60, deadline=None)
@given(st.binary(max_size=300))
def test_proxy_survives_any_request_bytes(shared_proxy: EgressProxy, data: bytes) -> None:
    path = Path(shared_proxy.socket_path)
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(10)
        sock.connect(str(path))
        sock.sendall(data + b"\r\n\r\n")
        answer = _read_all(sock)
    assert answer.startswith(b"HTTP/1.1 4")  # an answer, never a silent drop or a dead proxy
    assert _through(path, b"CONNECT 127.0.0.1:1 HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 403")


# --- through the whole stack: config file -> worker -> tool ---------------------------------------


@pytest.fixture(scope="module")
def guarded_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    """web + worker whose config.json opens 127.0.0.2 only (the redirector), not the gateway's 127.0.0.1."""
    tmp = tmp_path_factory.mktemp("guarded")
    port = free_port()
    config = base_config(fake_llm.url, port)
    config["tools"] = {"network": {"allow": ["127.0.0.2/32"]}}
    stack = Stack(tmp, fake_llm.url, config=config)
    stack.port = port
    try:
        stack.start(beat=False)
        yield stack
    finally:
        stack.stop()


def _tool_result_sent_to_model(llm: Any) -> str:
    messages = llm.requests()[-1]["body"]["messages"]
    return next(m["content"] for m in reversed(messages) if m["role"] == "tool")


def test_stack_agent_cannot_fetch_the_gateways_own_health(guarded_stack: Stack, llm: Any,
                                                          redirector: str) -> None:
    add_rule(llm, "gateway-health", {"tool_calls": [{"name": "http_request", "arguments": {
        "method": "GET", "url": f"{guarded_stack.http}/health"}}]}, {"content": "done"})
    assert guarded_stack.client().ask("gateway-health")["status"] == "completed"
    refused = _tool_result_sent_to_model(llm)
    assert f"Refused to connect to 127.0.0.1:{guarded_stack.port}: it is a loopback address" in refused
    assert "workers" not in refused
    # The allow list in config.json reaches the worker's tools: 127.0.0.2 is open, its redirect hop is not.
    add_rule(llm, "allowed-page", {"tool_calls": [{"name": "web_fetch", "arguments": {"url": f"{redirector}/page"}}]},
             {"content": "done"})
    assert guarded_stack.client().ask("allowed-page")["status"] == "completed"
    assert '"path": "/page"' in _tool_result_sent_to_model(llm)
    add_rule(llm, "hop-page", {"tool_calls": [{"name": "web_fetch", "arguments": {"url": f"{redirector}/hop"}}]},
             {"content": "done"})
    assert guarded_stack.client().ask("hop-page")["status"] == "completed"
    assert "Refused to connect to 127.0.0.1:" in _tool_result_sent_to_model(llm)


def test_the_web_and_worker_start_without_httpx_and_a_tool_request_loads_it() -> None:
    # the guard's client, and with it httpx, is imported on the first tool request: a process that never
    # fetches does not pay for it (about 50-90 ms of CPU per start where httpx's CLI extras are installed)
    import subprocess

    code = ("import sys, web.app, worker.app; before = 'httpx' in sys.modules; "
            "from picobot.security.netguard import guarded_client; "
            "from picobot.security.netpolicy import NetworkPolicy; "
            "guarded_client(NetworkPolicy.from_settings({}), timeout=1).close(); "
            "print(before, 'httpx' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).resolve().parent.parent)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]
