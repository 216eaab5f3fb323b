"""LLM providers: a registry of provider types and `build_provider(key, cfg)`.

Importing this package does not import the openai or anthropic SDKs; a provider imports
its SDK when it is constructed, so processes that never call an LLM stay small.
"""

from __future__ import annotations

from typing import Protocol

from picobot.errors import ConfigError
from picobot.providers.anthropic_provider import AnthropicProvider
from picobot.providers.base import Provider
from picobot.providers.openai_provider import OpenAIProvider


class ProviderConfig(Protocol):
    """What build_provider reads from a provider's config entry."""

    type: str
    base_url: str | None
    api_key: str | None
    extra_headers: dict[str, str]
    llm_timeout_secs: float
    max_retries: int


PROVIDER_TYPES: dict[str, type] = {}


def register_provider_type(name: str, cls: type) -> None:
    """Make `cls` (with a `from_config(key, cfg)` classmethod) available as provider type `name`."""
    if not callable(getattr(cls, "from_config", None)):
        raise TypeError(f"provider type {name!r}: {cls.__name__} has no from_config(key, cfg)")
    PROVIDER_TYPES[name] = cls


def build_provider(key: str, cfg: ProviderConfig) -> Provider:
    """The provider for config entry `key`; ConfigError for an unknown type."""
    cls = PROVIDER_TYPES.get(cfg.type)
    if cls is None:
        known = ", ".join(sorted(PROVIDER_TYPES))
        raise ConfigError(f"providers.{key}.type", f"unknown provider type {cfg.type!r} (known: {known})")
    provider: Provider = cls.from_config(key, cfg)  # type: ignore[attr-defined]
    return provider


register_provider_type("openai", OpenAIProvider)
register_provider_type("anthropic", AnthropicProvider)

__all__ = ["PROVIDER_TYPES", "ProviderConfig", "build_provider", "register_provider_type"]
