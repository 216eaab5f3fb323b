"""One approval's life: asked (SQL row, socket frame, chat message), waited on, decided.

The wait is in SQL and Redis, not in a process's memory: a decision is written to SQL first (one
conditional update from `pending`) and then pushed to the approval's Redis list, which the waiting
tool thread BLPOPs in short slices. The waiter also re-reads SQL on every slice, so a decision
whose push was lost (a Redis flush, a web process restarted between the two) still arrives. `/stop`
pushes to the same list, so the wait ends at once and is recorded `cancelled`.
"""

from __future__ import annotations

import logging
import secrets as _secrets
import time
from typing import TYPE_CHECKING, Any

import redis

from picobot.approvals import keys
from picobot.domain.scope import SOCKET_CHANNELS
from picobot.runtime.session_messages import send_to_chat
from picobot.security.redact import mask_text, redact
from picobot.storage import approvals as store

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.approvals")

SLICE_SECS = 1.0  # one BLPOP; SQL is re-read between slices
SUMMARY_CHARS = 500
DECISION_TTL_SECS = 3600
SYSTEM = "system"


def new_id() -> str:
    return _secrets.token_hex(5)  # 10 hex characters: typed in /approve, not guessable from another chat


def summary(tool: str, arguments: dict[str, Any], secrets: frozenset[str]) -> str:
    """What the call will do, for a person to judge: a shell command as it is, else the arguments; masked, capped."""
    import json

    if tool == "bash" and isinstance(arguments.get("command"), str):
        text = arguments["command"]
    else:
        text = json.dumps(arguments, ensure_ascii=False, sort_keys=True, default=str)
    text = mask_text(redact(text, secrets))
    text = text.encode("utf-8", "replace").decode("utf-8")
    return text if len(text) <= SUMMARY_CHARS else text[:SUMMARY_CHARS] + f"… [{len(text) - SUMMARY_CHARS} more]"


def requested_frame(a: store.Approval) -> dict[str, Any]:
    return {"type": "approval_requested", "session_id": a.session_id, "approval_id": a.id, "tool": a.tool,
            "summary": a.summary, "rule": a.rule, "expires_at": a.expires_at}


def decided_frame(a: store.Approval) -> dict[str, Any]:
    return {"type": "approval_decided", "session_id": a.session_id, "approval_id": a.id, "tool": a.tool,
            "status": a.status, "scope": a.scope, "decided_by": a.decided_by, "decided_via": a.decided_via,
            "decided_at": a.decided_at}


def buttons(approval_id: str) -> list[tuple[str, str]]:
    """What a chat with buttons shows under the request (a Telegram inline keyboard)."""
    return [("Approve", f"/approve {approval_id}"), ("Allow for this dialog", f"/approve {approval_id} session"),
            ("Deny", f"/deny {approval_id}")]


def chat_text(a: store.Approval, timeout_secs: float) -> str:
    return (f"Approval needed ({a.rule}): {a.tool} wants to run\n{a.summary}\n"
            f"Reply /approve {a.id} (or /approve {a.id} session to allow this for the dialog) or /deny {a.id}. "
            f"No answer within {timeout_secs:g}s denies it.")


def ask(ports: "Ports", session_id: str, channel: str, chat_id: str, turn_id: str, tool: str, text: str,
        rule: str, timeout_secs: float) -> store.Approval:
    """Record a pending approval and tell the dialog's sockets and, for a platform chat, the chat itself.

    A channel nobody can answer in (no socket, no chat: the OpenAI-compatible API) closes it at once,
    denied, instead of holding the caller for the whole timeout."""
    with ports.db.begin() as conn:
        a = store.create(conn, new_id(), session_id, turn_id, tool, text, rule, timeout_secs)
    ports.publisher.publish(requested_frame(a))
    if channel not in SOCKET_CHANNELS:
        try:
            send_to_chat(ports, channel, chat_id, chat_text(a, timeout_secs), kind="notice", key=f"approval:{a.id}",
                         buttons=buttons(a.id))
        except ValueError:  # no plugin owns the channel: there is nobody to ask
            log.info("approval %s: nobody can answer in channel %s; denied", a.id, channel)
            return _close(ports, a, store.DENIED, "unreachable")
        except Exception as exc:  # the sockets and /approve still work; the timeout denies at worst
            log.warning("approval %s: could not send the request to %s: %s", a.id, channel, type(exc).__name__)
    return a


def decide(ports: "Ports", approval_id: str, status: str, by: str, via: str,
           scope: str = "once") -> tuple[bool, store.Approval | None]:
    """Write a decision (SQL first), then wake the waiter and tell the sockets; (won, the row as it is now)."""
    with ports.db.begin() as conn:
        won = store.decide(conn, approval_id, status, by, via, scope)
        row = store.get(conn, approval_id)
    if won and row is not None:
        _notify(ports, row)
    return won, row


def _notify(ports: "Ports", row: store.Approval) -> None:
    try:
        pipe = ports.redis.pipeline(transaction=False)
        pipe.rpush(keys.approval(row.id), row.status)
        pipe.expire(keys.approval(row.id), DECISION_TTL_SECS)
        pipe.execute()
    except redis.RedisError as exc:  # the waiter re-reads SQL every slice
        log.warning("approval %s: decision not pushed (%s)", row.id, type(exc).__name__)
    ports.publisher.publish(decided_frame(row))


def wait(ports: "Ports", a: store.Approval, cancel: Any) -> store.Approval:
    """Block until the approval is decided, expires (recorded `expired`) or the turn stops (`cancelled`)."""
    key = keys.approval(a.id)
    unhook = cancel.on_cancel(lambda: _poke(ports, key)) if cancel is not None else (lambda: None)
    try:
        while True:
            with ports.db.begin() as conn:
                row = store.get(conn, a.id)
            if row is None:  # deleted with its dialog: nobody can answer any more
                return _as(a, store.CANCELLED)
            if row.status != store.PENDING:
                return row
            if cancel is not None and cancel.cancelled:
                return _close(ports, a, store.CANCELLED, "stop")
            left = row.expires_at - time.time()
            if left <= 0:
                return _close(ports, a, store.EXPIRED, "timeout")
            try:
                ports.redis.blpop([key], timeout=max(0.01, min(SLICE_SECS, left)))
            except redis.RedisError:  # Redis away: SQL alone, a slice at a time
                (cancel.wait if cancel is not None else time.sleep)(min(SLICE_SECS, max(0.01, left)))
    finally:
        unhook()


STALE_GRACE_SECS = 30.0


def close_stale(ports: "Ports", now: float | None = None) -> int:
    """Record `expired` for approvals whose waiter is gone (its worker died mid-wait); how many closed.

    A live waiter closes its own approval when it expires; this is the sweeper's fallback, after a grace."""
    now = time.time() if now is None else now
    with ports.db.begin() as conn:
        found = store.stale(conn, now - STALE_GRACE_SECS)
    return sum(1 for approval_id in found if decide(ports, approval_id, store.EXPIRED, SYSTEM, "timeout")[0])


def _poke(ports: "Ports", key: str) -> None:
    try:
        ports.redis.rpush(key, "stop")
        ports.redis.expire(key, DECISION_TTL_SECS)
    except redis.RedisError:
        pass  # the waiter sees the cancel within a slice


def _close(ports: "Ports", a: store.Approval, status: str, via: str) -> store.Approval:
    """Record the system's own decision unless a person's won first; the row as it ended."""
    won, row = decide(ports, a.id, status, SYSTEM, via)
    return row if row is not None else _as(a, status)


def _as(a: store.Approval, status: str) -> store.Approval:
    return store.Approval(**{**a.__dict__, "status": status})
