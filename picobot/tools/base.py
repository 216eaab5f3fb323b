"""Tools: name, description, JSON schema, execute. Plus the narrow context they run in."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Protocol

from picobot.domain.cancel import CancelToken, TurnGate


class SendMessage(Protocol):
    def __call__(self, text: str, *, channel: str | None = None, chat_id: str | None = None) -> str:
        """Deliver text to a chat (default: the current one); returns a short receipt."""
        ...


@dataclass(frozen=True)
class RunningAgent:
    """What a tool call may know of the loop running it (typed loosely: tools do not import the agent)."""

    provider: Any  # picobot.providers.base.Provider
    tools: Any  # picobot.tools.registry.ToolRegistry
    settings: Any  # picobot.agent.loop.LoopSettings
    events: Any  # picobot.agent.snapshot.TurnController
    hooks: Any = None  # picobot.plugins.PluginHost: the stage hooks a sub-agent's calls go through too
    stage: Any = None  # picobot.plugins.types.StageContext the hooks see (a sub-agent's calls are charged to it)


@dataclass
class ToolContext:
    session_id: str
    channel: str
    chat_id: str
    sender_id: str
    turn_id: str
    workspace: Path
    cancel: CancelToken = field(default_factory=CancelToken)
    timezone: str = "UTC"
    send_message: SendMessage | None = None
    # Tool settings from config `tools` (bash timeout, output caps, http limits...).
    settings: dict[str, Any] = field(default_factory=dict)
    # Secret values (API keys, tokens) to scrub from every tool result before the model sees it.
    secrets: frozenset[str] = frozenset()
    # The inbound sequence number of the user message this turn answers: the source of what tools record.
    inbound_seq: int | None = None
    # The agent loop running this call (its provider, tools, settings, snapshot), set by that loop:
    # a delegating tool (`task`) builds a sub-agent from it. See RunningAgent.
    agent: RunningAgent | None = None
    # The agent this call runs for (config `agents.<name>` or an agent file) and its allowlists:
    # `delegates` = agents `task` may hand work to, `skills` = skills it may load (None = no limit).
    agent_name: str = "default"
    delegates: tuple[str, ...] | None = None
    skills: tuple[str, ...] | None = None
    # Side effects (file writes, messages) pass this gate: none starts once the turn is over.
    gate: TurnGate = field(init=False, repr=False)

    def __post_init__(self) -> None:
        self.gate = TurnGate(self.cancel)


class Tool:
    """Base class for tools. Subclasses set name/description/parameters and execute()."""

    name: str = ""
    # Sent with every model call: say what the schema cannot (rules, pitfalls), not types or enums.
    description: str = ""
    parameters: dict[str, Any] = {"type": "object", "properties": {}}
    # True for tools that change nothing: they run in parallel even on the same file.
    read_only: bool = False
    # True for tools only a dialog's own agent gets: a sub-agent is never offered them (the dialog's plan).
    main_agent_only: bool = False

    def footprint(self, args: dict[str, Any], ctx: ToolContext) -> frozenset[str]:
        """What this call touches (e.g. resolved file paths); calls sharing one, unless all
        read-only, run in request order. Empty means it conflicts with nothing."""
        return frozenset()

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        """Run the tool. Raise picobot.errors.ToolError with text the model can act on."""
        raise NotImplementedError


@dataclass(frozen=True)
class ToolOutput:
    """A result with images (a browser screenshot): the model sees them after the text, and the
    turn's final reply carries them as attachments. `images` are absolute paths of PNG/JPEG files."""

    text: str
    images: tuple[str, ...] = ()


@dataclass
class ToolResult:
    content: str
    is_error: bool = False
    images: tuple[str, ...] = ()  # from a ToolOutput: image files for the model and the final reply


ToolFactory = Callable[[], Tool]
