"""Model names are agents: `picobot` (or `default`) is the default agent, any other name its agent."""

from __future__ import annotations

from typing import Any

from picobot.config.schema import Config

DEFAULT_MODEL = "picobot"
DEFAULT_AGENT = "default"
OWNER = "picobot"


def agent_of(config: Config, model: str) -> str | None:
    """The agent a model name picks, or None when no agent has that name."""
    if model in (DEFAULT_MODEL, DEFAULT_AGENT):
        return DEFAULT_AGENT
    return model if model in config.agent_names() else None


def model_of(agent: str) -> str:
    return DEFAULT_MODEL if agent == DEFAULT_AGENT else agent


def model_object(agent: str, created: int) -> dict[str, Any]:
    return {"id": model_of(agent), "object": "model", "created": created, "owned_by": OWNER}


def model_list(config: Config, only: str | None, created: int) -> dict[str, Any]:
    """GET /v1/models: every agent, or only `only` (the agent an API key is scoped to)."""
    agents = [a for a in config.agent_names() if only is None or a == only]
    return {"object": "list", "data": [model_object(a, created) for a in agents]}
