"""SQL tables: the source of truth for sessions, messages, inbound input, turns, outbox."""

from __future__ import annotations

from typing import Any

from sqlalchemy import JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Row states
INBOUND_PENDING = "pending"
INBOUND_CLAIMED = "claimed"
INBOUND_DONE = "done"
INBOUND_CANCELLED = "cancelled"
INBOUND_FAILED = "failed"

TURN_RUNNING = "running"
TURN_COMPLETED = "completed"
TURN_CANCELLED = "cancelled"
TURN_FAILED = "failed"
TURN_INTERRUPTED = "interrupted"

MODE_STEER = "steer"
MODE_QUEUE = "queue"

Id = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrement needs INTEGER


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(512), primary_key=True)  # channel:chat_id:dialog_id
    channel: Mapped[str] = mapped_column(String(64))
    chat_id: Mapped[str] = mapped_column(String(256))
    dialog_id: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(256), default="")
    agent: Mapped[str] = mapped_column(String(64), default="default")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    archived_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    deleted_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    last_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)  # context use of the last call
    next_seq: Mapped[int] = mapped_column(BigInteger, default=0)  # inbound sequence counter
    next_position: Mapped[int] = mapped_column(BigInteger, default=0)  # message position counter
    user_turns: Mapped[int] = mapped_column(Integer, default=0)
    compacted_before: Mapped[int | None] = mapped_column(BigInteger, nullable=True)

    __table_args__ = (Index("ix_sessions_scope", "channel", "chat_id", "updated_at"),)

    @property
    def scope(self) -> str:
        return f"{self.channel}:{self.chat_id}"


class ChatScopeRow(Base):
    """Which dialog is current for a `channel:chat_id`."""

    __tablename__ = "chat_scopes"

    scope: Mapped[str] = mapped_column(String(320), primary_key=True)
    current_session_id: Mapped[str] = mapped_column(String(512))
    updated_at: Mapped[float] = mapped_column(Float)


class MessageRow(Base):
    __tablename__ = "messages"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    position: Mapped[int] = mapped_column(BigInteger)  # true order within the session
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    role: Mapped[str] = mapped_column(String(16))
    content: Mapped[Any] = mapped_column(JSON)  # str or list of blocks
    tool_calls: Mapped[list[Any] | None] = mapped_column(JSON, nullable=True)
    tool_call_id: Mapped[str | None] = mapped_column(String(128), nullable=True)
    name: Mapped[str | None] = mapped_column(String(128), nullable=True)
    reasoning_content: Mapped[str | None] = mapped_column(Text, nullable=True)
    provider_state: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    marker: Mapped[str | None] = mapped_column(String(64), nullable=True)
    is_error: Mapped[bool] = mapped_column(Boolean, default=False)
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (UniqueConstraint("session_id", "position", name="uq_messages_session_position"),)


class InboundRow(Base):
    """A user's input, recorded before it is acknowledged; drained by turns in seq order."""

    __tablename__ = "inbound"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(BigInteger)
    mode: Mapped[str] = mapped_column(String(16), default=MODE_STEER)
    content: Mapped[Any] = mapped_column(JSON)
    sender_id: Mapped[str] = mapped_column(String(256), default="")
    channel: Mapped[str] = mapped_column(String(64))
    platform_message_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    status: Mapped[str] = mapped_column(String(16), default=INBOUND_PENDING)
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    created_at: Mapped[float] = mapped_column(Float)
    claimed_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        UniqueConstraint("session_id", "seq", name="uq_inbound_session_seq"),
        UniqueConstraint("channel", "platform_message_id", name="uq_inbound_platform_id"),
        Index("ix_inbound_status_session", "status", "session_id", "seq"),
    )


class TurnRow(Base):
    __tablename__ = "turns"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))
    status: Mapped[str] = mapped_column(String(16), default=TURN_RUNNING)
    worker: Mapped[str] = mapped_column(String(256), default="")
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    started_at: Mapped[float] = mapped_column(Float)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    final_text: Mapped[str | None] = mapped_column(Text, nullable=True)
    inbound_seqs: Mapped[list[Any]] = mapped_column(JSON, default=list)

    __table_args__ = (Index("ix_turns_status", "status", "session_id"),)


class OutboxRow(Base):
    """Deliveries to external channels; claimed exactly once, in order per (channel, chat_id)."""

    __tablename__ = "outbox"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(64))
    chat_id: Mapped[str] = mapped_column(String(256))
    session_id: Mapped[str | None] = mapped_column(String(512), nullable=True)
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    kind: Mapped[str] = mapped_column(String(32), default="message")
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    idempotency_key: Mapped[str] = mapped_column(String(128), unique=True)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ix_outbox_lane", "status", "channel", "chat_id", "id"),)


class PairingCodeRow(Base):
    """A one-time pairing code from `picobot pair`; only its SHA-256 is stored."""

    __tablename__ = "pairing_codes"

    code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    used_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class DeviceTokenRow(Base):
    """A paired device (browser or terminal); only the token's SHA-256 is stored."""

    __tablename__ = "device_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(64), unique=True)
    name: Mapped[str] = mapped_column(String(128), default="")
    kind: Mapped[str] = mapped_column(String(16), default="browser")  # browser | cli | api
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)


class SkillEventRow(Base):
    """What happened to a skill (activated, created, updated, deleted, disabled, enabled), and by whom."""

    __tablename__ = "skill_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    skill: Mapped[str] = mapped_column(String(64))
    event: Mapped[str] = mapped_column(String(16))
    session_id: Mapped[str | None] = mapped_column(String(512), nullable=True)  # None: the web page
    via: Mapped[str] = mapped_column(String(16), default="tool")  # tool | web
    scope: Mapped[str] = mapped_column(String(32), default="")  # the source or scope it concerned
    created_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_skill_events_skill", "skill", "id"),)
