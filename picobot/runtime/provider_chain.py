"""The provider an agent's turn calls: its own, or a fallback chain when `fallback` is set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from picobot.config.schema import ResolvedAgent
from picobot.errors import ConfigError
from picobot.providers.base import Provider
from picobot.providers.fallback import BreakerSettings, ChainEntry, CircuitBreakers, FallbackProvider

if TYPE_CHECKING:
    from picobot.runtime.services import Runtime


def breakers(rt: "Runtime") -> CircuitBreakers:
    """The circuit breakers of every configured provider, kept in Redis (shared by all processes)."""
    def settings(key: str) -> BreakerSettings:
        cfg = rt.config.providers.get(key)
        return BreakerSettings() if cfg is None else BreakerSettings(cfg.breaker_failures, cfg.breaker_cooldown_secs)

    return CircuitBreakers(rt.redis, settings)


def agent_provider(rt: "Runtime", resolved: ResolvedAgent) -> Provider:
    """The agent's provider; with `agents.<name>.fallback`, a chain that starts with it. ConfigError if unknown."""
    primary = rt.provider(resolved.provider_key)
    if not resolved.agent.fallback:
        return primary
    m = resolved.model
    chain = [ChainEntry(f"{resolved.provider_key}:{resolved.agent.model}", primary, m.model_id, m.temperature,
                        m.max_tokens, dict(m.options))]
    for i, label in enumerate(resolved.agent.fallback):
        provider_key, _, model_key = label.partition(":")
        model = rt.config.models.get(model_key)
        if model is None:
            raise ConfigError(f"agents.{resolved.name}.fallback[{i}]", f"unknown model {model_key!r}")
        chain.append(ChainEntry(label, rt.provider(provider_key), model.model_id, model.temperature,
                                model.max_tokens, dict(model.options)))
    return FallbackProvider(chain, breakers(rt))
