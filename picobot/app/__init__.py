"""The composition root: builds a process's parts and registers the built-in capabilities as plugins.

Imported only by the edges (cli/, web/, worker/) and tests. The core (runtime/, agent/, gateway/)
knows no capability: it calls hooks, and the capabilities below answer them exactly as a
third-party plugin would (docs/PLUGINS.md).

    rt = build_runtime(config, queue, migrate=True)   # an App: the core's Runtime + the capabilities
"""

from __future__ import annotations

from functools import cached_property
from typing import TYPE_CHECKING, Any

from picobot.config import Config
from picobot.errors import ConfigError
from picobot.plugins import PluginHost
from picobot.runtime.ports import TaskQueue
from picobot.runtime.services import Runtime, open_parts

if TYPE_CHECKING:
    from picobot.channels.registry import ChannelRegistry
    from picobot.memory import MemoryStore
    from picobot.memory.knowledge import KnowledgeBase
    from picobot.skills import SkillCatalog

__all__ = ["App", "build_plugins", "build_runtime", "channel_types", "check_config"]


def builtin_plugins(config: Config) -> list[tuple[str, Any]]:
    """The capabilities PicoBot ships, as (name, plugin); the shipped optional plugins when enabled."""
    from picobot.browser.plugin import BrowserPlugin
    from picobot.budgets.plugin import BudgetsPlugin
    from picobot.channels.plugin import ChannelsPlugin
    from picobot.delegates.plugin import DelegatesPlugin
    from picobot.mcp.plugin import McpPlugin
    from picobot.plans.plugin import PlansPlugin
    from picobot.memory.plugin import MemoryPlugin
    from picobot.scheduler.plugin import SchedulerPlugin
    from picobot.skills.plugin import SkillsPlugin
    from picobot.subagents.plugin import SubagentsPlugin
    from picobot.titles.plugin import TitlesPlugin
    from picobot.voice.plugin import VoicePlugin
    from picobot.webhooks.plugin import WebhooksPlugin

    plugins: list[tuple[str, Any]] = [
        ("channels", ChannelsPlugin()), ("memory", MemoryPlugin()), ("skills", SkillsPlugin()),
        ("subagents", SubagentsPlugin()), ("scheduler", SchedulerPlugin()), ("mcp", McpPlugin()),
        ("webhooks", WebhooksPlugin()), ("titles", TitlesPlugin()), ("budgets", BudgetsPlugin()),
        ("delegates", DelegatesPlugin()),
        ("plans", PlansPlugin()),
        ("voice", VoicePlugin()),
        ("browser", BrowserPlugin()),
    ]
    from picobot.observability.plugin import observability_plugins

    return plugins + _shipped(config) + observability_plugins(config)  # metrics, tracing: when switched on


def _shipped(config: Config) -> list[tuple[str, Any]]:
    """The plugins that ship with PicoBot but are off by default (`plugins.audit_log`, `tool_policy`, `tools.approval`)."""
    found: list[tuple[str, Any]] = []
    if config.plugins.audit_log.enabled:
        from picobot.contrib.audit_log import AuditLogPlugin

        found.append(("audit_log", AuditLogPlugin(config)))
    if config.tools.approval.mode != "off":  # off: no hook at all, today's behaviour exactly
        from picobot.approvals.plugin import ApprovalsPlugin

        found.append(("approvals", ApprovalsPlugin(config)))
    if config.plugins.tool_policy.enabled:
        from picobot.contrib.tool_policy import ToolPolicyPlugin

        found.append(("tool_policy", ToolPolicyPlugin(config)))
    return found


def build_plugins(config: Config, discover: bool = True) -> PluginHost:
    """The plugin host of a process: the built-ins, then what is installed (entry points, home plugins)."""
    return PluginHost(config, builtins=builtin_plugins(config), discover=discover)


def check_config(config: Config, plugins: PluginHost | None = None) -> None:
    """Raise ConfigError for the first problem a plugin finds in its part of the config (a channel's keys), or a
    provider whose type neither PicoBot nor a plugin brings."""
    from picobot.providers import check_provider
    from picobot.runtime.plugin_ports import settings_problems

    plugins = plugins or build_plugins(config, discover=False)
    for key_path, reason in [*plugins.config_problems(config), *settings_problems(config, plugins)]:
        raise ConfigError(key_path, reason)
    adapters = plugins.provider_adapters()
    for key, provider in config.providers.items():
        check_provider(key, provider, adapters)


def channel_types(config: Config) -> frozenset[str]:
    """The channel types the plugins offer (for `picobot config`'s warnings)."""
    return frozenset(build_plugins(config).channels(config))


class App(Runtime):
    """The core's Runtime plus what the edges (web pages, CLI, tasks) reach of the capabilities."""

    def _plugin(self, name: str) -> Any:
        return self.plugins.plugin(name)

    @cached_property
    def channels(self) -> "ChannelRegistry":
        """The adapters of the configured channels, built lazily."""
        return self._plugin("channels").registry(self)

    @property
    def memory(self) -> "MemoryStore | None":
        return self._plugin("memory").store(self)

    @property
    def knowledge(self) -> "KnowledgeBase | None":
        return self._plugin("memory").knowledge(self)

    @property
    def skills(self) -> "SkillCatalog | None":
        return self._plugin("skills").catalog(self)

    def inject_input(self, channel: str, chat_id: str, sender_id: str, content: Any, key: str | None = None,
                     mode: str = "steer") -> dict[str, Any]:
        """Input a plugin brings from outside (a timer, a sensor, another bot) into a chat, as if its sender had
        written it: allow_from, the content checks, rate limits and commands apply; `key` dedupes a redelivery.
        The gateway's answer as a frame (accepted with its fate, rejected with why, or a command's reply)."""
        from picobot.domain.channel import InboundMessage
        from picobot.gateway.intake import Gateway

        if mode not in ("steer", "queue"):
            raise ValueError("mode is steer or queue")
        msg = InboundMessage(channel=channel, chat_id=chat_id, sender_id=sender_id, content=content,
                             platform_message_id=key, mode=mode)
        return Gateway(self).submit(msg).to_frame()

    def mcp_statuses(self) -> list[dict[str, Any]]:
        """State of each MCP server in this process (empty until the tools were built)."""
        return self._plugin("mcp").statuses()


def build_runtime(config: Config, queue: TaskQueue, migrate: bool = False, discover: bool = True,
                  plugins: PluginHost | None = None) -> App:
    """A process's runtime: database (migrated when asked), Redis, the task queue and the plugins (`plugins`:
    the process's host when it was built already, e.g. to register the plugins' Celery tasks)."""
    plugins = plugins or build_plugins(config, discover=discover)
    check_config(config, plugins)
    db, redis_client = open_parts(config, migrate)
    app = App(config=config, db=db, redis=redis_client, queue=queue, plugins=plugins)
    plugins.plugin("budgets").bind(app)  # its gate and ledger need the ports before any tool registry exists
    return app
