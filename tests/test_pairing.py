"""Device pairing: the core (codes, tokens, hashes, expiry, revocation) and the web edge (401s,
rate limit, cross-site refusal, cookie and Bearer), plus `picobot pair` and `picobot chat`."""

from __future__ import annotations

import hashlib
import json
import re
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import websocket

from picobot.auth.pairing import CODE_TTL_SECS, Pairing, display_code
from picobot.auth.token_file import cli_token_path
from picobot.auth.tokens import TOUCH_EVERY_SECS
from picobot.storage.db import Database
from tests.stack import API_KEY, Stack
from tests.http_client import HTTP


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.fixture
def db(db_url: str) -> Any:
    """The pairing tables on SQLite and on PostgreSQL (see tests/conftest.py)."""
    database = Database(db_url)
    database.migrate()
    yield database
    database.dispose()


# --- the core ------------------------------------------------------------------------------


def test_code_is_single_use_and_only_hashes_are_stored(db: Database, tmp_path: Path) -> None:
    pairing = Pairing(db)
    code = pairing.new_code()
    assert re.fullmatch(r"[A-HJ-NP-Z2-9]{8}", code.code)
    issued = pairing.redeem(display_code(code.code).lower(), "laptop")  # case and dash do not matter
    assert issued is not None and issued.device.name == "laptop" and issued.device.kind == "browser"
    assert pairing.redeem(code.code, "again") is None  # single use
    with db.read() as s:
        codes = s.execute(db_text("SELECT code_hash FROM pairing_codes")).scalars().all()
        tokens = s.execute(db_text("SELECT token_hash FROM device_tokens")).scalars().all()
    assert codes == [sha(code.code)] and tokens == [sha(issued.token)]
    if db.is_sqlite:  # nor anywhere in the file (WAL included)
        raw = b"".join(p.read_bytes() for p in tmp_path.glob("picobot.db*"))
        assert raw and code.code.encode() not in raw and issued.token.encode() not in raw


def db_text(sql: str) -> Any:
    from sqlalchemy import text

    return text(sql)


def test_codes_expire(db: Database) -> None:
    pairing = Pairing(db)
    t0 = 1_000_000.0
    late = pairing.new_code(now=t0)
    in_time = pairing.new_code(now=t0)
    assert pairing.redeem(late.code, "x", now=t0 + CODE_TTL_SECS + 1) is None
    assert pairing.redeem(in_time.code, "x", now=t0 + CODE_TTL_SECS - 1) is not None


def test_wrong_and_malformed_codes_are_refused(db: Database) -> None:
    pairing = Pairing(db)
    pairing.new_code()
    for bad in ("", "AAAAAAAA", "0O1IL000", "x" * 500, "ABCD-EFG"):
        assert pairing.redeem(bad, "x") is None


def test_tokens_verify_list_and_revoke(db: Database) -> None:
    pairing = Pairing(db)
    a = pairing.issue_token("terminal", kind="cli")
    b = pairing.redeem(pairing.new_code().code, "phone")
    assert b is not None
    assert pairing.verify(a.token).id == a.device.id
    assert pairing.verify("not-a-token") is None and pairing.verify(None) is None
    assert {d.name for d in pairing.devices()} == {"terminal", "phone"}
    assert pairing.revoke(b.device.id) and not pairing.revoke(b.device.id)
    assert pairing.verify(b.token) is None
    assert [d.name for d in pairing.devices()] == ["terminal"]
    assert pairing.devices(include_revoked=True)[1].revoked_at is not None


def test_last_used_is_refreshed_at_most_once_a_minute(db: Database) -> None:
    pairing = Pairing(db)
    issued = pairing.issue_token("t")
    t0 = 2_000_000.0
    pairing.verify(issued.token, now=t0)
    pairing.verify(issued.token, now=t0 + 5)
    assert pairing.devices()[0].last_used_at == t0
    pairing.verify(issued.token, now=t0 + TOUCH_EVERY_SECS + 1)
    assert pairing.devices()[0].last_used_at == t0 + TOUCH_EVERY_SECS + 1


# --- the web edge -------------------------------------------------------------------------------


def code_for(stack: Stack) -> str:
    r = stack.cli("pair", "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["code"]


def bearer(stack: Stack) -> dict[str, str]:
    return {"Authorization": f"Bearer {stack.token}"}


def test_unpaired_requests_get_401_and_never_the_app(stack: Stack) -> None:
    page = HTTP.get(stack.http + "/")
    assert page.status_code == 401 and "picobot pair" in page.text and "app.js" not in page.text
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for path in ("/api/config", "/api/health", "/api/sessions?chat_id=x", "/api/pairing/devices", "/api/nope"):
        r = HTTP.get(stack.http + path)
        assert r.status_code == 401 and r.json()["error"] == "not_paired", path
        assert "picobot pair" in r.json()["message"]
    with pytest.raises(websocket.WebSocketBadStatusException) as exc:
        websocket.create_connection(stack.ws_url + "?chat_id=x&channel=web", timeout=5)
    assert exc.value.status_code == 401
    bad = HTTP.get(stack.http + "/api/me", headers={"Authorization": "Bearer forged"})
    assert bad.status_code == 401
    assert HTTP.get(stack.http + "/health").status_code == 200  # monitoring stays open


def test_the_pairing_page_loads_its_stylesheet_but_app_code_needs_pairing(stack: Stack) -> None:
    page = HTTP.get(stack.http + "/pair?code=<script>alert(1)</script>")
    assert page.status_code == 200 and "<script>alert" not in page.text
    css = re.search(r'href="(/assets/[0-9a-f]+/css/app\.css)"', page.text)[1]
    assert HTTP.get(stack.http + css).status_code == 200
    js = css.replace("css/app.css", "js/app.js")
    assert HTTP.get(stack.http + js).status_code == 401
    r = HTTP.get(stack.http + js, headers=bearer(stack))
    assert r.status_code == 200 and "immutable" in r.headers["cache-control"]
    assert r.headers["content-type"].startswith(("text/javascript", "application/javascript"))


def test_bearer_and_cookie_both_authenticate(stack: Stack) -> None:
    r = HTTP.get(stack.http + "/api/config", headers=bearer(stack))
    assert r.status_code == 200 and API_KEY not in r.text and "********" in r.text
    r = HTTP.get(stack.http + "/api/me", headers={"Cookie": f"picobot_token={stack.token}"})
    assert r.status_code == 200 and r.json()["paired"] is True
    ws = websocket.create_connection(stack.ws_url + "?chat_id=tok&channel=web", timeout=5, header=[
        f"Authorization: Bearer {stack.token}"])
    assert json.loads(ws.recv())["type"] == "ready"
    ws.close()


def test_pair_api_exchanges_a_code_once(stack: Stack) -> None:
    code = code_for(stack)
    r = HTTP.post(stack.http + "/api/pair", json={"code": code, "name": "script", "cookie": False})
    assert r.status_code == 200, r.text
    token = r.json()["token"]
    assert "set-cookie" not in r.headers
    assert HTTP.get(stack.http + "/api/me", headers={"Authorization": f"Bearer {token}"}).json()["device"]["name"] == "script"
    again = HTTP.post(stack.http + "/api/pair", json={"code": code})
    assert again.status_code == 401 and again.json()["error"] == "bad_code"
    # the browser flavour sets an HttpOnly, SameSite=Strict cookie instead of returning the token
    r = HTTP.post(stack.http + "/api/pair", json={"code": code_for(stack)})
    cookie = r.headers["set-cookie"]
    assert r.status_code == 200 and "token" not in r.json()
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie
    stack.redis().delete("picobot:pairfail:127.0.0.1")


def test_failed_attempts_are_rate_limited(stack: Stack) -> None:
    r = stack.redis()
    r.delete("picobot:pairfail:127.0.0.1")
    try:
        for _ in range(5):
            assert HTTP.post(stack.http + "/api/pair", json={"code": "AAAA-AAAA"}).status_code == 401
        blocked = HTTP.post(stack.http + "/api/pair", json={"code": code_for(stack)})  # even a good code
        assert blocked.status_code == 429 and int(blocked.headers["Retry-After"]) > 0
        form = HTTP.post(stack.http + "/pair", data={"code": "AAAAAAAA"})
        assert form.status_code == 429 and "Too many failed attempts" in form.text
    finally:
        r.delete("picobot:pairfail:127.0.0.1")


def test_cross_site_writes_and_sockets_are_refused(stack: Stack) -> None:
    victim = HTTP.post(stack.http + "/api/pair", json={"code": code_for(stack), "cookie": False}).json()
    url = f"{stack.http}/api/pairing/devices/{victim['device']['id']}"
    evil = {**bearer(stack), "Origin": "http://evil.example"}
    assert HTTP.delete(url, headers=evil).status_code == 403
    assert HTTP.delete(url, headers={**bearer(stack), "Sec-Fetch-Site": "cross-site"}).status_code == 403
    assert HTTP.delete(url, headers={"Origin": "http://evil.example"}).status_code == 403  # unpaired too
    jar = {"Cookie": f"picobot_token={stack.token}"}
    no_origin = HTTP.delete(url, headers=jar)  # a cookie alone never authorises a write
    assert no_origin.status_code == 403 and no_origin.json()["error"] == "origin_required"
    with pytest.raises(websocket.WebSocketBadStatusException) as exc:
        websocket.create_connection(stack.ws_url + "?chat_id=x&channel=web", timeout=5,
                                    header=[f"Authorization: Bearer {stack.token}"], origin="http://evil.example")
    assert exc.value.status_code == 403
    ok = HTTP.delete(url, headers={**jar, "Origin": stack.http, "Sec-Fetch-Site": "same-origin"})
    assert ok.status_code == 200 and ok.json()["revoked"] == victim["device"]["id"]
    assert HTTP.get(stack.http + "/api/me", headers={"Authorization": f"Bearer {victim['token']}"}).status_code == 401


def test_cli_pair_prints_code_and_url_lists_and_revokes(stack: Stack) -> None:
    r = stack.cli("pair")
    assert r.returncode == 0, r.stderr
    code = re.search(r"Pairing code: ([A-Z0-9]{4}-[A-Z0-9]{4})", r.stdout)[1]
    url = re.search(r"(http://\S+/pair\?code=\S+)", r.stdout)[1]
    assert url.endswith(code.replace("-", "")) and url.startswith(stack.http)
    token = HTTP.post(stack.http + "/api/pair", json={"code": code, "name": "listed one", "cookie": False}).json()["token"]
    listed = stack.cli("pair", "--list")
    line = next(line for line in listed.stdout.splitlines() if "listed one" in line)
    device_id = line.split()[0]
    assert stack.cli("pair", "--revoke", device_id).returncode == 0
    assert "listed one" not in stack.cli("pair", "--list").stdout
    assert HTTP.get(stack.http + "/api/me", headers={"Authorization": f"Bearer {token}"}).status_code == 401
    assert stack.cli("pair", "--revoke", device_id).returncode == 1


def test_cli_chat_pairs_itself_on_the_server_and_takes_a_token_elsewhere(stack: Stack, llm: Any,
                                                                          tmp_path: Path) -> None:
    r = stack.cli("chat", "-m", "hello from the terminal", "--url", stack.ws_url)
    assert r.returncode == 0, r.stderr
    path = cli_token_path(stack.home)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # revoked (or a new database): the terminal on the server pairs itself again
    cli_device = next(d for d in json.loads(stack.cli("pair", "--list", "--json").stdout) if d["kind"] == "cli")
    stack.cli("pair", "--revoke", cli_device["id"])
    r = stack.cli("chat", "-m", "/info --json", "--url", stack.ws_url)
    assert r.returncode == 0, r.stderr
    # another machine: no PicoBot database there, so a token is required
    elsewhere = {**stack.env, "PICOBOT_HOME": str(tmp_path / "laptop")}
    (tmp_path / "laptop").mkdir()
    (tmp_path / "laptop" / "config.json").write_text((stack.home / "config.json").read_text())

    def run(*args: str, env: dict[str, str] = elsewhere) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "picobot", "chat", "-m", "/info --json", "--url", stack.ws_url,
                               *args], env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)

    denied = run()
    assert denied.returncode == 2 and "--token" in denied.stderr
    assert not (tmp_path / "laptop" / "data").exists()  # no stray database was created to pair
    assert run("--token", "wrong").returncode == 2
    assert run("--token", stack.token).returncode == 0
    assert run(env={**elsewhere, "PICOBOT_TOKEN": stack.token}).returncode == 0


def test_pairing_can_be_switched_off(tmp_path: Path, fake_llm: Any) -> None:
    open_stack = Stack(tmp_path, fake_llm.url, gateway={"pairing_required": False})
    try:
        open_stack.start_web()
        assert HTTP.get(open_stack.http + "/").status_code == 200
        assert HTTP.get(open_stack.http + "/api/config").status_code == 200
        ws = websocket.create_connection(open_stack.ws_url + "?chat_id=open&channel=web", timeout=5)
        assert json.loads(ws.recv())["type"] == "ready"
        ws.close()
        # still no cross-site writes
        assert HTTP.delete(open_stack.http + "/api/pairing/devices/x",
                            headers={"Origin": "http://evil.example"}).status_code == 403
    finally:
        open_stack.stop()


def test_revoking_a_device_hangs_up_its_open_socket(stack: Stack) -> None:
    code = code_for(stack)
    token = HTTP.post(stack.http + "/api/pair", json={"code": code, "name": "doomed", "cookie": False}).json()["token"]
    me = HTTP.get(stack.http + "/api/me", headers={"Authorization": f"Bearer {token}"}).json()["device"]
    ws = websocket.create_connection(stack.ws_url + "?chat_id=revoked&channel=web", timeout=5,
                                     header=[f"Authorization: Bearer {token}"])
    assert json.loads(ws.recv())["type"] == "ready"
    r = stack.cli("pair", "--revoke", me["id"])
    assert r.returncode == 0, r.stderr
    ws.settimeout(20)  # the socket re-checks its token every 10 s
    frame = json.loads(ws.recv())
    assert frame["type"] == "error" and frame["code"] == "not_paired"
    try:
        rest = ws.recv()  # the server's close frame: websocket-client returns an empty frame
    except websocket.WebSocketConnectionClosedException:
        rest = ""
    assert not rest
    stack.redis().delete("picobot:pairfail:127.0.0.1")


def test_a_token_never_starts_with_a_dash() -> None:
    """`picobot chat --token <token>` would read a token starting with "-" as an option (1 in 64 did)."""
    from picobot.auth.tokens import new_secret

    tokens = [new_secret() for _ in range(3000)]
    assert not [t for t in tokens if t.startswith("-")]
    assert len(set(tokens)) == len(tokens) and all(len(t) >= 43 for t in tokens)
