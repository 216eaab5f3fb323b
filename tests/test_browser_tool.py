"""The `browser` tool against real pages: Debian's Chromium through Playwright, a local site on 127.0.0.1
and a "refused" server on 127.0.0.2 that the network policy keeps closed (it records every connection, so
a guard that let one through fails the test). Nothing here leaves the loopback interface.
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.browser.engine import BrowserEngine, chromium_problem
from picobot.browser.tool import ACTIONS, BrowserProfilesTool, BrowserTool
from picobot.config.schema import BrowserConfig
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import ToolCall
from picobot.errors import ToolError, TurnCancelled
from picobot.security.netpolicy import NetworkPolicy
from picobot.tools.base import ToolContext, ToolOutput
from picobot.tools.registry import ToolRegistry
from tests.conftest import add_rule
from tests.stack import Stack, base_config, wait_for

CHROMIUM = os.environ.get("PICOBOT_CHROMIUM", "/usr/bin/chromium")
# Belt and braces: even a broken guard could not make Chromium resolve a name.
TEST_ARGS = ["--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1", "--disable-gpu"]
ALLOW = ["127.0.0.1/32"]

pytestmark = pytest.mark.skipif(chromium_problem(CHROMIUM) is not None, reason="run scripts/install-browser")


# --- the servers ----------------------------------------------------------------------------------------


class Refused:
    """A server on 127.0.0.2 (closed by the policy): records every connection it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.2", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.connections: list[str] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                conn, addr = self.sock.accept()
            except OSError:
                return
            self.connections.append(str(addr))
            conn.close()

    @property
    def base(self) -> str:
        return f"http://127.0.0.2:{self.port}"


class Site(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, refused: Refused) -> None:
        super().__init__(("127.0.0.1", 0), _Page)
        self.refused = refused
        self.release = threading.Event()  # ends /slow
        self.slow_started = threading.Event()
        self.barrier = threading.Barrier(2, timeout=20)
        self.paths: list[str] = []

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


PAGES = {
    "/": """<title>Home</title><p id=x>static text</p><a href="/b">Go to B</a>
<form action="/search"><input name="q" placeholder="query"><button>Search</button></form>
<script>document.getElementById('x').textContent = 'rendered by javascript';</script>""",
    "/b": "<title>Page B</title><p>this is page B</p>",
    "/keys": """<title>Keys</title><p id=k>none</p>
<script>document.addEventListener('keydown', e => document.getElementById('k').textContent = 'pressed ' + e.key);</script>""",
    "/late": """<title>Late</title><script>setTimeout(() => document.body.append('ready now'), 300);</script>""",
    "/setcookie": "<title>Set</title><p>cookie set</p>",
    "/files": "<title>Files</title><a href='/file?kb=4'>small</a> <a href='/file?kb=2048'>big</a>",
    "/showcookie": "<title>Show</title><script>document.write('cookie=' + document.cookie)</script>",
}


class _Page(BaseHTTPRequestHandler):
    server: Site

    def do_GET(self) -> None:  # noqa: N802
        site, path = self.server, self.path.split("?")[0]
        site.paths.append(self.path)
        refused = site.refused.base
        if path == "/redirect":
            return self._send(302, b"", [("Location", f"{refused}/secret")])
        if path == "/sub":
            ws = refused.replace("http", "ws")
            body = (f"<title>Sub</title><p>subresources</p><img src='{refused}/img.png'>"
                    f"<script>fetch('{refused}/api').catch(() => {{}}); new WebSocket('{ws}/ws');</script>")
            return self._send(200, body.encode())
        if path == "/search":
            q = self.path.split("q=", 1)[-1]
            return self._send(200, f"<title>Results</title><p>You searched: {q}</p>".encode())
        if path == "/slow":
            site.slow_started.set()
            site.release.wait(60)
            return self._send(200, b"<title>Slow</title>late")
        if path == "/together":
            try:
                site.barrier.wait()
                word = "together"
            except threading.BrokenBarrierError:
                word = "alone"
            return self._send(200, f"<title>T</title><p>{word}</p>".encode())
        if path == "/file":
            kb = int(self.path.split("kb=", 1)[1])
            return self._send(200, b"x" * (kb * 1024), [("Content-Disposition", f'attachment; filename="data-{kb}.bin"'),
                                                       ("Content-Type", "application/octet-stream")])
        if path == "/setcookie":
            return self._send(200, PAGES[path].encode(), [("Set-Cookie", "kept=yes; Max-Age=3600; Path=/")])
        if path in PAGES:
            return self._send(200, PAGES[path].encode())
        return self._send(404, b"not here")

    def _send(self, status: int, body: bytes, headers: list[tuple[str, str]] = ()) -> None:  # type: ignore[assignment]
        self.send_response(status)
        if not any(k == "Content-Type" for k, _ in headers):
            self.send_header("Content-Type", "text/html; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        for k, v in headers:
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def refused() -> Iterator[Refused]:
    r = Refused()
    yield r
    r.sock.close()


@pytest.fixture(scope="module")
def site(refused: Refused) -> Iterator[Site]:
    s = Site(refused)
    threading.Thread(target=s.serve_forever, daemon=True).start()
    yield s
    s.release.set()
    s.shutdown()


def make_engine(home: Path, **cfg: Any) -> BrowserEngine:
    config = BrowserConfig(executable=cfg.pop("executable", CHROMIUM), extra_args=TEST_ARGS, **cfg)
    return BrowserEngine(config, NetworkPolicy.from_allow(ALLOW), home)


@pytest.fixture(scope="module")
def engine(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserEngine]:
    e = make_engine(tmp_path_factory.mktemp("home"), action_timeout_secs=20)
    yield e
    e.close()


def ctx_for(tmp: Path, session: str = "web:c1:d1") -> ToolContext:
    return ToolContext(session, "web", "c1", "u1", "t1", tmp / "ws")


@pytest.fixture
def ctx(tmp_path: Path) -> ToolContext:
    return ctx_for(tmp_path)


# --- actions ---------------------------------------------------------------------------------------------


def test_navigate_returns_the_rendered_text_title_and_final_url(engine: BrowserEngine, site: Site,
                                                               ctx: ToolContext) -> None:
    out = BrowserTool(engine).execute({"action": "navigate", "url": f"{site.base}/"}, ctx)
    assert isinstance(out, str)
    assert "Title: Home" in out and f"URL: {site.base}/" in out
    assert "rendered by javascript" in out and "static text" not in out  # after JavaScript ran


def test_snapshot_refs_are_stable_and_click_by_ref_follows_the_link(engine: BrowserEngine, site: Site,
                                                                   ctx: ToolContext) -> None:
    tool = BrowserTool(engine)
    tool.execute({"action": "navigate", "url": f"{site.base}/"}, ctx)
    first = tool.execute({"action": "snapshot"}, ctx)
    second = tool.execute({"action": "snapshot"}, ctx)
    assert "[e1] link 'Go to B' -> /b" in first and "[e2] input:text 'query'" in first
    assert "[e3] button 'Search'" in first
    assert first == second  # the same DOM, the same refs
    out = tool.execute({"action": "click", "ref": "e1"}, ctx)
    assert "Title: Page B" in out and out.rstrip().endswith(f"{site.base}/b")
    back = tool.execute({"action": "back"}, ctx)
    assert "Title: Home" in back


def test_type_with_submit_press_and_click_by_selector(engine: BrowserEngine, site: Site, ctx: ToolContext) -> None:
    tool = BrowserTool(engine)
    tool.execute({"action": "navigate", "url": f"{site.base}/"}, ctx)
    out = tool.execute({"action": "type", "selector": "input[name=q]", "text": "hello", "submit": True}, ctx)
    assert "pressed Enter" in out and "Title: Results" in out
    assert "You searched: hello" in tool.execute({"action": "snapshot"}, ctx)
    tool.execute({"action": "navigate", "url": f"{site.base}/keys"}, ctx)
    tool.execute({"action": "press", "key": "x"}, ctx)
    assert "pressed x" in tool.execute({"action": "snapshot"}, ctx)
    tool.execute({"action": "navigate", "url": f"{site.base}/"}, ctx)
    assert "Title: Page B" in tool.execute({"action": "click", "selector": "a[href='/b']"}, ctx)


def test_wait_for_text_and_for_a_time(engine: BrowserEngine, site: Site, ctx: ToolContext) -> None:
    tool = BrowserTool(engine)
    tool.execute({"action": "navigate", "url": f"{site.base}/late"}, ctx)
    assert "The text appeared" in tool.execute({"action": "wait", "text": "ready now"}, ctx)
    with pytest.raises(ToolError, match="did not appear within 200 ms"):
        tool.execute({"action": "wait", "text": "never shown", "ms": 200}, ctx)
    assert "Waited 50 ms" in tool.execute({"action": "wait", "ms": 50}, ctx)


def test_screenshot_is_a_png_in_the_workspace(engine: BrowserEngine, site: Site, ctx: ToolContext) -> None:
    tool = BrowserTool(engine)
    tool.execute({"action": "navigate", "url": f"{site.base}/b"}, ctx)
    out = tool.execute({"action": "screenshot"}, ctx)
    assert isinstance(out, ToolOutput) and len(out.images) == 1
    path = Path(out.images[0])
    assert path.parent == ctx.workspace / "screenshots"
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_close_ends_the_dialogs_context(engine: BrowserEngine, site: Site, tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, "web:c1:close-me")
    tool = BrowserTool(engine)
    tool.execute({"action": "navigate", "url": f"{site.base}/b"}, ctx)
    assert engine.is_open("session:web:c1:close-me")
    assert tool.execute({"action": "close"}, ctx) == "Closed the browser."
    assert not engine.is_open("session:web:c1:close-me")
    assert tool.execute({"action": "close"}, ctx) == "No browser was open."


def test_downloads_go_to_the_workspace_up_to_the_size_limit(site: Site, tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "home", max_download_mb=1)
    ctx, tool = ctx_for(tmp_path), BrowserTool(engine)
    try:
        tool.execute({"action": "navigate", "url": f"{site.base}/files"}, ctx)
        tool.execute({"action": "click", "selector": "text=small"}, ctx)
        small = ctx.workspace / "downloads" / "data-4.bin"
        wait_for(small.exists, 20, "the download was not saved")
        # The note comes with the first answer after the download ends: the click's own, or a later one.
        seen = [tool.execute({"action": "click", "selector": "text=big"}, ctx)]
        wait_for(lambda: "larger than 1 MB" in seen[-1] or seen.append(tool.execute({"action": "snapshot"}, ctx)),
                 20, "no note on the big file")
        assert sum("larger than 1 MB" in out for out in seen) == 1  # told once
        assert small.stat().st_size == 4096
        assert not (ctx.workspace / "downloads" / "data-2048.bin").exists()
    finally:
        engine.close()


# --- the network guard -----------------------------------------------------------------------------------


def test_a_redirect_to_a_refused_address_never_reaches_it(engine: BrowserEngine, site: Site, refused: Refused,
                                                          ctx: ToolContext) -> None:
    before = len(engine.guard.refused)
    out = BrowserTool(engine).execute({"action": "navigate", "url": f"{site.base}/redirect"}, ctx)
    assert f"Refused to connect to 127.0.0.2:{refused.port}: it is a loopback address" in out
    assert engine.guard.refused[before:] == [f"127.0.0.2:{refused.port}"]  # the hop, refused by the proxy
    assert refused.connections == []


def test_subresources_fetch_and_websockets_to_a_refused_address_are_aborted(
        engine: BrowserEngine, site: Site, refused: Refused, ctx: ToolContext) -> None:
    before = len(engine.guard.refused)
    tool = BrowserTool(engine)
    out = tool.execute({"action": "navigate", "url": f"{site.base}/sub"}, ctx)
    assert "subresources" in out
    ws = refused.base.replace("http", "ws")
    wait_for(lambda: {f"{refused.base}/img.png", f"{refused.base}/api", f"{ws}/ws"}
             <= set(engine.guard.refused[before:]), 20, "the page's requests were not all judged")
    assert "The network policy refused" in out
    assert refused.connections == []


def test_a_refused_or_metadata_address_is_refused_before_it_connects(engine: BrowserEngine, refused: Refused,
                                                                    ctx: ToolContext) -> None:
    tool = BrowserTool(engine)
    with pytest.raises(ToolError, match="The page was refused: Refused to connect to 127.0.0.2"):
        tool.execute({"action": "navigate", "url": f"{refused.base}/direct"}, ctx)
    with pytest.raises(ToolError, match="link-local"):
        tool.execute({"action": "navigate", "url": "http://169.254.169.254/latest/meta-data/"}, ctx)
    assert "http://169.254.169.254/latest/meta-data/" in engine.guard.refused
    assert refused.connections == []


# --- profiles, parallelism, cancel, idle ----------------------------------------------------------------


def test_a_persistent_profile_survives_across_dialogs(engine: BrowserEngine, site: Site, tmp_path: Path) -> None:
    tool = BrowserTool(engine)
    one, two = ctx_for(tmp_path, "web:c1:one"), ctx_for(tmp_path, "web:c2:two")
    tool.execute({"action": "navigate", "url": f"{site.base}/setcookie", "persistent_id": "shop"}, one)
    tool.execute({"action": "close", "persistent_id": "shop"}, one)  # its Chromium exits: the cookie is on disk
    assert not engine.is_open("profile:shop")
    out = tool.execute({"action": "navigate", "url": f"{site.base}/showcookie", "persistent_id": "shop"}, two)
    assert "cookie=kept=yes" in out
    temporary = tool.execute({"action": "navigate", "url": f"{site.base}/showcookie"}, two)
    assert "cookie=kept" not in temporary  # a dialog's own context shares nothing with the profile
    assert (engine.home / "browser_profiles" / "shop" / "chromium").is_dir()
    listing = BrowserProfilesTool(engine).execute({"action": "list"}, two)
    assert listing.splitlines() == ["shop"]


def test_two_profiles_browse_in_parallel(engine: BrowserEngine, site: Site, tmp_path: Path) -> None:
    tool, answers = BrowserTool(engine), {}

    def browse(profile: str) -> None:
        ctx = ctx_for(tmp_path, f"web:c:{profile}")
        answers[profile] = tool.execute({"action": "navigate", "url": f"{site.base}/together",
                                         "persistent_id": profile}, ctx)

    threads = [threading.Thread(target=browse, args=(p,)) for p in ("alpha", "beta")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    # /together answers only when both requests are in flight at once
    assert all("together" in answers[p] for p in ("alpha", "beta")), answers


def test_stop_during_a_slow_page_cancels_and_closes_the_turns_context(engine: BrowserEngine, site: Site,
                                                                       tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, "web:c1:slow")
    site.slow_started.clear()
    outcome: dict[str, Any] = {}

    def call() -> None:
        try:
            outcome["result"] = BrowserTool(engine).execute({"action": "navigate", "url": f"{site.base}/slow"}, ctx)
        except BaseException as exc:  # noqa: BLE001 - the test reads what the call ended with
            outcome["error"] = exc

    thread = threading.Thread(target=call)
    thread.start()
    assert site.slow_started.wait(20)
    ctx.cancel.cancel()
    thread.join(15)
    site.release.set()
    assert isinstance(outcome.get("error"), TurnCancelled), outcome
    wait_for(lambda: not engine.is_open("session:web:c1:slow"), 15, "the stopped turn's context stayed open")
    site.release.clear()


def test_stop_after_a_browser_call_closes_the_context_the_turn_used(engine: BrowserEngine, site: Site,
                                                                     tmp_path: Path) -> None:
    ctx = ctx_for(tmp_path, "web:c1:later")
    BrowserTool(engine).execute({"action": "navigate", "url": f"{site.base}/b"}, ctx)
    assert engine.is_open("session:web:c1:later")
    ctx.cancel.cancel()  # /stop while the turn does something else
    wait_for(lambda: not engine.is_open("session:web:c1:later"), 15, "the stopped turn's context stayed open")


def test_tool_images_reach_openai_as_a_user_message_after_the_results(tmp_path: Path) -> None:
    from picobot.domain.messages import ChatMessage
    from picobot.providers.anthropic_provider import to_anthropic_messages
    from picobot.providers.openai_provider import to_openai_messages

    png = tmp_path / "shot.png"
    png.write_bytes(b"\x89PNG\r\n\x1a\n" + b"0" * 16)
    media = {"type": "media", "path": str(png), "mime": "image/png"}
    messages = [ChatMessage("user", "look"),
                ChatMessage("assistant", "", tool_calls=[ToolCall("a", "browser", "{}"), ToolCall("b", "clock", "{}")]),
                ChatMessage("tool", [{"type": "text", "text": "Screenshot saved"}, media], tool_call_id="a"),
                ChatMessage("tool", "12:00", tool_call_id="b"),
                ChatMessage("assistant", "done")]
    wire = to_openai_messages(messages)
    assert [m["role"] for m in wire] == ["user", "assistant", "tool", "tool", "user", "assistant"]
    assert wire[2]["content"] == "Screenshot saved"
    assert wire[4]["content"][1]["image_url"]["url"].startswith("data:image/png;base64,iVBORw0KGgo")
    _, anthropic = to_anthropic_messages(messages, "anthropic")
    result = anthropic[2]["content"][0]
    assert result["type"] == "tool_result" and result["content"][1]["type"] == "image"
    # the next turn: the screenshot is not sent again (its tokens would be paid on every later call)
    later = messages + [ChatMessage("user", "and now?")]
    assert [m["role"] for m in to_openai_messages(later)] == ["user", "assistant", "tool", "tool", "assistant", "user"]
    _, anthropic = to_anthropic_messages(later, "anthropic")
    assert anthropic[2]["content"][0]["content"] == "Screenshot saved"


def test_an_action_is_bounded_by_the_action_timeout(site: Site, tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "home", action_timeout_secs=1)
    ctx, tool = ctx_for(tmp_path), BrowserTool(engine)
    try:
        site.slow_started.clear()
        with pytest.raises(ToolError, match=r"1 s \(browser.action_timeout_secs\)|Timeout 1000ms exceeded"):
            tool.execute({"action": "navigate", "url": f"{site.base}/slow"}, ctx)
        site.release.set()
        assert "this is page B" in tool.execute({"action": "navigate", "url": f"{site.base}/b"}, ctx)
    finally:
        site.release.clear()
        engine.close()


def test_an_idle_context_is_closed(site: Site, tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "home", idle_close_secs=0.5)
    try:
        BrowserTool(engine).execute({"action": "navigate", "url": f"{site.base}/b"}, ctx_for(tmp_path))
        assert engine.is_open("session:web:c1:d1")
        wait_for(lambda: not engine.is_open("session:web:c1:d1"), 20, "the idle context was not closed")
    finally:
        engine.close()


# --- a missing Chromium ----------------------------------------------------------------------------------


def test_a_missing_chromium_is_a_clear_tool_error_and_a_health_entry(tmp_path: Path, llm: Any, redis_url: str,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    engine = make_engine(tmp_path / "home", executable=str(tmp_path / "no-chromium"))
    with pytest.raises(ToolError, match="Chromium was not found at .*scripts/install-browser"):
        BrowserTool(engine).execute({"action": "navigate", "url": "http://127.0.0.1:9/"}, ctx_for(tmp_path))
    engine.close()
    # a whole runtime starts anyway, with the tool offered and /health saying how to install Chromium
    from picobot.app import build_runtime
    from picobot.config.loader import load_config
    from picobot.runtime.health import check_health
    from tests.test_scheduler_tool import _NoQueue

    home = tmp_path / "rt-home"
    home.mkdir()
    cfg = base_config(llm.url, 1)
    cfg["browser"] = {"executable": str(tmp_path / "no-chromium"), "profiles_tool": True}
    (home / "config.json").write_text(json.dumps(cfg))
    for key, value in {"PICOBOT_HOME": str(home), "PICOBOT_TEST_KEY": "sk-test-browser", "REDIS_URL": redis_url,
                       "PICOBOT_WORKSPACE": str(tmp_path / "ws")}.items():
        monkeypatch.setenv(key, value)
    rt = build_runtime(load_config(), _NoQueue(), migrate=True)
    try:
        entry = check_health(rt)["checks"]["browser"]
        assert entry["ok"] is True and entry["available"] is False
        assert "scripts/install-browser" in entry["detail"] and "apt-get install chromium" in entry["detail"]
        assert {"browser", "browser_profiles"} <= {t.name for t in rt.plugins.tools(rt.config, rt)}
    finally:
        rt.close()


def test_a_chromium_that_does_not_start_is_a_clear_tool_error(tmp_path: Path) -> None:
    engine = make_engine(tmp_path / "home", executable="/bin/false")  # executable, but no browser
    try:
        with pytest.raises(ToolError, match="The browser could not start: .*scripts/install-browser"):
            BrowserTool(engine).execute({"action": "navigate", "url": "http://127.0.0.1:9/"}, ctx_for(tmp_path))
        assert engine.open_keys() == []
    finally:
        engine.close()


# --- hostile arguments -----------------------------------------------------------------------------------

_hostile = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=True), st.just(float("nan")),
    st.text(max_size=30), st.text(alphabet=st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), max_size=5),
    st.just("x" * 100_000), st.just(""), st.just("\x00"),
    st.recursive(st.none(), lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=3), inner,
                                                                                         max_size=2), max_leaves=30),
)
_keys = st.sampled_from(["action", "url", "ref", "selector", "text", "submit", "key", "ms", "persistent_id",
                         "id", "label", "other"])
_actions = st.sampled_from(ACTIONS + ["create", "label", "list", "delete", "", "NAVIGATE"])


@pytest.fixture(scope="module")
def hostile_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[ToolRegistry, BrowserEngine]]:
    home = tmp_path_factory.mktemp("hostile")
    engine = make_engine(home, executable=str(home / "no-chromium"))  # nothing may reach a network
    registry = ToolRegistry()
    registry.register(BrowserTool(engine))
    registry.register(BrowserProfilesTool(engine))
    yield registry, engine
    engine.close()


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(name=st.sampled_from(["browser", "browser_profiles"]), action=st.one_of(_actions, _hostile),
       extra=st.dictionaries(_keys, _hostile, max_size=4))
def test_hostile_arguments_give_a_clear_error_and_change_nothing(
        hostile_registry: tuple[ToolRegistry, BrowserEngine], tmp_path: Path, name: str, action: Any,
        extra: dict[str, Any]) -> None:
    registry, engine = hostile_registry
    args = {"action": action, **extra}
    raw = json.dumps(args, allow_nan=True)
    ctx = ToolContext("web:c:d", "web", "c", "u", "t", tmp_path / "ws")
    result = registry.execute(ToolCall("1", name, raw), ctx, 20_000)
    assert result.content and "Traceback" not in result.content
    if result.is_error:
        assert result.content.startswith(("Invalid arguments", "`", "A profile", "A label", "The browser is not",
                                          "There is no", "A profile")), result.content
    assert engine.open_keys() == []
    assert not (tmp_path / "ws").exists()  # no screenshot, no download
    root = engine.home / "browser_profiles"
    for p in (root.iterdir() if root.exists() else []):
        assert p.parent == root and not p.is_symlink()


def test_profiles_tool_stays_inside_its_folder(engine: BrowserEngine, tmp_path: Path) -> None:
    tool, ctx = BrowserProfilesTool(engine), ctx_for(tmp_path)
    assert tool.execute({"action": "create", "id": "work", "label": "work logins"}, ctx) == "Created profile work."
    with pytest.raises(ToolError, match="already exists"):
        tool.execute({"action": "create", "id": "work"}, ctx)
    tool.execute({"action": "label", "id": "work", "label": "office"}, ctx)
    assert "work: office" in tool.execute({"action": "list"}, ctx)
    for bad in ("../x", "..", "a/b", "", "x" * 65, ".hidden"):
        with pytest.raises(ToolError, match="A profile id"):
            tool.execute({"action": "delete", "id": bad}, ctx)
    outside = tmp_path / "outside"
    outside.mkdir()
    (engine.home / "browser_profiles" / "linked").symlink_to(outside)
    with pytest.raises(ToolError, match="symlink"):
        tool.execute({"action": "delete", "id": "linked"}, ctx)
    assert outside.is_dir()
    (engine.home / "browser_profiles" / "linked").unlink()
    assert tool.execute({"action": "delete", "id": "work"}, ctx) == "Deleted profile work."
    assert "work" not in tool.execute({"action": "list"}, ctx)


# --- end to end: a turn through the stack ----------------------------------------------------------------


@pytest.fixture(scope="module")
def browser_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[Stack]:
    tmp = tmp_path_factory.mktemp("browser-stack")
    from picobot.cli.embedded_redis import free_port

    port = free_port()
    config = base_config(fake_llm.url, port)
    config["tools"] = {"network": {"allow": ALLOW}}
    config["browser"] = {"extra_args": TEST_ARGS}
    stack = Stack(tmp, fake_llm.url, config=config)
    stack.port = port
    try:
        stack.start(beat=False)
        yield stack
    finally:
        stack.stop()


def test_a_turn_navigates_and_its_reply_carries_the_screenshot(browser_stack: Stack, llm: Any, site: Site) -> None:
    add_rule(llm, "browse-e2e",
             {"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": f"{site.base}/b"}}]},
             {"tool_calls": [{"name": "browser", "arguments": {"action": "screenshot"}}]},
             {"content": "Here is page B."})
    client = browser_stack.client()
    done = client.ask("browse-e2e", timeout=120)
    assert done["status"] == "completed"
    requests = [r["body"]["messages"] for r in llm.requests()]
    navigated = next(m["content"] for m in requests[1] if m["role"] == "tool")
    assert "this is page B" in navigated
    last = requests[2]  # after the screenshot: the tool's text, then the image as a user message
    assert last[-2]["role"] == "tool" and "Screenshot saved" in last[-2]["content"]
    image = last[-1]["content"][1]
    assert last[-1]["role"] == "user" and image["image_url"]["url"].startswith("data:image/png;base64,")
    client.send({"type": "history", "id": "h"})
    history = client.recv_until(lambda f: f.get("id") == "h")["messages"]
    reply = history[-1]
    assert reply["role"] == "assistant"
    blocks = reply["content"]
    assert blocks[0] == {"type": "text", "text": "Here is page B."}
    assert blocks[1]["type"] == "image_url" and blocks[1]["url"].startswith("data:image/png;base64,")
    shot = Path(blocks[1]["path"])  # the workspace file, which channels that send files (WeChat) send
    assert shot.parent.name == "screenshots" and shot.read_bytes()[:4] == b"\x89PNG"
    client.close()


def test_the_answers_images_become_the_channel_deliverys_media(tmp_path: Path) -> None:
    from picobot.channels.outbound import answer_media
    from picobot.domain.messages import ChatMessage
    from picobot.plugins.types import TurnView

    shot = {"type": "image_url", "url": "data:image/png;base64,AAAA", "path": "/ws/screenshots/a.png"}
    upload = {"type": "image_url", "url": "data:image/png;base64,AAAA"}  # no file: nothing to send
    answer = ChatMessage("assistant", [{"type": "text", "text": "here"}, shot, upload])

    def turn(status: str, *messages: ChatMessage) -> TurnView:
        return TurnView("s", "t", "wechat", "c", "u", "default", status, "here", messages=messages)

    assert answer_media(turn("completed", answer)) == [{"path": "/ws/screenshots/a.png"}]
    assert answer_media(turn("cancelled", answer)) == []
    assert answer_media(turn("completed", ChatMessage("assistant", "text only"))) == []


def test_stop_ends_a_turn_waiting_on_a_slow_page(browser_stack: Stack, llm: Any, site: Site) -> None:
    add_rule(llm, "browse-slow",
             {"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": f"{site.base}/slow"}}]},
             {"content": "never"})
    site.slow_started.clear()
    client = browser_stack.client()
    try:
        accepted = client.say("browse-slow")
        assert site.slow_started.wait(60)  # the worker's Chromium is waiting on the page
        client.command("/stop")
        assert client.wait_completed(accepted["seq"], timeout=30)["status"] == "cancelled"
        # the next turn of the dialog browses again (a fresh context: the stopped one was closed)
        add_rule(llm, "browse-after",
                 {"tool_calls": [{"name": "browser", "arguments": {"action": "navigate", "url": f"{site.base}/b"}}]},
                 {"content": "ok"})
        assert client.ask("browse-after", timeout=120)["status"] == "completed"
        messages = llm.requests()[-1]["body"]["messages"]
        assert messages[-1]["role"] == "tool", messages[-3:]
        assert "this is page B" in messages[-1]["content"], messages[-1]
    finally:
        site.release.set()
        client.close()
        site.release.clear()


def test_browser_is_offered_by_default_and_browser_profiles_only_when_asked(tmp_path: Path) -> None:
    from picobot.app import build_plugins
    from picobot.config.schema import Config

    def offered(browser: dict) -> set[str]:
        config = Config.model_validate({"browser": browser})
        host = build_plugins(config, discover=False)

        class _Ports:  # what the plugin reads of the ports while listing its tools
            pass

        ports = _Ports()
        ports.config = config  # type: ignore[attr-defined]
        ports.redis = None  # type: ignore[attr-defined]
        return {t.name for t in host.plugin("browser").picobot_tools(ports)}

    assert offered({}) == {"browser"}
    assert offered({"profiles_tool": True}) == {"browser", "browser_profiles"}
    assert offered({"enabled": False}) == set()
