"""Plain data the core hands to plugin hooks, and the values hooks may return.

Plugins read these; the core builds them. They are views, not the core's own objects: a plugin
that keeps one keeps a copy, and changing one changes nothing in the core.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class StageContext:
    """Who a turn is for; the first argument of every stage hook."""

    session_id: str
    channel: str
    chat_id: str
    sender_id: str
    turn_id: str
    agent: str = "default"
    input_ids: tuple[str, ...] = ()  # platform message ids of the turn's inputs ("job:…" for scheduled ones)
    run_id: str = ""  # a sub-agent run's id ("" for the dialog's own agent)
    # the turn's cancellation (`.cancelled`, `.wait(secs)`) for a hook that waits on a person (an approval);
    # None outside a running turn or sub-agent run
    cancel: Any = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class InputMessage:
    """The user's input of a turn (`on_input`)."""

    text: str
    content: Any = None  # the stored content: a string, or a list of content blocks (images)
    seq: int | None = None


@dataclass(frozen=True)
class ModelResponse:
    """One model response (`post_action`)."""

    text: str
    tool_calls: tuple["ToolCallView", ...] = ()
    input_tokens: int = 0
    output_tokens: int = 0


@dataclass(frozen=True)
class ToolCallView:
    """A tool call the model asked for (`before_toolcall`, `after_toolcall`)."""

    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class TurnView:
    """A turn's outcome (`after_output` and the lifecycle hooks)."""

    session_id: str
    turn_id: str
    channel: str
    chat_id: str
    sender_id: str
    agent: str
    status: str  # completed | cancelled | failed
    final_text: str
    error: str | None = None
    partial_text: str = ""  # a stopped turn: what it had streamed
    input_ids: tuple[str, ...] = ()  # platform message ids of the turn's inputs ("job:…" for scheduled ones)
    messages: tuple[Any, ...] = ()  # the turn's new ChatMessages, in true order
    history: tuple[Any, ...] = ()  # the stored history the turn started from
    committed: bool = True  # False: the turn was not stored (its input ended failed without it)
    spoken: bool = False  # the turn's input held a voice message (an `audio` block)


@dataclass(frozen=True)
class SubagentRunView:
    """A sub-agent run that started or ended (`picobot_subagent_run`)."""

    id: str
    session_id: str  # the dialog whose agent started it
    status: str  # queued | running | completed | failed | cancelled | interrupted
    subagent_type: str = ""
    description: str = ""
    text: str = ""  # when it ended: its result (completed) or what went wrong
    plan_item_id: int | None = None  # the dialog's plan item it works on (`task` plan_item_id)


@dataclass(frozen=True)
class Deny:
    """Returned by `before_toolcall`: the tool does not run; the model gets `reason` as its result."""

    reason: str = "denied by a plugin"


@dataclass(frozen=True)
class Command:
    """A slash command contributed by `picobot_commands`: `/name args` calls `handler(ctx, args)`.

    The handler returns the reply text, or {"text": ..., "data": {...}}. `ctx` is a `StageContext` (turn_id empty).
    """

    name: str
    description: str
    handler: Callable[[StageContext, str], str | dict[str, Any]]


AfterCommit = Callable[[], None]


@dataclass(frozen=True)
class ModelCallView:
    """One model call that ended (`picobot_model_call`): who answered, how fast, what it cost."""

    provider: str  # the config key of the provider (`providers.<key>`)
    model: str  # the model id sent in the request
    started_at: float  # epoch seconds
    duration_secs: float
    first_token_secs: float | None = None  # from the start to the first streamed event; None: none came
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0  # of input_tokens, read from the provider's prompt cache
    finish_reason: str = ""  # stop | tool_calls | length | … ("" when the call failed)
    error: str | None = None  # the error's type name when the call failed
    kind: str = "turn"  # turn | subagent | compaction | maintenance | title (a dialog's automatic title, outside any turn)


@dataclass(frozen=True)
class ModelRequestView:
    """A model call about to be sent (`picobot_model_call_gate`)."""

    provider: str  # the config key of the provider (the first of a fallback chain)
    model: str
    messages: tuple[Any, ...]  # the ChatMessages to send
    max_tokens: int | None = None
    tools_chars: int = 0  # characters of the tool schemas sent with it
    kind: str = "turn"  # turn | subagent | compaction


@dataclass(frozen=True)
class Refusal:
    """Returned by `picobot_model_call_gate`: the call is not sent; the turn ends with `status`."""

    status: str  # a turn status (picobot/storage/models.py TurnStatus), e.g. "budget_exceeded"
    message: str  # shown to the user: which limit, its use, when it resets


@dataclass(frozen=True)
class ToolCallRecord:
    """One tool call that ended (`picobot_tool_call`)."""

    id: str
    name: str
    outcome: str  # ok | error | denied | timeout | cancelled
    started_at: float  # epoch seconds
    duration_secs: float


@dataclass(frozen=True)
class AudioClip:
    """Audio bytes and their type: a voice message to hear (`picobot_transcribe`), or speech to send
    (`picobot_speech`). `format`: the short name (`opus` = Ogg Opus, `mp3`, `wav`, ...)."""

    data: bytes
    mime: str
    format: str = ""

    def __repr__(self) -> str:  # never the bytes
        return f"AudioClip(mime={self.mime!r}, format={self.format!r}, bytes={len(self.data)})"


@dataclass(frozen=True)
class Transcript:
    """What `picobot_transcribe` returns: `text` (what was said), or `error` (why it was not heard, for the user)."""

    text: str | None = None
    error: str | None = None


def argument_text(arguments: dict[str, Any], argument: str | None) -> str:
    """The text a rule matches in a tool call (tool policies, approvals): one argument as text (JSON
    when it is not a string, "" when absent), or all the arguments as JSON with sorted keys."""
    if argument is None:
        return json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    value = arguments.get(argument)
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
