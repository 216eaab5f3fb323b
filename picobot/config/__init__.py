"""PicoBot configuration: the schema of config.json, its loader, and secret masking.

Names are imported on first use (PEP 562), so `picobot.config.client` and `picobot.config.home`
can be used without importing pydantic and the schema.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_LOADER = ("CONFIG_FILE", "apply_dotenv", "find_config_file", "format_key_path", "load_config", "load_dotenv_layers")
_SCHEMA = ("AgentConfig", "AtSchedule", "ChannelConfig", "Config", "CronSchedule", "DelaySchedule", "GatewayConfig",
           "IntervalSchedule", "JobConfig", "JobTarget", "McpServerConfig", "ModelConfig", "ProviderConfig",
           "ResolvedAgent", "SchedulerConfig", "SkillsConfig", "SubagentsConfig", "TimeConfig", "ToolsConfig",
           "check_cron")
_SECRETS = ("MASK", "is_secret_key", "mask_text", "masked", "redact", "secret_values")
_HOME = ("picobot_home",)
_WHERE = {name: f"picobot.config.{module}" for module, names in
          (("loader", _LOADER), ("schema", _SCHEMA), ("secrets", _SECRETS), ("home", _HOME)) for name in names}

__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(_WHERE[name]), name)
    globals()[name] = value  # once found, a plain module attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))


if TYPE_CHECKING:
    from picobot.config.home import picobot_home
    from picobot.config.loader import (
        CONFIG_FILE,
        apply_dotenv,
        find_config_file,
        format_key_path,
        load_config,
        load_dotenv_layers,
    )
    from picobot.config.schema import (
        AgentConfig,
        AtSchedule,
        ChannelConfig,
        Config,
        CronSchedule,
        DelaySchedule,
        GatewayConfig,
        IntervalSchedule,
        JobConfig,
        JobTarget,
        McpServerConfig,
        ModelConfig,
        ProviderConfig,
        ResolvedAgent,
        SchedulerConfig,
        SkillsConfig,
        SubagentsConfig,
        TimeConfig,
        ToolsConfig,
        check_cron,
    )
    from picobot.config.secrets import MASK, is_secret_key, mask_text, masked, redact, secret_values
