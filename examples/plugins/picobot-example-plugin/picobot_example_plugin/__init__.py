"""An example PicoBot plugin: every stage hook and one tool, each with behaviour a test can see.

The behaviour is driven by magic words, so the plugin stays harmless in a normal chat:

- on_input: the input "plugin ping" is answered "example plugin: pong" (no model call);
- before_toolcall: a call whose arguments contain "forbidden-by-plugin" is denied;
- after_toolcall: the result of `example_echo` gets " [seen by example plugin]" appended;
- before_output: "PLUGIN-REWRITE" in the final answer becomes "rewritten by example plugin";
- pre_action, post_action, after_output: one JSON line each in the file named by the environment
  variable PICOBOT_EXAMPLE_PLUGIN_LOG (nothing when it is unset).

The module itself is the plugin: PicoBot loads it through the entry point `example` of the group
`picobot.plugins` (see pyproject.toml) and registers the functions marked `@hookimpl`.
"""

from __future__ import annotations

import json
import os
import threading
from typing import Any

from picobot.plugins import Deny, hookimpl, tool

__version__ = "0.1.0"

PING = "plugin ping"
PONG = "example plugin: pong"
FORBIDDEN = "forbidden-by-plugin"
SEEN = " [seen by example plugin]"
MARKER = "PLUGIN-REWRITE"
REWRITTEN = "rewritten by example plugin"
LOG_ENV = "PICOBOT_EXAMPLE_PLUGIN_LOG"

_write_lock = threading.Lock()  # hooks of concurrent turns run in several threads of one process


# ---------------------------------------------------------------- the tool


@tool
def example_echo(text: str, times: int = 1) -> str:
    """Repeat a text, separated by spaces (the example plugin's tool).

    Args:
        text: The text to repeat.
        times: How many times to repeat it (1 to 10).
    """
    return " ".join([text] * max(1, min(times, 10)))


@hookimpl
def picobot_tools() -> list[Any]:
    return [example_echo]


# ---------------------------------------------------------------- stage hooks, in turn order


@hookimpl
def on_input(ctx, message) -> str | None:
    if message.text.strip() == PING:
        return PONG
    return None


@hookimpl
def pre_action(ctx, messages) -> None:
    _log("pre_action", ctx, messages=len(messages))


@hookimpl
def post_action(ctx, response) -> None:
    _log("post_action", ctx, text=response.text, tool_calls=[c.name for c in response.tool_calls])


@hookimpl
def before_toolcall(ctx, call) -> Deny | None:
    if FORBIDDEN in json.dumps(call.arguments, ensure_ascii=False):
        return Deny(f"example plugin forbids {call.name} with {FORBIDDEN!r} in its arguments")
    return None


@hookimpl
def after_toolcall(ctx, call, result) -> str | None:
    if call.name == example_echo.name:
        return result + SEEN
    return None


@hookimpl
def before_output(ctx, text) -> str | None:
    if MARKER in text:
        return text.replace(MARKER, REWRITTEN)
    return None


@hookimpl
def after_output(ctx, turn) -> None:
    _log("after_output", ctx, session_id=turn.session_id, status=turn.status, final_text=turn.final_text)


# ---------------------------------------------------------------- helpers


def _log(hook: str, ctx: Any, **fields: Any) -> None:
    """One JSON line for a hook call, in the file $PICOBOT_EXAMPLE_PLUGIN_LOG names (when set).

    `fields` come last, so a hook may give its own session_id (after_output: the turn's)."""
    path = os.environ.get(LOG_ENV)
    if not path:
        return
    line = json.dumps({"hook": hook, "session_id": ctx.session_id, "turn_id": ctx.turn_id, **fields},
                      ensure_ascii=False)
    with _write_lock, open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")
