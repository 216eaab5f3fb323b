"""WeChatConfig: the keys of a `"type": "wechat"` channel (seed 000 §13.1), validated when config.json loads.

The bot token never lives in config.json: `picobot channels login <key>` scans a QR code and keeps
the credentials in `cred_path` (mode 600), next to nothing else; the poll cursor and the users'
context tokens are in SQL (`channel_state`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

MB = 1024 * 1024


class WeChatConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    type: str = "wechat"
    enabled: bool = False
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    agent: str = "default"

    base_url: str = "https://ilinkai.weixin.qq.com"
    cdn_base_url: str = "https://novac2c.cdn.weixin.qq.com/c2c"
    cred_path: str = "~/.picobot/wechat/credentials.json"  # "~/.picobot" is the PicoBot home
    force_login: bool = False  # `picobot channels login` discards the saved login and cursor every time
    # "<channel>:<chat_id>" of another configured channel: told when the WeChat login expires (-14)
    owner_chat: str = ""
    max_message_chars: int = Field(default=2000, ge=100, le=4000)
    media_dir: str | None = None  # default <home>/media/<channel key>
    max_download_bytes: int = Field(default=20 * MB, gt=0, le=100 * MB)
    poll_timeout_secs: int = Field(default=35, ge=1, le=60)  # how long iLink may hold one getupdates

    @field_validator("base_url", "cdn_base_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("owner_chat")
    @classmethod
    def _chat(cls, value: str) -> str:
        if value and (":" not in value or not all(value.partition(":")[::2])):
            raise ValueError('must be "<channel>:<chat_id>", e.g. "feishu:oc_123"')
        return value

    @field_validator("max_message_chars", "max_download_bytes", "poll_timeout_secs", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a whole number, not true/false")
        return value

    @classmethod
    def from_channel(cls, channel: Any) -> WeChatConfig:
        return cls.model_validate(channel.model_dump())

    def credentials_path(self, home: Path) -> Path:
        """`cred_path` with "~/.picobot" meaning the PicoBot home; relative paths are relative to the home."""
        raw = self.cred_path
        if raw == "~/.picobot" or raw.startswith("~/.picobot/"):
            return home / raw[len("~/.picobot/"):] if raw != "~/.picobot" else home
        path = Path(raw).expanduser()
        return path if path.is_absolute() else home / path

    def media_path(self, home: Path, key: str) -> Path:
        path = Path(self.media_dir).expanduser() if self.media_dir else Path("media") / key
        return path if path.is_absolute() else home / path


def check_channel(key: str, data: dict[str, Any]) -> WeChatConfig:
    """Validate `channels.<key>`; ConfigError names the key path of the first problem."""
    from picobot.channels.config_check import check_section

    return check_section(WeChatConfig, key, data)
