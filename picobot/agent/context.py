"""What a turn sends besides history: the AGENT.md prompt (persisted, re-injected) and runtime facts."""

from __future__ import annotations

import datetime as dt
from pathlib import Path
from zoneinfo import ZoneInfo

from picobot.agent.managed_block import rewrite_block, visible_to
from picobot.domain.messages import MARKER_AGENT_PROMPT, ChatMessage

# Sent at the start of every dialog: which tool does what is the tools' own descriptions' job.
DEFAULT_AGENT_MD = """# PicoBot

You are PicoBot, a helpful assistant on the web, the terminal and chat apps.

- Answer in the user's language, briefly and precisely.
- Use a tool when it beats guessing. When one fails, read its error and fix the call, or
  explain the problem.
- When the answer may depend on the user's past (preferences, facts, ongoing work), check
  memory_search; save lasting facts with memory_manage, never small talk.
"""


def agent_md_path(home: Path) -> Path:
    return home / "agent" / "AGENT.md"


def ensure_agent_md(home: Path) -> Path:
    """Create the agent folder and a default AGENT.md when missing."""
    path = agent_md_path(home)
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        try:  # "x": never clobber a file a concurrent rewrite of the memory block has just put there
            with open(path, "x", encoding="utf-8") as fh:
                fh.write(DEFAULT_AGENT_MD)
        except FileExistsError:
            pass
    return path


def write_memory_summary(home: Path, summary: str) -> bool:
    """Put `summary` into AGENT.md's managed memory block; False when it already held exactly that."""
    return rewrite_block(agent_md_path(home), summary, DEFAULT_AGENT_MD)


def agent_prompt(home: Path, extra: str | None = None, scope_key: str | None = None) -> ChatMessage:
    """AGENT.md (with only `scope_key`'s section of the memory block) and the agent's own system prompt."""
    # a byte that is not UTF-8 (a hand-edited file) must not fail every turn
    text = visible_to(ensure_agent_md(home).read_text(encoding="utf-8", errors="replace"), scope_key)
    if extra:
        text = f"{text.rstrip()}\n\n{extra}"
    return ChatMessage(role="system", content=text, marker=MARKER_AGENT_PROMPT)


def needs_agent_prompt(history: list[ChatMessage], user_turns: int, reinject_every: int) -> bool:
    """At the start of an empty dialog, and every `reinject_every` user turns (0 = never again)."""
    if not history:
        return True
    return reinject_every > 0 and user_turns > 0 and user_turns % reinject_every == 0


def runtime_note(timezone: str, channel: str, workspace: Path, skill_index: str = "") -> ChatMessage:
    """Facts of this moment, and the skill index; sent with every model call, never stored."""
    now = dt.datetime.now(ZoneInfo(timezone))
    text = (
        f"Current time: {now.isoformat(timespec='seconds')} ({now.strftime('%A')}, {timezone}). "
        f"Channel: {channel}. Workspace: {workspace}."
    )
    if skill_index:  # rides along here rather than as one more system message
        text = f"{text}\n\n{skill_index}"
    return ChatMessage(role="system", content=text)
