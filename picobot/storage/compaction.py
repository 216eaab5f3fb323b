"""SQL of context compaction: what a compaction reads, and its one short, fenced commit.

`sessions.compacted_before` is the boundary seed 003 calls `last_compressed_message_at`: the
position where the active history starts. A compaction appends a new active segment at the end
of the session — the kept system prompts, the summary, then copies of the messages from the
boundary on — and moves `compacted_before` to its first position. Every raw message stays where
it was, so history loading (`position >= compacted_before`) returns exactly: kept prompts, the
summary, the recent messages, and whatever turns commit after it.
"""

from __future__ import annotations

from dataclasses import dataclass
from sqlalchemy import Connection, bindparam, func, insert, literal, select, update

from picobot.domain.messages import MARKER_HISTORY_COMPACTION, ChatMessage
from picobot.storage import messages, sessions
from picobot.storage.models import InboundRow, MessageRow, SessionRow

# A dialog is compacted when its history passes this share of the model's context window.
TRIGGER_FRACTION = 0.5

_s = SessionRow.__table__
_m = MessageRow.__table__
_in = InboundRow.__table__

_STATE = (select(_s.c.channel, _s.c.chat_id, _s.c.agent, _s.c.deleted_at, _s.c.next_position,
                 _s.c.compacted_before).where(_s.c.id == bindparam("sid")))
_POSITIONED = (select(_m.c.position, _m.c.role, _m.c.content, _m.c.tool_calls, _m.c.tool_call_id, _m.c.name,
                      _m.c.reasoning_content, _m.c.provider_state, _m.c.marker, _m.c.is_error)
               .where(_m.c.session_id == bindparam("sid"), _m.c.position >= bindparam("since"))
               .order_by(_m.c.position))
_SENDER = (select(_in.c.sender_id).where(_in.c.session_id == bindparam("sid"))
           .order_by(_in.c.seq.desc()).limit(1))
_COPIED = ("session_id", "turn_id", "role", "content", "tool_calls", "tool_call_id", "name", "reasoning_content",
           "provider_state", "marker", "is_error", "created_at")
_SUMMARIES = (select(func.count(), func.max(_m.c.created_at))
              .where(_m.c.session_id == bindparam("sid"), _m.c.marker == MARKER_HISTORY_COMPACTION))
_ID_AT = select(_m.c.id).where(_m.c.session_id == bindparam("sid"), _m.c.position == bindparam("pos"))


@dataclass
class State:
    channel: str
    chat_id: str
    agent: str
    next_position: int
    compacted_before: int | None  # the fence: a commit goes through only while this is unchanged


def read_state(conn: Connection, session_id: str) -> State | None:
    """The session as a compaction needs it; None when it does not exist or was deleted."""
    row = conn.execute(_STATE, {"sid": session_id}).first()
    if row is None or row.deleted_at is not None:
        return None
    return State(row.channel, row.chat_id, row.agent, row.next_position, row.compacted_before)


def load_positioned(conn: Connection, session_id: str, since: int | None) -> list[tuple[int, ChatMessage]]:
    """The active messages with their positions, as stored (no repair)."""
    return [(r.position, messages.from_row(r)) for r in conn.execute(_POSITIONED, {"sid": session_id,
                                                                                   "since": since or 0})]


def latest_sender(conn: Connection, session_id: str) -> str:
    """Who spoke last in the session (whose memory scope its Timeline belongs to); "" if nobody."""
    return conn.execute(_SENDER, {"sid": session_id}).scalar() or ""


def commit(conn: Connection, session_id: str, fence: int | None, boundary: int, head: list[ChatMessage]) -> int | None:
    """Append `head` and copies of the messages from position `boundary` on; move the boundary to it.

    Part of the caller's (short) transaction. Returns the position of the new active segment, or
    None when the session is gone or another compaction moved its boundary since `fence` was read.
    Turns that committed meanwhile are fine: their messages are after `boundary` and get copied.
    """
    locked = conn.execute(_STATE.with_for_update(of=_s), {"sid": session_id}).first()
    if locked is None or locked.deleted_at is not None or locked.compacted_before != fence:
        return None
    if not (fence or 0) <= boundary < locked.next_position:
        return None  # a boundary from some other state of the session: never commit it
    recent = locked.next_position - boundary
    first = sessions.reserve_positions(conn, session_id, len(head) + recent)
    messages.insert_at(conn, session_id, first, None, head)
    offset = first + len(head) - boundary
    rows = select(*[_m.c[name] for name in _COPIED], (_m.c.position + literal(offset)).label("position")).where(
        _m.c.session_id == session_id, _m.c.position >= boundary, _m.c.position < locked.next_position)
    conn.execute(insert(_m).from_select([*_COPIED, "position"], rows))
    conn.execute(update(_s).where(_s.c.id == session_id).values(compacted_before=first))
    return first


def message_id_at(conn: Connection, session_id: str, position: int) -> int | None:
    return conn.execute(_ID_AT, {"sid": session_id, "pos": position}).scalar()


def summary_stats(conn: Connection, session_id: str) -> tuple[int, float | None]:
    """How many compactions the session had, and when the last one was committed."""
    row = conn.execute(_SUMMARIES, {"sid": session_id}).first()
    return (int(row[0] or 0), row[1]) if row is not None else (0, None)
