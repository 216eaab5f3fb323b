"""LLM providers: a registry of provider types and `build_provider(key, cfg)`.

Built-in types are registered here; a plugin's type (`picobot_providers`) is an adapter that build_provider
is handed by the caller (picobot.providers never imports the plugins) and wraps in an AdaptedProvider.

Importing this package does not import the openai or anthropic SDKs; a provider imports
its SDK when it is constructed, so processes that never call an LLM stay small.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from picobot.errors import ConfigError
from picobot.providers.adapted import AdaptedProvider, AdapterType, ProviderAdapter, Report
from picobot.providers.anthropic_provider import AnthropicProvider
from picobot.providers.base import Provider
from picobot.providers.openai_provider import OpenAIProvider


class ProviderConfig(Protocol):
    """What build_provider reads from a provider's config entry."""

    # read-only: the config's own fields may be narrower (type is a Literal there)
    @property
    def type(self) -> str: ...
    @property
    def base_url(self) -> str | None: ...
    @property
    def api_key(self) -> str | None: ...
    @property
    def extra_headers(self) -> dict[str, str]: ...
    @property
    def llm_timeout_secs(self) -> float: ...
    @property
    def max_retries(self) -> int: ...


class ProviderType(Protocol):
    """A provider class as registered: it builds its provider from a config entry."""

    def from_config(self, key: str, cfg: ProviderConfig) -> Provider: ...


PROVIDER_TYPES: dict[str, ProviderType] = {}


def register_provider_type(name: str, cls: ProviderType) -> None:
    """Make `cls` (with a `from_config(key, cfg)` classmethod) available as provider type `name`."""
    if not callable(getattr(cls, "from_config", None)):
        raise TypeError(f"provider type {name!r}: {getattr(cls, '__name__', cls)} has no from_config(key, cfg)")
    PROVIDER_TYPES[name] = cls


def check_provider(key: str, cfg: ProviderConfig, adapters: Mapping[str, AdapterType] | None = None) -> None:
    """ConfigError when `providers.<key>` names no known type (built in, or a plugin's from `adapters`), or a
    plugin's type without a base_url."""
    adapters = adapters or {}
    if cfg.type in PROVIDER_TYPES:
        return
    spec = adapters.get(cfg.type)
    if spec is None:
        known = ", ".join(sorted({*PROVIDER_TYPES, *adapters}))
        raise ConfigError(f"providers.{key}.type", f"unknown provider type {cfg.type!r} (known: {known}; "
                          "other types come from plugins)")
    if not cfg.base_url:
        raise ConfigError(f"providers.{key}.base_url", f"provider type {cfg.type!r} (plugin {spec.plugin}) "
                          "has no default endpoint: set base_url")


def build_provider(key: str, cfg: ProviderConfig, adapters: Mapping[str, AdapterType] | None = None,
                   report: Report | None = None) -> Provider:
    """The provider for config entry `key`; ConfigError for an unknown type. `adapters`: the plugins'
    provider types by name (PluginHost.provider_adapters()); `report(plugin, hook, problem)` hears of
    their faults."""
    check_provider(key, cfg, adapters)
    cls = PROVIDER_TYPES.get(cfg.type)
    if cls is not None:
        return cls.from_config(key, cfg)
    return AdaptedProvider.from_config(key, cfg, (adapters or {})[cfg.type], report)


register_provider_type("openai", OpenAIProvider)
register_provider_type("anthropic", AnthropicProvider)

__all__ = ["PROVIDER_TYPES", "AdapterType", "ProviderAdapter", "ProviderConfig", "build_provider", "check_provider",
           "register_provider_type"]
