"""`picobot_config_check`: each bad key of a QQ channel is named by its path."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from picobot_qq import picobot_config_check
from picobot_qq.config import QQSettings, channel_problems, forward_channels


def paths(raw: dict[str, Any], key: str = "qq") -> list[str]:
    return [path for path, _why in channel_problems(key, raw)]


def test_good_channels_have_no_problems() -> None:
    assert paths({"type": "qq", "ws_url": "ws://127.0.0.1:3001", "access_token": "t", "allow_from": ["12345678"]}) == []
    assert paths({"type": "qq", "ws_url": "wss://napcat.example/ws"}) == []
    assert paths({"type": "qq", "reverse_path": "/qq/ws/qq", "access_token": "t", "allow_from": ["*"]}) == []
    assert paths({"type": "qq", "http_url": "http://127.0.0.1:3000", "secret": "s"}) == []


@pytest.mark.parametrize("raw, where", [
    ({"type": "qq"}, "channels.qq"),
    ({"type": "qq", "ws_url": "ws://a", "http_url": "http://b"}, "channels.qq"),
    ({"type": "qq", "ws_url": "http://127.0.0.1:3001"}, "channels.qq.ws_url"),
    ({"type": "qq", "ws_url": "ws://"}, "channels.qq.ws_url"),
    ({"type": "qq", "ws_url": "ws://[::1"}, "channels.qq.ws_url"),
    ({"type": "qq", "http_url": "ftp://x"}, "channels.qq.http_url"),
    ({"type": "qq", "ws_url": "ws://a", "access_token": 123}, "channels.qq.access_token"),
    ({"type": "qq", "ws_url": "ws://a", "allow_from": "12345678"}, "channels.qq.allow_from"),
    ({"type": "qq", "ws_url": "ws://a", "allow_from": [12345678]}, "channels.qq.allow_from[0]"),
    ({"type": "qq", "ws_url": "ws://a", "allow_from": ["alice"]}, "channels.qq.allow_from[0]"),
    ({"type": "qq", "reverse_path": "/onebot", "access_token": "t"}, "channels.qq.reverse_path"),
    ({"type": "qq", "reverse_path": "/qq/ws/qq"}, "channels.qq.access_token"),
])
def test_each_mistake_names_its_key(raw: dict[str, Any], where: str) -> None:
    assert where in paths(raw)


def test_the_hook_checks_only_qq_channels() -> None:
    class Channel:
        def __init__(self, **raw: Any) -> None:
            self.raw, self.type, self.enabled = raw, raw.get("type", ""), raw.get("enabled", False)
            self.model_extra = {k: v for k, v in raw.items() if k not in ("type", "enabled")}

        def model_dump(self) -> dict[str, Any]:
            return self.raw

    config = type("Config", (), {"channels": {
        "tg": Channel(type="telegram", ws_url=5), "qq": Channel(type="qq", enabled=True, ws_url="http://x"),
        "qq2": Channel(type="qq", enabled=True, ws_url="ws://127.0.0.1:1"),
        "qq3": Channel(type="qq", enabled=False, ws_url="ws://127.0.0.1:1"),
        "qq4": Channel(type="qq", enabled=True, http_url="http://127.0.0.1:1")}})()
    assert [p for p, _ in picobot_config_check(config)] == ["channels.qq.ws_url"]
    assert forward_channels(config) == ["qq", "qq2"]


def test_settings_have_bounds() -> None:
    assert QQSettings().max_message_chars == 4500
    with pytest.raises(ValidationError):
        QQSettings(api_timeout_secs=0)
