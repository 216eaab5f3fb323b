"""The `browser` and `browser_profiles` tools: argument checks, then one call into the engine."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from picobot.browser import actions, profiles
from picobot.browser.engine import INSTALL_HINT, BrowserEngine, Slot, lock_profile, unlock
from picobot.errors import ToolError, TurnCancelled
from picobot.tools.base import Tool, ToolContext, ToolOutput

log = logging.getLogger("picobot.browser")

ACTIONS = ["navigate", "snapshot", "click", "type", "press", "screenshot", "back", "wait", "close"]
REF = re.compile(r"e[0-9]{1,7}")
KEY = re.compile(r"[A-Za-z0-9+_ -]{1,40}|[!-~]")
MAX_URL_CHARS = 4096
MAX_SELECTOR_CHARS = 1000
MAX_TEXT_CHARS = 10_000
MAX_MS = 60_000
MAX_REFUSED_SHOWN = 5


def _text(args: dict[str, Any], name: str, limit: int) -> str | None:
    value = args.get(name)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ToolError(f"`{name}` must be text of at most {limit} characters.")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise ToolError(f"`{name}` is not valid Unicode text.") from None
    if "\x00" in value:
        raise ToolError(f"`{name}` must not contain NUL characters.")
    return value


def _need(value: str | None, name: str, action: str) -> str:
    if not value:
        raise ToolError(f"`{action}` needs `{name}`.")
    return value


class BrowserTool(Tool):
    name = "browser"
    description = "snapshot gives element refs for click/type; persistent_id: a saved profile (logins)."
    parameters = {"type": "object", "properties": {
        "action": {"type": "string", "enum": ACTIONS},
        "url": {"type": "string"}, "ref": {"type": "string"}, "selector": {"type": "string"},
        "text": {"type": "string"}, "submit": {"type": "boolean"}, "key": {"type": "string"},
        "ms": {"type": "integer"}, "persistent_id": {"type": "string"},
    }, "required": ["action"]}

    def __init__(self, engine: BrowserEngine) -> None:
        self.engine = engine

    def footprint(self, args: dict[str, Any], ctx: ToolContext) -> frozenset[str]:
        """Calls on one page run in request order."""
        profile = args.get("persistent_id")
        return frozenset({f"browser:{profile if isinstance(profile, str) else ctx.session_id}"})

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str | ToolOutput:
        step = checked(args)
        key = f"profile:{step.profile}" if step.profile else f"session:{ctx.session_id}"
        if step.action == "close":
            closed = self.engine.run(self.engine.close_slot(key), ctx.cancel) if self.engine.is_open(key) else False
            return "Closed the browser." if closed else "No browser was open."
        if not step.profile:  # kept for the rest of the turn: /stop then closes the context this turn used
            ctx.cancel.on_cancel(lambda: self.engine.submit(self.engine.close_slot(key)))
        folder, max_chars = Path(ctx.workspace) / "screenshots", self.engine.cfg.max_text_chars

        async def run(page: Any, slot: Slot) -> tuple[str, Path | None]:
            seen = len(slot.refused)
            try:
                text, image = await actions.perform(page, step, folder, max_chars)
            except ToolError:
                raise
            except Exception as exc:  # Playwright's errors: a page error the model can read
                raise ToolError(_page_error(exc, slot.refused[seen:])) from None
            return text + _notes(slot) + _refused_note(slot.refused[seen:]), image

        try:
            text, image = self.engine.run(self.engine.use(ctx.session_id, step.profile, ctx.workspace, run),
                                          ctx.cancel)
        except (ToolError, TurnCancelled):
            raise
        except Exception as exc:  # Chromium did not start (a broken install, no memory left)
            log.warning("the browser could not start", exc_info=True)
            raise ToolError(f"The browser could not start: {str(exc).splitlines()[0][:300] if str(exc) else exc!r}. "
                            f"Check the Chromium install ({INSTALL_HINT}).") from None
        return ToolOutput(text, (str(image),)) if image is not None else text


def checked(args: dict[str, Any]) -> actions.Step:
    """The call's arguments, checked: a ToolError names the first problem."""
    action = args.get("action")
    if action not in ACTIONS:
        raise ToolError(f"`action` must be one of: {', '.join(ACTIONS)}.")
    profile = args.get("persistent_id")
    step = actions.Step(action, profiles.check_id(profile) if profile is not None else None,
                        url=_text(args, "url", MAX_URL_CHARS), ref=_text(args, "ref", 10),
                        selector=_text(args, "selector", MAX_SELECTOR_CHARS), text=_text(args, "text", MAX_TEXT_CHARS),
                        key=_text(args, "key", 40), ms=args.get("ms"), submit=args.get("submit", False))
    if step.ref is not None and not REF.fullmatch(step.ref):
        raise ToolError("`ref` is an element ref from a snapshot, like e12.")
    if step.key is not None and not KEY.fullmatch(step.key):
        raise ToolError("`key` is a key name like Enter, Tab, ArrowDown or Control+A.")
    if step.ms is not None and (not isinstance(step.ms, int) or isinstance(step.ms, bool) or not 0 <= step.ms <= MAX_MS):
        raise ToolError(f"`ms` must be a whole number from 0 to {MAX_MS}.")
    if not isinstance(step.submit, bool):
        raise ToolError("`submit` must be true or false.")
    _needs(step)
    return step


def _needs(step: actions.Step) -> None:
    """What each action cannot do without."""
    action = step.action
    if action == "navigate" and not re.match(r"https?://", _need(step.url, "url", action), re.I):
        raise ToolError("`url` must start with http:// or https://.")
    if action == "type" and step.text is None:
        raise ToolError("`type` needs `text`.")
    if action in ("click", "type") and not (step.ref or step.selector):
        raise ToolError(f"`{action}` needs `ref` (from a snapshot) or `selector`.")
    if action == "press":
        _need(step.key, "key", action)
    if action == "wait" and not step.text and step.ms is None:
        raise ToolError("`wait` needs `text` or `ms`.")


def _notes(slot: Slot) -> str:
    """What happened in the context since the last answer (downloads)."""
    notes, slot.notes[:] = list(slot.notes), []
    return "\n\n" + "\n".join(notes) if notes else ""


def _refused_note(refused: list[tuple[str, str]]) -> str:
    if not refused:
        return ""
    shown = "\n".join(f"- {url[:200]}" for url, _ in refused[:MAX_REFUSED_SHOWN])
    more = f"\n- ... and {len(refused) - MAX_REFUSED_SHOWN} more" if len(refused) > MAX_REFUSED_SHOWN else ""
    return (f"\n\nThe network policy refused {len(refused)} request(s) of this page (loopback, private and "
            f"metadata addresses are closed unless tools.network.allow opens them):\n{shown}{more}")


def _page_error(exc: Exception, refused: list[tuple[str, str]]) -> str:
    message = str(exc).split("\n", 1)[0][:500]
    if "ERR_BLOCKED_BY_CLIENT" in message and refused:
        return f"The page was refused: {refused[0][1]}"
    return f"The browser failed: {message}"


class BrowserProfilesTool(Tool):
    name = "browser_profiles"
    description = "For browser's persistent_id."
    # Kept tiny (it is in every prompt): `action` is checked here when missing, `label` as text.
    parameters = {"type": "object", "properties": {
        "action": {"enum": ["create", "label", "list", "delete"]}, "id": {"type": "string"}, "label": {},
    }}

    def __init__(self, engine: BrowserEngine) -> None:
        self.engine = engine

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        action, home = args.get("action"), self.engine.home
        if action == "list":
            return profiles.listing(home)
        if action not in ("create", "label", "delete"):
            raise ToolError("`action` must be create, label, list or delete.")
        profile = profiles.check_id(args.get("id"))
        label = profiles.check_label(args.get("label", ""))
        if action == "create":
            return profiles.create(home, profile, label)
        if action == "label":
            return profiles.set_label(home, profile, label)
        return self._delete(profile, ctx)

    def _delete(self, profile: str, ctx: ToolContext) -> str:
        key = f"profile:{profile}"
        if self.engine.is_open(key):
            self.engine.run(self.engine.close_slot(key), ctx.cancel)
        folder = profiles.profile_dir(home := self.engine.home, profile)
        if not folder.is_dir():
            raise ToolError(f"There is no profile {profile!r}.")
        handle = lock_profile(folder, profile)  # in use by another worker: refused
        try:
            return profiles.delete(home, profile)
        finally:
            unlock(handle)
