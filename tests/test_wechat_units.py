"""WeChat pieces against the fake iLink over real HTTP: QR login flows, CDN media, parts, hostile JSON.

No stack here (tests/test_wechat_e2e.py runs the processes); these are quick and run in-process.
"""

from __future__ import annotations

import json
import os
import stat
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.channels.wechat import creds, intake, media
from picobot.channels.wechat.adapter import client_id, split_text
from picobot.channels.wechat.api import IlinkApi, IlinkError
from picobot.channels.wechat.config import WeChatConfig, check_channel
from picobot.channels.wechat.inbound import to_inbound
from picobot.channels.wechat.login import LoginFailed, QrLogin
from picobot.errors import ConfigError
from scripts.fake_wechat import FakeWeChat


@pytest.fixture
def fake() -> Iterator[FakeWeChat]:
    f = FakeWeChat(qr_hold_secs=0.2).start()
    yield f
    f.stop()


def _login(fake: FakeWeChat, path: Path, out: list[str] | None = None) -> creds.Credentials:
    lines = out if out is not None else []
    return QrLogin(fake.base_url, path, out=lines.append, poll_secs=0.05, timeout=20).run()


# ---- config -------------------------------------------------------------------------------------

def test_config_defaults_and_errors(tmp_path: Path) -> None:
    cfg = check_channel("wechat", {"type": "wechat", "enabled": True})
    assert cfg.base_url == "https://ilinkai.weixin.qq.com"
    assert cfg.cdn_base_url == "https://novac2c.cdn.weixin.qq.com/c2c"
    assert cfg.credentials_path(tmp_path) == tmp_path / "wechat" / "credentials.json"
    with pytest.raises(ConfigError) as err:
        check_channel("wx", {"type": "wechat", "base_url": "ftp://x"})
    assert err.value.key_path == "channels.wx.base_url"
    with pytest.raises(ConfigError) as err:
        check_channel("wx", {"type": "wechat", "cred_pth": "x"})
    assert err.value.key_path == "channels.wx.cred_pth"


# ---- QR login -----------------------------------------------------------------------------------

def test_login_wait_scan_confirm_saves_mode_600(fake: FakeWeChat, tmp_path: Path) -> None:
    fake.qr_plan = ["wait", "scaned", "wait", "confirmed"]
    out: list[str] = []
    login = _login(fake, tmp_path / "wx" / "credentials.json", out)
    path = tmp_path / "wx" / "credentials.json"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    saved = json.loads(path.read_text())
    assert saved["token"] == login.token and login.token in fake.tokens
    assert {"token", "baseUrl", "userId", "savedAt"} <= set(saved)
    assert any("Scanned" in line for line in out)
    assert any("https://liteapp.weixin.qq.com/q/" in line for line in out)  # the URL, under the drawn QR
    assert any("██" in line for line in out)


def test_login_expired_qr_is_renewed_at_most_three_times(fake: FakeWeChat, tmp_path: Path) -> None:
    fake.qr_plan = ["expired"]
    done: list[Any] = []

    def phone() -> None:  # each new QR expires again, three times, then the fourth is confirmed
        seen = 1
        while len(fake.qrs) < 4 and not done:
            if len(fake.qrs) > seen:
                seen = len(fake.qrs)
                fake.set_qr("expired" if seen < 4 else "confirmed")
            time.sleep(0.02)
        time.sleep(0.1)
        fake.set_qr("confirmed")

    threading.Thread(target=phone, daemon=True).start()
    login = _login(fake, tmp_path / "c.json")
    done.append(1)
    assert len(fake.qrs) == 4 and login.token in fake.tokens

    fake.qr_plan = ["expired"]
    stop = threading.Event()

    def always_expire() -> None:
        while not stop.is_set():
            fake.set_qr("expired")
            time.sleep(0.02)

    threading.Thread(target=always_expire, daemon=True).start()
    before = len(fake.qrs)
    try:
        with pytest.raises(LoginFailed, match="expired"):
            _login(fake, tmp_path / "d.json")
    finally:
        stop.set()
    assert len(fake.qrs) - before == 4  # the first QR and three renewals, no more
    assert not (tmp_path / "d.json").exists()


def test_login_follows_the_redirect(fake: FakeWeChat, tmp_path: Path) -> None:
    fake.qr_plan = ["scaned_but_redirect", "confirmed"]
    _login(fake, tmp_path / "c.json")
    hosts = [c["host"] for c in fake.calls if c["path"].endswith("get_qrcode_status")]
    assert hosts[0].startswith("127.0.0.1:") and hosts[-1] == f"localhost:{fake.port}"


def test_expired_mark_keeps_a_newer_login(tmp_path: Path) -> None:
    path = tmp_path / "c.json"
    creds.save(path, creds.Credentials(token="old", base_url="http://x"))
    creds.save(path, creds.Credentials(token="new", base_url="http://x"))
    assert not creds.mark_expired(path, "old")
    assert creds.load(path).usable  # type: ignore[union-attr]
    assert creds.mark_expired(path, "new")
    assert not creds.load(path).usable  # type: ignore[union-attr]


# ---- API errors ---------------------------------------------------------------------------------

def test_session_expired_is_minus_14(fake: FakeWeChat) -> None:
    api = IlinkApi(fake.base_url, fake.issue_token())
    assert api.get_updates("", 0.1)["ret"] == 0
    fake.expire_session()
    with pytest.raises(IlinkError) as err:
        api.get_updates("", 0.1)
    assert err.value.session_expired and not err.value.transient


# ---- media --------------------------------------------------------------------------------------

@pytest.mark.parametrize("hex_key", [False, True])
def test_cdn_download_decrypts(fake: FakeWeChat, hex_key: bool) -> None:
    data = os.urandom(1000)
    ref = fake.put_media(data, hex_key=hex_key)
    assert media.download(ref, fake.cdn_url, 10_000) == data
    with pytest.raises(media.MediaError):
        media.download(ref, fake.cdn_url, 100)  # over the size limit


def test_cdn_upload_round_trip(fake: FakeWeChat) -> None:
    api = IlinkApi(fake.base_url, fake.issue_token())
    data = b"a file" * 100
    ref = media.upload(api, data, "u@im.wechat", 3)
    assert media.download(ref, fake.cdn_url, 10_000) == data


def test_image_item_becomes_an_image_block(fake: FakeWeChat, tmp_path: Path) -> None:
    png = b"\x89PNG\r\n\x1a\n" + os.urandom(200)
    msg = fake.message("u@im.wechat", items=[{"type": 2, "image_item": {"media": fake.put_media(png)}}])
    cfg = WeChatConfig(cdn_base_url=fake.cdn_url)
    [inbound] = to_inbound({"message": msg}, cfg, "wechat", tmp_path)
    assert inbound.content[0]["type"] == "image_url"
    assert inbound.content[0]["url"].startswith("data:image/png;base64,")


# ---- parts --------------------------------------------------------------------------------------

@given(st.text(min_size=0, max_size=9000), st.integers(min_value=100, max_value=4000))
def test_split_text_keeps_parts_under_the_limit(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(0 < len(p) <= limit for p in parts)
    assert "".join(parts).replace(" ", "").replace("\n", "") == text.strip().replace(" ", "").replace("\n", "")


def test_client_id_is_stable_per_row_and_part() -> None:
    assert client_id(42, 0) == client_id(42, 0) != client_id(42, 1) != client_id(43, 1)


# ---- hostile JSON -------------------------------------------------------------------------------

json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner,
                                                                                       max_size=4),
                           max_leaves=12)
hostile_items = st.lists(st.fixed_dictionaries({"type": json_values}, optional={
    "text_item": st.fixed_dictionaries({}, optional={"text": json_values}) | json_values,
    "image_item": json_values, "file_item": json_values, "voice_item": json_values}), max_size=4)


@st.composite
def hostile_messages(draw: Any) -> Any:
    base = {"message_type": 1, "from_user_id": "h@im.wechat", "item_list": [{"type": 1, "text_item": {"text": "x"}}],
            "message_id": 1, "context_token": "ctx"}
    if draw(st.booleans()):
        return draw(json_values)
    fields = draw(st.dictionaries(st.sampled_from(["message_type", "from_user_id", "item_list", "message_id",
                                                   "client_id", "seq", "create_time_ms", "context_token", "ref_msg"]),
                                  json_values | hostile_items, max_size=4))
    return {**base, **fields}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hostile_messages())
def test_hostile_messages_never_raise(msg: Any) -> None:
    cleaned = intake.clean(msg)
    why = intake.problem(cleaned)
    if why is None:
        keys = intake.dedupe_keys(cleaned)
        assert keys and all(isinstance(k, str) for k in keys)
        cfg = WeChatConfig(cdn_base_url="http://127.0.0.1:9")
        for inbound in to_inbound({"message": cleaned}, cfg, "wechat", Path("/nonexistent/media")):
            assert inbound.chat_id == cleaned["from_user_id"]
            json.dumps(inbound.content).encode("utf-8")  # nothing unencodable reaches the model or SQL


@pytest.mark.parametrize("items", [
    [], [{"type": 99, "x_item": {}}], [{"type": 1, "text_item": {"text": ""}}], [{"type": 1, "text_item": {"text": 5}}],
    [{"type": "1", "text_item": {"text": "hi"}}], ["not an item"],
])
def test_unreadable_messages_are_ignored(items: list[Any], tmp_path: Path) -> None:
    msg = {"message_type": 1, "from_user_id": "u@im.wechat", "message_id": 3, "item_list": items}
    readable = intake.problem(msg) is None and to_inbound({"message": msg}, WeChatConfig(), "wechat", tmp_path)
    assert not readable


def test_lone_surrogates_are_repaired(tmp_path: Path) -> None:
    msg = intake.clean(json.loads('{"message_type": 1, "from_user_id": "u", "message_id": 1, '
                                  '"item_list": [{"type": 1, "text_item": {"text": "a\\ud800b\\u0000"}}]}'))
    assert intake.problem(msg) is None
    [inbound] = to_inbound({"message": msg}, WeChatConfig(), "wechat", tmp_path)
    inbound.content.encode("utf-8")
    assert inbound.content == "a\ufffdb\ufffd"


def test_dedupe_keys_in_tencent_order() -> None:
    msg = {"message_id": 7, "client_id": "c", "seq": 3, "create_time_ms": 1, "item_list": []}
    assert [k[:2] for k in intake.dedupe_keys(msg)] == ["m:", "c:", "s:", "h:"]
    assert intake.dedupe_keys({"item_list": [{"type": 1, "text_item": {"text": "t"}}]})[0].startswith("h:")


def test_the_channels_plugin_reports_a_bad_wechat_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from picobot.channels.plugin import ChannelsPlugin
    from picobot.config import load_config

    (tmp_path / "config.json").write_text(json.dumps({"channels": {"wx": {"type": "wechat", "enabled": True,
                                                                          "cred_pth": "x"}}}))
    monkeypatch.setenv("PICOBOT_HOME", str(tmp_path))
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    [(key, reason)] = ChannelsPlugin().picobot_config_check(load_config())
    assert key == "channels.wx.cred_pth" and "unknown key" in reason


@pytest.mark.parametrize("message_type", [True, 1.0, "1", 2, None])
def test_only_message_type_1_is_a_users_message(message_type: Any) -> None:
    msg = {"message_type": message_type, "from_user_id": "u", "message_id": 1,
           "item_list": [{"type": 1, "text_item": {"text": "hi"}}]}
    assert intake.problem(msg) is not None


def test_up_starts_a_poller_per_enabled_wechat_channel(tmp_path: Path) -> None:
    from picobot.channels.wechat.poller import wechat_channels
    from picobot.config.loader import load_config
    from tests.stack import API_KEY, base_config

    cfg = base_config("http://127.0.0.1:9", 19999)
    cfg["channels"] = {"wechat": {"type": "wechat", "enabled": True}, "wx2": {"type": "wechat", "enabled": True},
                       "off": {"type": "wechat", "enabled": False}}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    config = load_config(home=tmp_path, environ={"PICOBOT_TEST_KEY": API_KEY}, cwd=tmp_path)
    assert wechat_channels(config) == ["wechat", "wx2"]


def test_procfile_and_compose_run_picobot_wechat() -> None:
    import shlex

    import yaml

    root = Path(__file__).resolve().parent.parent
    lines = dict(line.split(":", 1) for line in (root / "Procfile").read_text().splitlines() if ":" in line)
    assert shlex.split(lines["wechat"]) == ["picobot", "wechat"]  # = picobot run channels:wechat:wechat
    service = yaml.safe_load((root / "docker-compose.yml").read_text())["services"]["wechat"]
    assert service["command"] == ["picobot", "wechat"] and service["profiles"] == ["wechat"]
