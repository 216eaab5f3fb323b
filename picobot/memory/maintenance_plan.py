"""What memory maintenance asks the model, and the strict check of what it answers.

The model sees one user scope's knowledge entries (numbered by their ids) and answers one JSON
object of exactly this shape (MAINTENANCE_SHAPE); anything else — not JSON, unknown keys, ids it
was not shown, an entry both merged and deleted, a merge of an entry it saw only in part — is an
invalid plan, and an invalid plan changes nothing.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from picobot.domain.messages import ChatMessage
from picobot.memory.model import MAX_KEY, MAX_NAMESPACE, Memory

PROMPT_TITLE = "PicoBot memory maintenance"
SHOWN_CONTENT_CHARS = 1000  # longer entries are shown cut; such an entry may be deleted, not merged
CLASSES = ("facts", "preferences", "patterns", "other")

MAINTENANCE_SHAPE = """{
  "categories": {"facts": [ids], "preferences": [ids], "patterns": [ids], "other": [ids]},
  "merges": [{"ids": [two or more ids], "namespace": "profile", "key": "short_key",
              "content": "the merged memory", "importance": 0.0-1.0}],
  "low_value": [ids of entries to delete: trivia, stale one-offs, empty or duplicated text],
  "conflicts": [{"ids": [two or more ids], "note": "what contradicts what"}],
  "managed_markdown": "a short markdown summary of this user: facts, preferences, patterns"
}"""

_SYSTEM = f"""You maintain the long-term memory of one user of an AI assistant.
You get their memory entries as JSON. Classify each entry as a fact, a preference, a pattern
(a habit or way of working) or other. Merge entries that say the same thing or belong together
into one entry. Mark trivial or useless entries as low value (they will be deleted). Flag entries
that contradict each other as conflicts (do not resolve them; keep both). Write a short markdown
summary of what is worth knowing about this user (no heading; at most a few short lists).

Answer with ONE JSON object and nothing else, exactly this shape:
{MAINTENANCE_SHAPE}
Every id must be one you were given. An id may be in at most one merge, and not both merged and
low value. Entries marked "cut": true were shortened for you: do not merge them."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class Merge(_Strict):
    ids: list[int] = Field(min_length=2)
    namespace: str = Field(min_length=1, max_length=MAX_NAMESPACE)
    key: str = Field(min_length=1, max_length=MAX_KEY)
    content: str = Field(min_length=1)
    importance: float = Field(ge=0, le=1)

    @field_validator("importance", mode="before")
    @classmethod
    def _finite(cls, value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            value = float(value)  # strict mode would refuse 1 for a float
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value


class Conflict(_Strict):
    ids: list[int] = Field(min_length=2)
    note: str = Field(min_length=1, max_length=500)


class Categories(_Strict):
    facts: list[int] = Field(default_factory=list)
    preferences: list[int] = Field(default_factory=list)
    patterns: list[int] = Field(default_factory=list)
    other: list[int] = Field(default_factory=list)


class Plan(_Strict):
    categories: Categories
    merges: list[Merge] = Field(default_factory=list)
    low_value: list[int] = Field(default_factory=list)
    conflicts: list[Conflict] = Field(default_factory=list)
    managed_markdown: str


class InvalidPlan(ValueError):
    """The model's answer is not a plan that can be applied; the text says what is wrong."""


@dataclass(frozen=True)
class Shown:
    """The entries the model was shown: by id, and which of them it saw cut short."""

    entries: dict[int, Memory]
    cut: frozenset[int]


def prompt(scope_key: str, entries: list[Memory]) -> tuple[list[ChatMessage], Shown]:
    """The maintenance request for one scope, and what it showed."""
    rows, cut = [], set()
    for m in entries:
        row: dict[str, Any] = {"id": m.id, "namespace": m.namespace, "key": m.memory_key,
                               "content": m.content[:SHOWN_CONTENT_CHARS], "importance": round(m.importance, 2)}
        if len(m.content) > SHOWN_CONTENT_CHARS:
            row["cut"] = True
            cut.add(m.id)
        rows.append(row)
    user = (f"{PROMPT_TITLE} for user scope {json.dumps(scope_key)}: {len(rows)} entries.\n\n"
            + json.dumps(rows, ensure_ascii=False, indent=0))
    messages = [ChatMessage(role="system", content=_SYSTEM), ChatMessage(role="user", content=user)]
    return messages, Shown({m.id: m for m in entries}, frozenset(cut))


def parse(answer: str, shown: Shown, summary_max_chars: int) -> Plan:
    """The model's answer as a checked Plan; InvalidPlan (saying why) when it is not one."""
    try:
        data = json.loads(_strip_fence(answer))
    except (ValueError, RecursionError):
        raise InvalidPlan("the answer is not JSON") from None
    if not isinstance(data, dict):
        raise InvalidPlan(f"the answer is a JSON {type(data).__name__}, not an object with categories, merges, "
                          "low_value, conflicts and managed_markdown")
    try:
        plan = Plan.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "the answer"
        raise InvalidPlan(f"{where}: {first['msg']}") from None
    _check_ids(plan, shown)
    if len(plan.managed_markdown) > summary_max_chars:
        raise InvalidPlan(f"managed_markdown is {len(plan.managed_markdown)} characters; the limit is "
                          f"{summary_max_chars}")
    return plan


def _strip_fence(answer: str) -> str:
    # models like to wrap JSON in a ```json fence even when told not to; that much is forgiven
    text = answer.strip()
    if text.startswith("```") and text.endswith("```") and "\n" in text:
        text = text[text.index("\n") + 1:-3]
    return text


def _check_ids(plan: Plan, shown: Shown) -> None:
    known = shown.entries.keys()
    every = [i for ids in plan.categories.model_dump().values() for i in ids] + list(plan.low_value)
    every += [i for m in plan.merges for i in m.ids] + [i for c in plan.conflicts for i in c.ids]
    unknown = sorted({i for i in every if i not in known})
    if unknown:
        raise InvalidPlan(f"ids {unknown[:10]} were not among the entries shown")
    merged = [i for m in plan.merges for i in m.ids]
    if len(merged) != len(set(merged)):
        raise InvalidPlan("an entry is in more than one merge")
    both = set(merged) & set(plan.low_value)
    if both:
        raise InvalidPlan(f"entries {sorted(both)[:10]} are both merged and low value")
    partial = sorted(set(merged) & shown.cut)
    if partial:
        raise InvalidPlan(f"entries {partial[:10]} were shown cut short and cannot be merged")


def class_counts(plan: Plan) -> dict[str, int]:
    return {name: len(set(ids)) for name, ids in plan.categories.model_dump().items()}


