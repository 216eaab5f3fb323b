"""TelegramConfig: the keys of a `channels.<key>` section with `"type": "telegram"`.

Checked at start through the channels plugin's `picobot_config_check` (see `check_channel`), so a
typo or a missing token fails with its key path. `token` and `webhook_secret` are secrets by name:
masked wherever the config is printed and collected for redaction.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from picobot.security.redact import masked_value

MB = 1024 * 1024
_TOKEN = re.compile(r"\d{1,20}:[A-Za-z0-9_-]{1,200}")
_SECRET = re.compile(r"[A-Za-z0-9_-]{1,256}")  # what Telegram allows in secret_token


class TelegramConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    type: str = "telegram"
    enabled: bool = False
    allow_from: list[str] = Field(default_factory=lambda: ["*"])  # Telegram user ids, as strings
    agent: str = "default"

    token: str = Field(default="", repr=False)  # from @BotFather: "123456:ABC-DEF…"
    base_url: str = "https://api.telegram.org"  # or a self-hosted telegram-bot-api server, or a fake
    mode: Literal["polling", "webhook"] = "polling"
    webhook_url: str = ""  # the public https URL Telegram posts to (ends with webhook_path)
    webhook_path: str = ""  # default /telegram/<channel key>
    webhook_secret: str = Field(default="", repr=False)  # checked against X-Telegram-Bot-Api-Secret-Token
    group_policy: Literal["mention", "open", "disabled"] = "mention"
    live_updates: bool = False  # one message edited while the turn runs, then replaced by the answer
    reaction_emoji: str = ""  # e.g. "👀" on the user's message while the turn runs ("" = none)
    poll_timeout_secs: int = Field(default=25, ge=0, le=50)  # getUpdates long-poll timeout
    media_dir: str | None = None  # default <home>/media/<channel key>
    max_download_bytes: int = Field(default=20 * MB, gt=0, le=20 * MB)  # the cloud Bot API serves ≤ 20 MB
    reply_context_max_chars: int = Field(default=500, ge=0, le=10_000)
    set_commands: bool = True  # setMyCommands with PicoBot's commands when the poller / web starts

    @field_validator("token")
    @classmethod
    def _token(cls, value: str) -> str:
        if value and not _TOKEN.fullmatch(value):
            raise ValueError("is not a bot token (the form is 123456789:AAE…, from @BotFather)")
        return value

    @field_validator("base_url", "webhook_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL")
        return value.rstrip("/")

    @field_validator("webhook_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if value and (not value.startswith("/") or len(value) > 200 or any(c.isspace() or c in "?#<>" for c in value)):
            raise ValueError("must be a URL path such as /telegram/bot")
        return value

    @field_validator("webhook_secret")
    @classmethod
    def _secret(cls, value: str) -> str:
        if value and not _SECRET.fullmatch(value):
            raise ValueError("may hold only A-Z, a-z, 0-9, _ and - (1 to 256 characters), as Telegram requires")
        return value

    @field_validator("poll_timeout_secs", "max_download_bytes", "reply_context_max_chars", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):
            raise ValueError("must be a whole number, not true/false")
        return value

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)

    @classmethod
    def from_channel(cls, channel: Any) -> TelegramConfig:
        return cls.model_validate(channel.model_dump())

    def path_for(self, key: str) -> str:
        """The webhook's path in the web process."""
        return self.webhook_path or f"/telegram/{key}"

    def media_path(self, home: Path, key: str) -> Path:
        path = Path(self.media_dir).expanduser() if self.media_dir else Path("media") / key
        return path if path.is_absolute() else home / path

    def problems(self) -> list[tuple[str, str]]:
        """(key, reason) for settings valid one by one that do not work together."""
        if not self.enabled:
            return []
        found = []
        if not self.token:
            found.append(("token", "is required when the channel is enabled (ask @BotFather for one)"))
        if self.mode == "webhook":
            if not self.webhook_secret:
                found.append(("webhook_secret", "webhook mode needs a secret, or anyone could post updates"))
            if not self.webhook_url:
                found.append(("webhook_url", "webhook mode needs the public https URL Telegram should call"))
        return found


def check_channel(key: str, data: dict[str, Any]) -> TelegramConfig:
    """Validate `channels.<key>`; ConfigError names the key path of the first problem."""
    from picobot.channels.config_check import check_section

    return check_section(TelegramConfig, key, data)
