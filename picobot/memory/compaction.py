"""Context compaction: what to fold into a summary, the summary prompt, and the fallback.

Pure functions over ChatMessage lists; the worker side (reading, the model call, the fenced
commit) is picobot.memory.compactor. The rules (seed 000 §4.3):

    estimate  = characters / 4 × 1.2 over the active history
    compact   when estimate > 50 % of the model's context_window_tokens and there are more
              than KEEP_USER_TURNS user messages
    keep      the last KEEP_USER_TURNS user turns whole (everything from the first of them on),
              and the agent_prompt / scheduled_system_prompt system messages before them
    summarise the rest (tool outputs over 2,000 characters trimmed), with the same provider;
              on failure keep a truncated transcript instead

The boundary is always a user message with no tool result after it answering a call before
it, so an assistant `tool_calls` is never split from its `tool` results.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from picobot.domain.messages import (
    MARKER_AGENT_PROMPT, MARKER_HISTORY_COMPACTION, MARKER_SCHEDULED_PROMPT, ChatMessage, text_of,
)
from picobot.domain.text import repair_text

KEEP_USER_TURNS = 3
from picobot.storage.compaction import TRIGGER_FRACTION  # noqa: E402 (one number, kept with the compaction SQL)
TOOL_OUTPUT_TRIM_CHARS = 2000
KEPT_MARKERS = frozenset({MARKER_AGENT_PROMPT, MARKER_SCHEDULED_PROMPT})
SUMMARY_PREFIX = "[Compressed History]"
PREVIOUS_CONTEXT_PREFIX = "[Previous Context]"
# The summary request (prompt + transcript) may take this share of the window; the rest is for the answer.
TRANSCRIPT_WINDOW_SHARE = 0.6
MIN_TRANSCRIPT_CHARS = 4000
FALLBACK_MAX_CHARS = 6000  # a failed summary keeps at most this much of the transcript's end
SUMMARY_MAX_TOKENS = 4096

SUMMARY_INSTRUCTIONS = """You compress the older part of a conversation between a user and an AI agent \
so the agent can carry on without it. Write a dense summary in the conversation's language. Keep, \
exactly as written:
- the user's requests and questions, and what is still open;
- identifiers, names, numbers, file paths, URLs;
- tool calls and commands that were run, with their results and errors;
- decisions made, preferences the user stated, and the current state of each task.
Drop greetings, repetition and reasoning that led nowhere. Do not invent anything. Answer with the \
summary only."""


def message_chars(m: ChatMessage) -> int:
    """Characters a message sends: text, tool-call names and arguments, reasoning."""
    content = m.content if isinstance(m.content, str) else text_of(m.content)
    return (len(content) + len(m.reasoning_content or "")
            + sum(len(c.name) + len(c.arguments) for c in m.tool_calls))


def estimate_tokens(messages: list[ChatMessage]) -> int:
    """Seed 000's estimate: about 4 characters a token, times 1.2 for safety."""
    return int(sum(message_chars(m) for m in messages) / 4 * 1.2)


def user_turns(messages: list[ChatMessage]) -> int:
    return sum(1 for m in messages if m.role == "user")


def needs_compaction(messages: list[ChatMessage], window_tokens: int, keep: int = KEEP_USER_TURNS) -> bool:
    """The cheap check after a turn: over half the window, and something old enough to fold."""
    return user_turns(messages) > keep and estimate_tokens(messages) > window_tokens * TRIGGER_FRACTION


@dataclass
class Plan:
    kept_system: list[ChatMessage]  # agent_prompt / scheduled prompts from before the boundary
    summarised: list[ChatMessage]  # what the summary replaces
    boundary: int  # index of the first message kept whole (always a user message)


def choose_boundary(history: list[ChatMessage], keep: int = KEEP_USER_TURNS) -> int | None:
    """Index of the user message that starts the kept part, or None when nothing can be folded.

    The latest candidate is the keep-th user message from the end; an earlier one is taken when a
    tool result after a candidate answers a call made before it (a broken, interleaved history).
    """
    users = [i for i, m in enumerate(history) if m.role == "user"]
    if keep < 1 or len(users) <= keep:
        return None
    for b in reversed(users[:len(users) - keep + 1]):
        if not any(m.role != "system" for m in history[:b]):
            return None  # only system messages before it (and before any earlier one): nothing to fold
        before = {c.id for m in history[:b] for c in m.tool_calls}
        after = {m.tool_call_id for m in history[b:] if m.role == "tool"}
        if not before & after:
            return b
    return None


def plan(history: list[ChatMessage], keep: int = KEEP_USER_TURNS) -> Plan | None:
    """What to keep and what to summarise, or None when nothing can be folded."""
    b = choose_boundary(history, keep)
    if b is None:
        return None
    older = history[:b]
    kept = [m for m in older if m.role == "system" and m.marker in KEPT_MARKERS]
    summarised = [m for m in older if not (m.role == "system" and m.marker in KEPT_MARKERS)]
    if not summarised:
        return None
    return Plan(kept, summarised, b)


def _trim(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} characters trimmed]"


def transcript_lines(messages: list[ChatMessage], trim: int = TOOL_OUTPUT_TRIM_CHARS) -> list[str]:
    """One entry per message, role first; tool results name their tool; long tool output trimmed."""
    out = []
    for m in messages:
        text = text_of(m.content) if not isinstance(m.content, str) else m.content
        if m.role == "tool":
            out.append(f"[tool result: {m.name or 'tool'}{' (error)' if m.is_error else ''}] {_trim(text, trim)}")
            continue
        if text.strip():
            out.append(f"[{m.role}] {text}")
        for call in m.tool_calls:
            out.append(f"[{m.role} called tool {call.name}] {_trim(call.arguments, trim)}")
    return out


def transcript_budget(window_tokens: int) -> int:
    """Characters of transcript the summary call may send for a window of this size."""
    return max(MIN_TRANSCRIPT_CHARS, int(window_tokens * TRANSCRIPT_WINDOW_SHARE * 4 / 1.2))


def fit(text: str, budget: int) -> str:
    """Text cut to `budget` characters: its first third and its last two thirds, marked."""
    if len(text) <= budget:
        return text
    marker = "\n[... {} characters left out ...]\n"
    room = max(0, budget - len(marker) - 12)
    head = room // 3
    tail = room - head
    return text[:head] + marker.format(len(text) - head - tail) + (text[-tail:] if tail else "")


def transcript(messages: list[ChatMessage], window_tokens: int) -> str:
    return fit("\n\n".join(transcript_lines(messages)), transcript_budget(window_tokens))


def summary_prompt(transcript_text: str) -> list[ChatMessage]:
    """The messages of the summary call."""
    return [ChatMessage(role="system", content=SUMMARY_INSTRUCTIONS),
            ChatMessage(role="user", content=f"Conversation to summarise:\n\n{transcript_text}")]


def summary_max_tokens(window_tokens: int) -> int:
    return max(256, min(SUMMARY_MAX_TOKENS, window_tokens // 8))


def fallback_summary(transcript_text: str) -> str:
    """When the summary call fails: the transcript's most recent part, plainly truncated."""
    if len(transcript_text) <= FALLBACK_MAX_CHARS:
        body = transcript_text
    else:
        body = f"[... {len(transcript_text) - FALLBACK_MAX_CHARS} earlier characters left out]\n" \
               + transcript_text[-FALLBACK_MAX_CHARS:]
    return f"(No summary could be made; the end of the older conversation follows, truncated.)\n{body}"


def summary_message(summary: str) -> ChatMessage:
    # a model may send a lone surrogate or NUL: neither survives UTF-8 or a PostgreSQL text column
    return ChatMessage(role="system", content=f"{SUMMARY_PREFIX}\n{repair_text(summary).strip()}",
                       marker=MARKER_HISTORY_COMPACTION)


def has_summary(history: list[ChatMessage]) -> bool:
    return any(m.marker == MARKER_HISTORY_COMPACTION for m in history)


def previous_context(entries: list[str]) -> ChatMessage | None:
    """The `[Previous Context]` message made of recent Timeline entries (oldest first), or None."""
    entries = [e.strip() for e in entries if e and e.strip()]
    if not entries:
        return None
    body = "\n\n".join(f"- {e}" for e in entries)
    return ChatMessage(role="system", content=f"{PREVIOUS_CONTEXT_PREFIX}\nEarlier in this conversation:\n{body}")


_LIMIT_PATTERNS = (
    re.compile(r"maximum context length is (\d+)", re.I),
    re.compile(r"> ?(\d+) maximum", re.I),
    re.compile(r"context (?:window|length|limit)[^0-9]{0,40}(\d{3,})", re.I),
)


def context_limit(error_text: str) -> int | None:
    """The window the provider says it has ("maximum context length is 8192 tokens"), if it says."""
    for pattern in _LIMIT_PATTERNS:
        match = pattern.search(error_text or "")
        if match:
            value = int(match.group(1))
            if value > 0:
                return value
    return None
