"""Approvals on the plugin SDK: `before_toolcall` pauses a matching call until a person decides.

Deciding is `/approve <id> [session]` and `/deny <id>` from the same chat (every channel: the web
UI's card sends the same command over its socket). `/approvals` lists the dialog's latest ones, and
`/info` shows them. No tool: nothing is added to the prompt.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.approvals import rules as _rules
from picobot.approvals import waiting
from picobot.config.workspace import chat_workspace
from picobot.plugins import Command, Deny, hookimpl
from picobot.storage import approvals as store
from picobot.storage import sessions

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.approvals")

_ID = re.compile(r"[0-9a-f]{10}")
APPROVE_USAGE = "Usage: /approve <id> [session]   (session: also allow calls like it for this dialog)"
DENY_USAGE = "Usage: /deny <id>"


class ApprovalsPlugin:
    def __init__(self, config: Any) -> None:
        self.config = config
        self.approval = config.tools.approval
        self.rules = _rules.compile_rules(self.approval)
        self._ports: "Ports | None" = None
        self._registry: Any = None

    def bind(self, ports: "Ports") -> None:
        if self._ports is None:
            self._ports = ports

    @hookimpl
    def picobot_started(self, ports: "Ports", registry: Any) -> None:
        self.bind(ports)
        self._registry = registry

    # ------------------------------------------------------------------ the pause

    @hookimpl
    def before_toolcall(self, ctx: Any, call: Any) -> Deny | None:
        if not self.rules or self._read_only(call.name):
            return None
        rule = _rules.first_match(self.rules, call.name, call.arguments, self._workspace(ctx))
        if rule is None or rule.action == "allow":
            return None
        if rule.action == "deny":
            return Deny(f"the approval rule {rule.name} refuses this {call.name} call")
        if self.approval.mode == "deny":
            return Deny(f"this {call.name} call needs a person's approval (rule {rule.name}), and approvals are "
                        "set to deny such calls without asking")
        ports = self._ports
        if ports is None or not ctx.session_id or not ctx.turn_id:
            return Deny(f"this {call.name} call needs approval (rule {rule.name}) and there is nobody to ask here")
        with ports.db.begin() as conn:
            if store.allowed_for_session(conn, ctx.session_id, call.name, rule.name):
                return None
        text = waiting.summary(call.name, call.arguments, ports.secrets)
        asked = waiting.ask(ports, ctx.session_id, ctx.channel, ctx.chat_id, ctx.turn_id, call.name, text, rule.name,
                            self.approval.timeout_secs)
        log.info("approval %s asked in %s for %s (rule %s)", asked.id, ctx.session_id, call.name, rule.name)
        ended = waiting.wait(ports, asked, getattr(ctx, "cancel", None)) if asked.status == store.PENDING else asked
        log.info("approval %s ended %s via %s", ended.id, ended.status, ended.decided_via)
        if ended.status == store.APPROVED:
            return None
        if ended.status == store.CANCELLED:
            return Deny("stopped: the turn was stopped while this call waited for approval")
        if ended.status == store.EXPIRED:
            return Deny(f"nobody approved this call within {self.approval.timeout_secs:g}s (approval {ended.id}), "
                        "so it was not run")
        if ended.decided_via == "unreachable":
            return Deny(f"this {call.name} call needs a person's approval (rule {ended.rule}), and nobody can be "
                        "asked in this channel")
        return Deny(f"the user denied this call (approval {ended.id}); do not retry it without asking")

    def _read_only(self, name: str) -> bool:
        registry = self._registry
        try:
            return registry is not None and bool(registry.is_read_only(name))
        except Exception:
            return False

    def _workspace(self, ctx: Any) -> Path | None:
        try:
            root = self.config.workspace_path()
            return chat_workspace(root, ctx.channel, ctx.chat_id) if self.config.tools.workspace_per_chat else root
        except Exception:
            return None

    @hookimpl
    def picobot_sweep(self, ports: "Ports") -> None:
        closed = waiting.close_stale(ports)
        if closed:
            log.info("closed %d approval(s) whose waiting turn was gone", closed)

    # ------------------------------------------------------------------ deciding

    @hookimpl
    def picobot_commands(self, config: Any, ports: "Ports") -> list[Command]:
        self.bind(ports)
        return [
            Command("approve", "Approve a tool call waiting for you: /approve <id> [session]",
                    lambda ctx, arg: self._decide(ctx, arg, store.APPROVED)),
            Command("deny", "Deny a tool call waiting for you: /deny <id>",
                    lambda ctx, arg: self._decide(ctx, arg, store.DENIED)),
            Command("approvals", "This dialog's latest approvals and their outcome", self._list),
        ]

    def _decide(self, ctx: Any, arg: str, status: str) -> dict[str, Any]:
        ports = self._ports
        usage = APPROVE_USAGE if status == store.APPROVED else DENY_USAGE
        parts = arg.split() if isinstance(arg, str) else []
        scope = "once"
        if status == store.APPROVED and len(parts) == 2 and parts[1].lower() == "session":
            scope = "session"
        elif len(parts) != 1:
            return _answer(usage, code="usage")
        approval_id = parts[0].lower()
        if not _ID.fullmatch(approval_id) or ports is None:
            return _answer(f"No approval {parts[0][:40]!r} here. " + usage, code="not_found")
        with ports.db.begin() as conn:
            found = store.get(conn, approval_id)
        if found is None or not _same_chat(found.session_id, ctx.channel, ctx.chat_id):
            return _answer(f"No approval {approval_id} in this chat.", code="not_found")
        won, row = waiting.decide(ports, approval_id, status, f"{ctx.channel}:{ctx.sender_id}", ctx.channel, scope)
        if row is None:
            return _answer(f"No approval {approval_id} in this chat.", code="not_found")
        if not won:
            return _answer(f"Approval {approval_id} was already {row.status} (by {row.decided_by} via "
                           f"{row.decided_via}).", code="already_decided", approval=row)
        what = {"approved": "Approved", "denied": "Denied"}[row.status]
        extra = f"; {row.tool} calls under rule {row.rule} are allowed for this dialog" if scope == "session" else ""
        return _answer(f"{what} {row.tool} ({approval_id}){extra}.", approval=row)

    def _list(self, ctx: Any, arg: str) -> dict[str, Any]:
        ports = self._ports
        if ports is None:
            return _answer("Approvals are not available here.")
        with ports.db.begin() as conn:
            sid = sessions.current_id(conn, ctx.channel, ctx.chat_id)
            found = store.for_session(conn, sid, 20) if sid else []
        data = {"session_id": sid, "approvals": [a.as_dict() for a in found], "mode": self.approval.mode}
        if not found:
            return {"text": f"No approvals in this dialog (tools.approval.mode is {self.approval.mode}).", "data": data}
        return {"text": "\n".join(_line(a) for a in found), "data": data}

    # ------------------------------------------------------------------ /info

    @hookimpl
    def picobot_session_info(self, session_id: str, ports: "Ports") -> dict[str, Any] | None:
        if self.approval.mode == "off":
            return None
        with ports.db.begin() as conn:
            found = store.for_session(conn, session_id, 5)
        pending = [a for a in found if a.status == store.PENDING]
        if not found:
            return {"approvals": "none yet"}
        head = f"{len(pending)} pending" if pending else "none pending"
        return {"approvals": head + "; latest: " + " | ".join(_line(a) for a in found[:3])}


def _same_chat(session_id: str, channel: str, chat_id: str) -> bool:
    prefix = f"{channel}:{chat_id}:"
    return session_id.startswith(prefix) and ":" not in session_id[len(prefix):]


def _line(a: store.Approval) -> str:
    when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(a.decided_at or a.created_at))
    who = f" by {a.decided_by} via {a.decided_via}" if a.decided_by else ""
    scope = " (for the dialog)" if a.scope == "session" else ""
    summary = a.summary if len(a.summary) <= 80 else a.summary[:80] + "…"
    return f"{a.id} {a.status}{scope}{who} at {when} UTC: {a.tool} [{a.rule}] {summary}"


def _answer(text: str, code: str = "", approval: store.Approval | None = None) -> dict[str, Any]:
    data: dict[str, Any] = {}
    if code:
        data["code"] = code
    if approval is not None:
        data["approval"] = approval.as_dict()
    return {"text": text, "data": data}
