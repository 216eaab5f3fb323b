"""What a turn sends besides history: the AGENT.md prompt (persisted, re-injected) and runtime facts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

from picobot.domain.messages import MARKER_AGENT_PROMPT, ChatMessage

DEFAULT_AGENT_MD = """# PicoBot

You are PicoBot, a helpful assistant reachable from the web, a terminal and chat apps.

- Answer in the user's language, briefly and precisely.
- Use tools when they give a better answer than guessing: calculator for arithmetic,
  get_time for dates and times, read/write/edit/bash for files and commands in the
  workspace, http_request/web_fetch for the web.
- When a tool fails, read its error, fix the call and try again, or explain the problem.
"""


def agent_md_path(home: Path) -> Path:
    return home / "agent" / "AGENT.md"


def ensure_agent_md(home: Path) -> Path:
    """Create the agent folder and a default AGENT.md when missing."""
    path = agent_md_path(home)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(DEFAULT_AGENT_MD, encoding="utf-8")
    return path


def agent_prompt(home: Path, extra: str | None = None) -> ChatMessage:
    text = ensure_agent_md(home).read_text(encoding="utf-8")
    if extra:
        text = f"{text.rstrip()}\n\n{extra}"
    return ChatMessage(role="system", content=text, marker=MARKER_AGENT_PROMPT)


def needs_agent_prompt(history: list[ChatMessage], user_turns: int, reinject_every: int) -> bool:
    """At the start of an empty dialog, and every `reinject_every` user turns (0 = never again)."""
    if not history:
        return True
    return reinject_every > 0 and user_turns > 0 and user_turns % reinject_every == 0


def runtime_note(timezone: str, channel: str, workspace: Path) -> ChatMessage:
    """Facts of this moment; sent with every model call, never stored."""
    now = dt.datetime.now(ZoneInfo(timezone))
    text = (
        f"Current time: {now.isoformat(timespec='seconds')} ({now.strftime('%A')}, {timezone}). "
        f"Channel: {channel}. Workspace for file and shell tools: {workspace}."
    )
    return ChatMessage(role="system", content=text)
