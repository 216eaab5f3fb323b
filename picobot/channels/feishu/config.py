"""FeishuConfig: the keys of `channels.feishu`, validated when config.json is loaded.

`ChannelConfig` accepts any key (each channel brings its own); `Config` validates a
Feishu channel's section with this model at load time (see `check_channel` and
picobot/config/schema.py), so a typo fails at start with its key path. The secrets
(app_secret, verification_token, encrypt_key) are masked by their key names wherever
the config is printed or logged, and collected into `Runtime.secrets` for redaction.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from picobot.security.redact import masked_value

MB = 1024 * 1024


class FeishuConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    # the keys every channel has (picobot.config.schema.ChannelConfig)
    type: str = "feishu"
    enabled: bool = False
    allow_from: list[str] = Field(default_factory=lambda: ["*"])
    agent: str = "default"

    app_id: str = ""
    app_secret: str = Field(default="", repr=False)
    mode: Literal["webhook", "long_connection"] = "webhook"
    verification_token: str = Field(default="", repr=False)
    encrypt_key: str = Field(default="", repr=False)
    domain: str = "https://open.feishu.cn"  # https://open.larksuite.com for Lark; any server speaking Feishu's API
    webhook_path: str = "/feishu/events"
    signature_max_age_secs: int = Field(default=300, gt=0, le=86_400)
    group_policy: Literal["mention", "all", "disabled"] = "mention"
    media_dir: str | None = None  # default <home>/media/feishu; relative paths are relative to the home
    max_download_bytes: int = Field(default=20 * MB, gt=0, le=100 * MB)  # one image or file
    reaction_emoji: str = "Typing"  # "" = no reaction while a turn runs
    max_message_chars: int = Field(default=4000, ge=100, le=100_000)
    reply_context_max_chars: int = Field(default=500, ge=0, le=10_000)
    live_updates: bool = False

    @field_validator("domain")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError("must be an http:// or https:// URL, e.g. https://open.feishu.cn")
        return value.rstrip("/")

    @field_validator("webhook_path")
    @classmethod
    def _path(cls, value: str) -> str:
        if not value.startswith("/") or len(value) > 200 or any(c.isspace() or c in "?#<>" for c in value):
            raise ValueError("must be a URL path such as /feishu/events")
        return value

    @field_validator("signature_max_age_secs", "max_message_chars", "reply_context_max_chars",
                     "max_download_bytes", mode="before")
    @classmethod
    def _not_bool(cls, value: Any) -> Any:
        if isinstance(value, bool):  # pydantic would read true as 1
            raise ValueError("must be a whole number, not true/false")
        return value

    def __repr_args__(self) -> Iterator[tuple[str | None, Any]]:
        for name, value in super().__repr_args__():
            yield name, masked_value(name or "", value)

    @classmethod
    def from_channel(cls, channel: Any) -> FeishuConfig:
        """The Feishu view of a `ChannelConfig` (already validated at load)."""
        return cls.model_validate(channel.model_dump())

    def media_path(self, home: Path) -> Path:
        path = Path(self.media_dir).expanduser() if self.media_dir else Path("media") / "feishu"
        return path if path.is_absolute() else home / path

    def problems(self) -> list[tuple[str, str]]:
        """(key, reason) for settings that are each valid but do not work together."""
        if not self.enabled:
            return []
        found = [(key, "is required when the channel is enabled") for key in ("app_id", "app_secret")
                 if not getattr(self, key)]
        if self.mode == "webhook" and not (self.verification_token or self.encrypt_key):
            found.append(("verification_token", "webhook mode needs verification_token or encrypt_key "
                                                "(from the app's Events and Callbacks page), or anyone could post events"))
        return found


def check_channel(key: str, data: dict[str, Any]) -> FeishuConfig:
    """Validate `channels.<key>`; ConfigError names the key path of the first problem."""
    from picobot.channels.config_check import check_section

    return check_section(FeishuConfig, key, data)
