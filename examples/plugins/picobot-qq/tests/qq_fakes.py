"""A stand-in for the SDK's PluginPorts (what the package uses of it) and a one-pixel PNG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from picobot_qq.config import QQSettings

PNG = (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x00\x01\x00\x00\x00\x01\x08\x06\x00\x00\x00\x1f\x15\xc4\x89"
       b"\x00\x00\x00\rIDATx\x9cc\xf8\x0f\x00\x00\x01\x01\x00\x05\x18\xd8N\x00\x00\x00\x00IEND\xaeB`\x82")


class Ports:
    """What the package uses of `PluginPorts`, over a real Redis; events and fetches are kept for the test."""

    def __init__(self, r: Any, channels: dict[str, dict[str, Any]], home: Path, workspace: Path) -> None:
        self.redis, self._channels = r, channels
        self.events: dict[tuple[str, str], dict[str, Any]] = {}
        self.files: dict[str, bytes] = {}
        self.config = type("Config", (), {"home": home, "workspace_path": lambda _self: workspace,
                                           "channels": channels})()

    def settings(self, key: str) -> QQSettings:
        assert key == "qq"
        return QQSettings()

    def channel(self, key: str) -> dict[str, Any] | None:
        return self._channels.get(key)

    def record_event(self, channel: str, event_key: str, payload: dict[str, Any]) -> tuple[int, bool]:
        created = (channel, event_key) not in self.events
        self.events.setdefault((channel, event_key), payload)
        return len(self.events), created

    def fetch(self, url: str, max_bytes: int = 0) -> tuple[bytes, str]:
        if url not in self.files:
            raise ValueError("GET answered 404")
        if len(self.files[url]) > max_bytes:
            raise ValueError(f"the file is over {max_bytes} bytes")
        return self.files[url], "image/png"

    def redact(self, text: str) -> str:
        return text
