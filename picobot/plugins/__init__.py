"""The plugin SDK: hooks into every stage of a turn, tools, commands and channels.

    from picobot.plugins import Deny, hookimpl, tool

    @hookimpl
    def before_toolcall(ctx, call):
        if call.name == "bash" and "rm -rf" in call.arguments.get("command", ""):
            return Deny("no recursive deletes here")

    @tool
    def shout(text: str) -> str:
        \"\"\"The text in capitals.\"\"\"
        return text.upper()

    @hookimpl
    def picobot_tools():
        return [shout]

A channel from outside needs nothing else: `picobot_channels` gives its adapter type (`deliver` a
`Delivery`, `normalize` a stored event into `InboundMessage`s, `Capabilities`), `picobot_routes` its
webhook or reverse WebSocket, `picobot_processes` its long connection, `picobot_settings`,
`picobot_tasks` and `picobot_cli` the rest (docs/PLUGINS.md, "Write a channel"). A model API of another
shape needs a `ProviderAdapter` registered with `picobot_providers` (docs/PLUGINS.md, "Provider adapters").

The hooks are specified in picobot/plugins/hookspecs.py. The built-in capabilities (channels,
memory, skills, sub-agents, scheduler, MCP) are plugins on this same SDK, registered by the
composition root (picobot/app) on one PluginHost.
"""

from __future__ import annotations

import pluggy

from picobot.domain.channel import Capabilities, Delivery, DeliveryError, InboundMessage
from picobot.plugins.contributions import ContributionError, HttpRequest, HttpResponse
from picobot.plugins.decorator import tool
from picobot.plugins.hookspecs import hookspec
from picobot.plugins.manager import PluginHost
from picobot.providers.adapted import ProviderAdapter
from picobot.plugins.types import (AudioClip, argument_text, Command, Deny, InputMessage, ModelRequestView, ModelResponse, Refusal,
                                   StageContext, SubagentRunView, ToolCallView, Transcript, TurnView)
from picobot.tools.base import Tool, ToolContext

hookimpl = pluggy.HookimplMarker("picobot")

__all__ = [
    "Capabilities", "ContributionError", "Delivery", "DeliveryError", "HttpRequest", "HttpResponse", "InboundMessage",
    "AudioClip", "Command", "Deny", "InputMessage", "ModelRequestView", "ModelResponse", "PluginHost", "ProviderAdapter",
    "Refusal",
    "StageContext", "SubagentRunView", "Tool", "ToolCallView", "ToolContext", "Transcript", "TurnView", "hookimpl",
    "hookspec", "tool", "argument_text",
]
