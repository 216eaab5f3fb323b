"""`todo`: the dialog's one plan. Every argument is checked here (a call may come without the schema's
check), and a refused call changes nothing: ToolError with what to fix."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from sqlalchemy.exc import IntegrityError

from picobot import plans
from picobot.errors import ToolError
from picobot.security.redact import redact_tree
from picobot.storage import plans as sql
from picobot.tools.base import Tool, ToolContext

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.runtime.ports import Ports

ACTIONS = ("create", "update", "add", "list", "clear")
MAX_ITEM_ID = 10_000
_UNENCODABLE = re.compile("[\ud800-\udfff\x00]")
_SPACES = re.compile(r"\s+")


class TodoTool(Tool):
    name = "todo"
    # 419 characters as sent: `required` is left to execute's check, and add's `text` to this comment
    description = "Plan long work; items: [{text}]; update as you go."
    parameters = {
        "type": "object",
        "properties": {
            "action": {"enum": list(ACTIONS)},
            "title": {"type": "string"},
            "items": {"type": "array"},
            "item_id": {"type": "integer"},
            "status": {"enum": list(plans.STATUSES)},
            "note": {"type": "string"},
        },
    }
    main_agent_only = True  # sub-agents report through their run's outcome (plan_item_id), never edit the plan

    def __init__(self, ports: "Ports") -> None:
        self.ports = ports

    def footprint(self, args: dict[str, Any], ctx: ToolContext) -> frozenset[str]:
        return frozenset({f"plan:{ctx.session_id}"})  # one plan's changes apply in the order asked

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if not isinstance(args, dict):
            raise ToolError("Arguments must be a JSON object with `action`.")
        action = args.get("action")
        if action not in ACTIONS:
            raise ToolError(f"action: one of {', '.join(ACTIONS)}.")
        if action == "list":
            return plans.render(plans.read(self.ports, ctx.session_id))
        args = redact_tree(args, ctx.secrets)  # a key pasted into an item never reaches SQL or the sockets
        edit = getattr(self, f"_{action}")(args, ctx.session_id)  # every argument checked before any write
        with ctx.gate.side_effect():  # a stopped turn changes nothing more
            try:
                answer, plan = plans.change(self.ports, ctx.session_id, edit)
            except IntegrityError:  # another call created the dialog's plan first
                raise ToolError(_exists_text()) from None
        return f"{answer}\n{plans.render(plan)}" if plan is not None else answer

    # each returns the edit to run in the change's transaction, having checked its arguments

    def _create(self, args: dict[str, Any], session_id: str) -> Any:
        title = _text(args.get("title"), "title", plans.MAX_TITLE_CHARS, one_line=True)
        texts = _items(args, need=True)

        def edit(conn: "Connection", now: float) -> str:
            if sql.lock(conn, session_id, now) is not None:
                raise ToolError(_exists_text())
            sql.create(conn, session_id, title, texts, now)
            return "Plan created."
        return edit

    def _add(self, args: dict[str, Any], session_id: str) -> Any:
        texts = _items(args, need=True)

        def edit(conn: "Connection", now: float) -> str:
            plan_id = _plan_id(conn, session_id, now)
            have = sql.count(conn, plan_id)
            if have + len(texts) > plans.MAX_ITEMS:
                raise ToolError(f"items: the plan has {have} items and may have {plans.MAX_ITEMS}; "
                                "finish or clear it rather than growing it.")
            numbers = sql.add(conn, plan_id, texts, now)
            return f"Added item{'s' if len(numbers) > 1 else ''} {', '.join(map(str, numbers))}."
        return edit

    def _update(self, args: dict[str, Any], session_id: str) -> Any:
        number = args.get("item_id")
        if isinstance(number, float) and number.is_integer():  # 2.0: an integer to JSON Schema too
            number = int(number)
        if isinstance(number, bool) or not isinstance(number, int) or not 1 <= number <= MAX_ITEM_ID:
            raise ToolError("item_id: the item's number (list shows them).")
        status = args.get("status")
        if status not in plans.STATUSES:
            raise ToolError(f"status: one of {', '.join(plans.STATUSES)}.")
        note = args.get("note")
        note = None if note is None else _text(note, "note", plans.MAX_TEXT_CHARS, empty=True)

        def edit(conn: "Connection", now: float) -> str:
            if not sql.set_status(conn, _plan_id(conn, session_id, now), number, status, note, now):
                raise ToolError(f"item_id: the plan has no item {number} (list shows them).")
            return f"Item {number}: {status}."
        return edit

    def _clear(self, args: dict[str, Any], session_id: str) -> Any:
        def edit(conn: "Connection", now: float) -> str:
            return "Plan cleared." if sql.clear(conn, session_id) else "There was no plan."
        return edit


def _exists_text() -> str:
    return ("This dialog has a plan already: update or add to its items, or clear it first "
            "(action=list shows it).")


def _plan_id(conn: "Connection", session_id: str, now: float) -> int:
    plan_id = sql.lock(conn, session_id, now)
    if plan_id is None:
        raise ToolError("No plan in this dialog: create one first.")
    return plan_id


def _items(args: dict[str, Any], need: bool) -> list[str]:
    """`items` ([{"text"}]) then `text`, checked; ToolError naming the first bad one."""
    raw = args.get("items")
    texts: list[str] = []
    if raw is not None:
        if not isinstance(raw, list):
            raise ToolError('items: a list of {"text": "..."} objects.')
        if len(raw) > plans.MAX_ITEMS:
            raise ToolError(f"items: {len(raw)} given; a plan has at most {plans.MAX_ITEMS}.")
        for n, item in enumerate(raw):
            if not isinstance(item, dict) or "text" not in item:
                raise ToolError(f'items[{n}]: an object {{"text": "..."}}.')
            texts.append(_text(item["text"], f"items[{n}].text", plans.MAX_TEXT_CHARS))
    if args.get("text") is not None:
        texts.append(_text(args["text"], "text", plans.MAX_TEXT_CHARS))
    if need and not texts:
        raise ToolError('items: give at least one item, as items=[{"text": "..."}].')
    if len(texts) > plans.MAX_ITEMS:
        raise ToolError(f"items: {len(texts)} given; a plan has at most {plans.MAX_ITEMS}.")
    return texts


def _text(value: Any, key: str, limit: int, one_line: bool = False, empty: bool = False) -> str:
    if not isinstance(value, str):
        raise ToolError(f"{key}: give it as text.")
    text = _SPACES.sub(" ", value).strip() if one_line else value.strip()
    if not text and not empty:
        raise ToolError(f"{key}: empty; say what it is.")
    if len(text) > limit:
        raise ToolError(f"{key}: {len(text)} characters; the limit is {limit}.")
    if _UNENCODABLE.search(text):
        raise ToolError(f"{key}: holds a lone surrogate or NUL character; send valid text.")
    return text
