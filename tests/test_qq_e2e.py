"""The QQ channel plugin (examples/plugins/picobot-qq) end to end: the package installed with pip into a
folder of its own, a real stack (web, a worker, the plugin's `connection` process) with the fake LLM,
and the OneBot fake (tests/onebot_fake.py) playing QQ in each of its three connection modes:

    qq   forward WebSocket: `picobot run qq:connection:qq` dials the fake
    qqr  reverse WebSocket: the fake dials the web at /qq/ws/qqr
    qqh  HTTP: the fake POSTs signed events to /qq/qqh; the bot calls the fake's HTTP API

One stack for the module: each start costs seconds.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Iterator

import pytest
from sqlalchemy import text
from websockets.exceptions import InvalidStatus

from picobot.storage.db import Database
from scripts.fake_llm import FakeLLM
from tests.onebot_fake import OneBotFake
from tests.stack import ROOT, Stack, wait_for

PACKAGE = ROOT / "examples" / "plugins" / "picobot-qq"
BUILD_LEFTOVERS = ("build", "__pycache__", ".pytest_cache", ".hypothesis")
ALICE, BOB, STRANGER = 20002, 20003, 30003
GROUP = 777


def _package_files() -> list[Path]:
    def leftover(path: Path) -> bool:
        return any(p in BUILD_LEFTOVERS or p.endswith(".egg-info") for p in path.relative_to(PACKAGE).parts)

    return sorted(p for p in PACKAGE.rglob("*") if p.is_file() and not leftover(p))


@pytest.fixture(scope="session")
def qq_site() -> Path:
    """A folder holding picobot-qq as pip installs it, named by a hash of its files (as tests/test_plugins_e2e.py
    does for the example plugin): the shared venv never sees the plugin, only the stack's PYTHONPATH does."""
    digest = hashlib.sha256()
    for path in _package_files():
        digest.update(path.relative_to(PACKAGE).as_posix().encode() + b"\0" + path.read_bytes())
    site = Path(tempfile.gettempdir()) / f"picobot-qq-plugin-{digest.hexdigest()[:16]}"
    if site.is_dir():
        return site
    work = Path(tempfile.mkdtemp(prefix="picobot-qq-build-"))
    try:
        source = work / "src"
        shutil.copytree(PACKAGE, source, ignore=shutil.ignore_patterns(*BUILD_LEFTOVERS, "*.egg-info"))
        r = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--quiet", "--target",
                            str(work / "site"), str(source)], capture_output=True, text=True, timeout=300)
        assert r.returncode == 0, f"pip install of picobot-qq failed:\n{r.stdout}\n{r.stderr}"
        try:
            os.rename(work / "site", site)
        except OSError:
            assert site.is_dir()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return site


@pytest.fixture(scope="module")
def qq(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM, qq_site: Path) -> Iterator[SimpleNamespace]:
    forward = OneBotFake(self_id=10001, token="fwd-token")
    reverse = OneBotFake(self_id=10002, token="rev-token")
    http = OneBotFake(self_id=10003, token="http-token", secret="http-secret")
    stack = Stack(tmp_path_factory.mktemp("qq"), fake_llm.url)
    try:
        config_path = stack.home / "config.json"
        config = json.loads(config_path.read_text())
        config["channels"] = {
            "qq": {"type": "qq", "enabled": True, "ws_url": forward.serve_ws(), "access_token": "fwd-token",
                   "allow_from": [str(ALICE), str(BOB)]},
            "qqr": {"type": "qq", "enabled": True, "reverse_path": "/qq/ws/qqr", "access_token": "rev-token"},
            "qqh": {"type": "qq", "enabled": True, "http_url": http.serve_http(), "access_token": "http-token",
                    "secret": "http-secret"},
        }
        config["tools"] = {"network": {"allow": ["127.0.0.1"]}}  # the inbound image is served on loopback
        config["plugins"] = {"settings": {"qq": {"api_timeout_secs": 10}}}
        config_path.write_text(json.dumps(config, indent=2))
        stack.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(qq_site), stack.env.get("PYTHONPATH")]))
        stack.start(beat=False)
        stack._spawn("qq-connection", ["run", "qq:connection:qq"])
        forward.wait_connected(timeout=60)
        reverse.dial(f"ws://127.0.0.1:{stack.port}/qq/ws/qqr")
        http.report_to(f"{stack.http}/qq/qqh")
        yield SimpleNamespace(stack=stack, forward=forward, reverse=reverse, http=http)
    finally:
        for fake in (forward, reverse, http):
            fake.close()
        stack.stop()


# --- helpers ------------------------------------------------------------------------------


def said(call: dict[str, Any]) -> str:
    return "".join(s["data"].get("text", "") for s in call["params"].get("message") or [] if s.get("type") == "text")


def answer_to(fake: OneBotFake, marker: str, action: str | None = None, timeout: float = 60) -> dict[str, Any]:
    return fake.wait_call(lambda c: marker in said(c) and (action is None or c["action"] == action), timeout)


def events(stack: Stack) -> list[tuple[str, str]]:
    db = Database(stack.database_url)
    try:
        with db.connect() as conn:
            return [tuple(row) for row in conn.execute(text("SELECT channel, event_key FROM channel_events"))]
    finally:
        db.dispose()


def llm_saw(llm: FakeLLM, marker: str) -> bool:
    return any(marker in json.dumps(r["body"].get("messages")) for r in llm.requests()
               if r["path"].endswith("/chat/completions"))


# --- forward WebSocket --------------------------------------------------------------------


def test_a_private_message_is_answered_by_send_private_msg(qq: SimpleNamespace) -> None:
    message_id = qq.forward.private_message(ALICE, "hello forward")
    call = answer_to(qq.forward, "hello forward")
    assert call["action"] == "send_private_msg" and call["params"]["user_id"] == ALICE and call["via"] == "forward"
    assert said(call) == "You said: hello forward"
    assert ("qq", f"10001:{message_id}") in events(qq.stack)


def test_a_cq_string_message_is_read_like_segments(qq: SimpleNamespace) -> None:
    qq.forward.private_message(ALICE, "cq [brackets] & commas, too", cq=True)
    assert said(answer_to(qq.forward, "cq [brackets]")) == "You said: cq [brackets] & commas, too"


def test_a_group_answers_only_when_mentioned_or_replied_to(qq: SimpleNamespace, llm: FakeLLM) -> None:
    qq.forward.group_message(GROUP, ALICE, "group chatter without a mention")
    mentioned = qq.forward.group_message(GROUP, ALICE, "group question with a mention", at_bot=True)
    call = answer_to(qq.forward, "group question with a mention")
    assert call["action"] == "send_group_msg" and call["params"]["group_id"] == GROUP
    assert call["params"]["message"][0] == {"type": "reply", "data": {"id": str(mentioned)}}
    assert said(call) == "You said: group question with a mention"  # the @ is not in the text
    # the fake shows the call before the bot has its answer: a user replies only after the bot noted its message
    wait_for(lambda: qq.stack.redis().exists(f"qq:qq:sent:{call['message_id']}"), 15, "the sent id was not noted")
    qq.forward.group_message(GROUP, BOB, "a follow-up to the bot", reply_to=call["message_id"])
    assert answer_to(qq.forward, "a follow-up to the bot")["params"]["group_id"] == GROUP
    assert not llm_saw(llm, "group chatter without a mention")
    assert not any("group chatter" in said(c) for c in qq.forward.sends())


def test_the_same_message_id_twice_is_answered_once(qq: SimpleNamespace) -> None:
    qq.forward.private_message(ALICE, "redelivered message", message_id=55555)
    qq.forward.private_message(ALICE, "redelivered message", message_id=55555)
    answer_to(qq.forward, "redelivered message")
    qq.forward.private_message(ALICE, "after the redelivery")
    answer_to(qq.forward, "after the redelivery")
    assert len([c for c in qq.forward.sends() if "redelivered message" in said(c)]) == 1


def test_a_sender_not_in_allow_from_gets_nothing(qq: SimpleNamespace, llm: FakeLLM) -> None:
    qq.forward.private_message(STRANGER, "a stranger writes")
    qq.forward.private_message(ALICE, "after the stranger")
    answer_to(qq.forward, "after the stranger")
    time.sleep(1)
    assert not any(c["params"].get("user_id") == STRANGER for c in qq.forward.sends())
    assert not llm_saw(llm, "a stranger writes")


def test_malformed_frames_leave_the_connection_working(qq: SimpleNamespace) -> None:
    for frame in ("{not json", "[" * 50_000, '{"post_type": "message", "x": NaN}', "[1, 2]", b"\xff\xfe",
                  json.dumps({"post_type": "message", "message_type": "private", "self_id": 10001, "user_id": ALICE,
                              "message_id": [1], "message": {"deep": [[[[[[]]]]]]}})):
        qq.forward.send_raw(frame)
    qq.forward.private_message(ALICE, "still connected")
    answer_to(qq.forward, "still connected")
    lone = json.dumps({"time": 1, "self_id": 10001, "post_type": "message", "message_type": "private", "user_id": ALICE,
                       "message_id": 77001, "message": "lone \ud800 surrogate"}, ensure_ascii=True)
    assert "\\ud800" in lone  # sent as JSON's escape, which is valid JSON but no valid UTF-8 character
    qq.forward.send_raw(lone)
    assert said(answer_to(qq.forward, "surrogate")) == "You said: lone \ufffd surrogate"


def test_an_inbound_image_reaches_the_model(qq: SimpleNamespace, llm: FakeLLM) -> None:
    qq.forward.private_message(ALICE, [{"type": "text", "data": {"text": "what is in this picture"}},
                                       {"type": "image", "data": {"file": "pixel.png", "url": qq.http.file_url()}}])
    answer_to(qq.forward, "what is in this picture")
    bodies = [r["body"] for r in llm.requests() if "what is in this picture" in json.dumps(r["body"].get("messages"))]
    assert bodies and "data:image/png;base64,iVBORw0KGgo" in json.dumps(bodies[-1]["messages"])


# --- reverse WebSocket and HTTP -----------------------------------------------------------


def test_reverse_websocket_answers_a_message(qq: SimpleNamespace) -> None:
    qq.reverse.private_message(ALICE, "hello reverse")
    call = answer_to(qq.reverse, "hello reverse")
    assert call["action"] == "send_private_msg" and call["via"] == "reverse"


def test_reverse_websocket_with_a_wrong_token_is_refused(qq: SimpleNamespace) -> None:
    intruder = OneBotFake(self_id=10002, token="wrong-token")
    try:
        with pytest.raises(InvalidStatus) as refused:
            intruder.dial(f"ws://127.0.0.1:{qq.stack.port}/qq/ws/qqr")
        assert refused.value.response.status_code == 401
        with pytest.raises(InvalidStatus) as nobody:
            intruder.dial(f"ws://127.0.0.1:{qq.stack.port}/qq/ws/qq")  # a forward channel takes no reverse socket
        assert nobody.value.response.status_code == 404
    finally:
        intruder.close()


def test_http_mode_answers_a_message_through_the_http_api(qq: SimpleNamespace) -> None:
    qq.http.private_message(ALICE, "hello over http")
    call = answer_to(qq.http, "hello over http")
    assert call["action"] == "send_private_msg" and call["via"] == "http"


def test_http_event_with_a_bad_signature_is_refused_and_records_nothing(qq: SimpleNamespace, llm: FakeLLM) -> None:
    event = {"time": int(time.time()), "self_id": 10003, "post_type": "message", "message_type": "private",
             "sub_type": "friend", "message_id": 424242, "user_id": ALICE,
             "message": [{"type": "text", "data": {"text": "forged event"}}], "raw_message": "forged event"}
    assert qq.http.emit(event, signature="sha1=" + "0" * 40) == [401]
    assert qq.http.emit(event, signature="") == [401]
    assert not any(key == "10003:424242" for _channel, key in events(qq.stack))
    assert not llm_saw(llm, "forged event")


def test_the_plugin_process_reports_its_connection(qq: SimpleNamespace) -> None:
    def connected() -> Any:
        found = qq.stack.health()["checks"].get("processes") or {}
        return next((p for p in found.get("processes", []) if p.get("plugin") == "qq" and p.get("state") == "connected"),
                    None)

    wait_for(connected, 15, "the qq connection process did not report connected in /health")


# --- configuration and the command line ---------------------------------------------------


def test_a_bad_qq_channel_stops_the_start_naming_its_key(qq: SimpleNamespace, tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"channels": {"qq": {
        "type": "qq", "enabled": True, "ws_url": "http://127.0.0.1:1", "allow_from": ["alice"]}}}))
    r = qq.stack.cli("run", "qq:connection:qq", env={**qq.stack.env, "PICOBOT_HOME": str(home)}, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    assert "channels.qq.ws_url" in r.stderr


def test_qq_status_shows_each_channel(qq: SimpleNamespace) -> None:
    r = qq.stack.cli("qq", "status", timeout=60)
    assert r.returncode == 0, r.stdout + r.stderr
    lines = {line.split(":", 1)[0]: line for line in r.stdout.splitlines()}
    assert "forward, connected, linked, self_id 10001" in lines["qq"]
    assert "reverse, connected, linked, self_id 10002" in lines["qqr"]
    assert "http (no connection to hold)" in lines["qqh"]
