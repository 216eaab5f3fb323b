"""The provider an agent's turn calls: its own (or the dialog's chosen one), or a fallback chain when `fallback` is set."""

from __future__ import annotations

from typing import TYPE_CHECKING

from picobot.config.model_refs import ModelChoice, unique
from picobot.config.schema import ModelConfig, ResolvedAgent
from picobot.providers.base import Provider
from picobot.providers.fallback import BreakerSettings, ChainEntry, CircuitBreakers, FallbackProvider

if TYPE_CHECKING:
    from picobot.runtime.ports import AgentPorts


def breakers(rt: "AgentPorts") -> CircuitBreakers:
    """The circuit breakers of every configured provider, kept in Redis (shared by all processes)."""
    def settings(key: str) -> BreakerSettings:
        cfg = rt.config.providers.get(key)
        return BreakerSettings() if cfg is None else BreakerSettings(cfg.breaker_failures, cfg.breaker_cooldown_secs)

    return CircuitBreakers(rt.redis, settings)


def agent_provider(rt: "AgentPorts", resolved: ResolvedAgent) -> Provider:
    """The provider a turn calls: the agent's model (or its dialog's `/model` choice), then its `fallback`.

    Without fallback entries other than that first pair it is the plain provider; each pair is tried once.
    ConfigError if a provider is unknown.
    """
    first = ModelChoice(resolved.provider_key, resolved.model_key or resolved.agent.model)
    rest = [c for c in unique(rt.config.fallback_choices(resolved.name)) if c != first]
    primary = rt.provider(resolved.provider_key)
    if not rest:
        return primary
    chain = [_entry(first, primary, resolved.model)]
    chain += [_entry(c, rt.provider(c.provider), rt.config.models[c.model]) for c in rest]
    return FallbackProvider(chain, breakers(rt))


def _entry(choice: ModelChoice, provider: Provider, m: ModelConfig) -> ChainEntry:
    return ChainEntry(choice.ref, provider, m.model_id, m.temperature, m.max_tokens, dict(m.options))
