"""SQL tables: the source of truth for sessions, messages, inbound input, turns, outbox."""

from __future__ import annotations

from enum import StrEnum
from typing import Any, ClassVar

from sqlalchemy import (JSON, BigInteger, Boolean, Float, ForeignKey, Index, Integer, String, Table, Text,
                        UniqueConstraint, text)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

# Row states. StrEnum members are their str values, so SQL rows and JSON hold the same text as
# ever and a value read back from SQL (a plain str) compares equal to its member. The UPPER_CASE
# constants are the older spelling, kept as aliases.


class InboundStatus(StrEnum):
    PENDING = "pending"
    CLAIMED = "claimed"
    DONE = "done"
    CANCELLED = "cancelled"
    FAILED = "failed"


class TurnStatus(StrEnum):
    RUNNING = "running"
    COMPLETED = "completed"
    CANCELLED = "cancelled"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    BUDGET_EXCEEDED = "budget_exceeded"  # a budget refused the next model call (picobot/budgets)


class OutboxStatus(StrEnum):
    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"
    DEFERRED = "deferred"  # held until the chat writes again (a platform's delivery window); then pending


class ChannelEventStatus(StrEnum):
    PENDING = "pending"
    DONE = "done"
    IGNORED = "ignored"
    FAILED = "failed"


class RunStatus(StrEnum):
    """A sub-agent run's (agent_runs.status)."""

    QUEUED = "queued"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


class JobState(StrEnum):
    """A scheduled job's (scheduled_jobs.state)."""

    ACTIVE = "active"
    PAUSED = "paused"
    COMPLETED = "completed"


class JobRunOutcome(StrEnum):
    """One due time's (job_runs.outcome, scheduled_jobs.last_outcome)."""

    RUNNING = "running"
    OK = "ok"
    FAILED = "failed"
    MISSED = "missed"
    SKIPPED = "skipped"
    BUDGET_EXCEEDED = "budget_exceeded"  # its turn was refused by a budget


INBOUND_PENDING = InboundStatus.PENDING
INBOUND_CLAIMED = InboundStatus.CLAIMED
INBOUND_DONE = InboundStatus.DONE
INBOUND_CANCELLED = InboundStatus.CANCELLED
INBOUND_FAILED = InboundStatus.FAILED

TURN_RUNNING = TurnStatus.RUNNING
TURN_COMPLETED = TurnStatus.COMPLETED
TURN_CANCELLED = TurnStatus.CANCELLED
TURN_FAILED = TurnStatus.FAILED
TURN_INTERRUPTED = TurnStatus.INTERRUPTED

MODE_STEER = "steer"
MODE_QUEUE = "queue"

Id = BigInteger().with_variant(Integer, "sqlite")  # SQLite autoincrement needs INTEGER


class Base(DeclarativeBase):
    type_annotation_map = {dict[str, Any]: JSON, list[Any]: JSON}
    # Every row class here is declared with columns, so its __table__ is a Table (insert(), .c, keys for
    # Upsert), not the bare FromClause DeclarativeBase promises for imperative mappings.
    __table__: ClassVar[Table]


class SessionRow(Base):
    __tablename__ = "sessions"

    id: Mapped[str] = mapped_column(String(512), primary_key=True)  # channel:chat_id:dialog_id
    channel: Mapped[str] = mapped_column(String(64))
    chat_id: Mapped[str] = mapped_column(String(256))
    dialog_id: Mapped[str] = mapped_column(String(64))
    title: Mapped[str] = mapped_column(String(256), default="")
    # "" (none yet), "user" (/new <title>, /rename: never overwritten) or "auto" (the titles capability)
    title_source: Mapped[str] = mapped_column(String(8), default="", server_default="")
    title_attempted_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # the one automatic try
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
    # the dialog's /model choice (keys of config providers and models); null: the agent's own model
    model_provider: Mapped[str | None] = mapped_column(String(256), nullable=True)
    model_key: Mapped[str | None] = mapped_column(String(256), nullable=True)

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
    status: Mapped[str] = mapped_column(String(16), default=OutboxStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    sent_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    next_attempt_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # backoff after a transient error
    error_code: Mapped[str | None] = mapped_column(String(64), nullable=True)
    result: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # e.g. the platform's message ids
    updated_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ix_outbox_lane", "status", "channel", "chat_id", "id"),
                      Index("ix_outbox_channel", "channel", "id"))  # one channel's rows newest first (Deliveries page)


class ChannelEventRow(Base):
    """A raw platform event (e.g. a Feishu message), recorded before the platform is answered.

    Unique per (channel, event_key): a redelivery hours later finds the first row and does nothing.
    """

    __tablename__ = "channel_events"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    channel: Mapped[str] = mapped_column(String(64))
    event_key: Mapped[str] = mapped_column(String(256))
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    status: Mapped[str] = mapped_column(String(16), default=ChannelEventStatus.PENDING)
    attempts: Mapped[int] = mapped_column(Integer, default=0)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    received_at: Mapped[float] = mapped_column(Float)
    processed_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (UniqueConstraint("channel", "event_key", name="uq_channel_events_key"),
                      Index("ix_channel_events_status", "status", "received_at"))


class ChannelStateRow(Base):
    """A channel's own small durable state: a poll cursor, per-user reply tokens, dedupe keys."""

    __tablename__ = "channel_state"

    channel: Mapped[str] = mapped_column(String(64), primary_key=True)
    key: Mapped[str] = mapped_column(String(320), primary_key=True)
    value: Mapped[dict[str, Any]] = mapped_column(JSON)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (Index("ix_channel_state_updated", "channel", "updated_at"),)


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


class ApiKeyRow(Base):
    """A named key for the OpenAI-compatible API, scoped to one agent; only its SHA-256 is stored.

    Apart from device_tokens on purpose: a device token opens the web UI and every agent, an API
    key opens only /v1 and one agent (migration 0011 says more).
    """

    __tablename__ = "api_keys"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    name: Mapped[str] = mapped_column(String(64))
    key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    prefix: Mapped[str] = mapped_column(String(16))  # the key's first characters, to tell keys apart
    agent: Mapped[str] = mapped_column(String(64))
    created_at: Mapped[float] = mapped_column(Float)
    last_used_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    revoked_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (Index("ux_api_keys_live_name", "name", unique=True,
                            sqlite_where=text("revoked_at IS NULL"),
                            postgresql_where=text("revoked_at IS NULL")),)


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


class MemoryRow(Base):
    """A long-term memory of one user scope (see picobot/memory). `search_text` is the jieba-segmented
    key and content that the full-text indexes cover (SQLite FTS5 table `memories_fts`, PostgreSQL GIN)."""

    __tablename__ = "memories"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    scope: Mapped[str] = mapped_column(String(16), default="user")
    scope_key: Mapped[str] = mapped_column(String(320))  # channel:sender_id, or "owner"
    namespace: Mapped[str] = mapped_column(String(64))
    memory_key: Mapped[str] = mapped_column(String(200))
    content: Mapped[str] = mapped_column(Text)
    category: Mapped[str] = mapped_column(String(16), default="knowledge")  # knowledge | timeline
    importance: Mapped[float] = mapped_column(Float, default=0.5)
    search_text: Mapped[str] = mapped_column(Text, default="")
    session_id: Mapped[str | None] = mapped_column(String(512), nullable=True)
    message_id: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    seq: Mapped[int | None] = mapped_column(BigInteger, nullable=True)
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    channel: Mapped[str | None] = mapped_column(String(64), nullable=True)
    chat_id: Mapped[str | None] = mapped_column(String(256), nullable=True)
    source_type: Mapped[str] = mapped_column(String(32), default="tool")  # tool | web | compaction | ...
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (
        UniqueConstraint("scope_key", "namespace", "memory_key", name="uq_memories_scope_key"),
        Index("ix_memories_scope_category", "scope_key", "category", "updated_at"),
    )


RUN_QUEUED = RunStatus.QUEUED
RUN_RUNNING = RunStatus.RUNNING
RUN_COMPLETED = RunStatus.COMPLETED
RUN_FAILED = RunStatus.FAILED
RUN_CANCELLED = RunStatus.CANCELLED
RUN_INTERRUPTED = RunStatus.INTERRUPTED
RUN_ACTIVE = (RUN_QUEUED, RUN_RUNNING)


class AgentRunRow(Base):
    """One sub-agent run (the `task` tool): what it was asked, with which definition, and how it ended."""

    __tablename__ = "agent_runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"))  # the user's dialog
    turn_id: Mapped[str] = mapped_column(String(64))  # the session's turn whose tree it belongs to
    parent_run_id: Mapped[str | None] = mapped_column(String(32), nullable=True)  # None: started by the main agent
    depth: Mapped[int] = mapped_column(Integer, default=1)
    background: Mapped[bool] = mapped_column(Boolean, default=False)
    subagent_type: Mapped[str] = mapped_column(String(64))
    definition: Mapped[dict[str, Any]] = mapped_column(JSON)  # snapshot: source, tools, limits, prompt hash
    description: Mapped[str] = mapped_column(Text, default="")
    prompt: Mapped[str] = mapped_column(Text, default="")
    sender_id: Mapped[str] = mapped_column(String(256), default="")
    status: Mapped[str] = mapped_column(String(16), default=RUN_QUEUED)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    worker: Mapped[str] = mapped_column(String(256), default="")
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    finished_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_agent_runs_session", "session_id", "created_at"),
        Index("ix_agent_runs_status", "status"),
        Index("ix_agent_runs_turn", "turn_id", "parent_run_id"),
        Index("ix_agent_runs_created", "created_at"),  # the newest runs and turns (the Sub-agent runs page)
    )


class MemoryMaintenanceStateRow(Base):
    """Where memory maintenance left each user scope: what it saw, when, what went wrong, what it wrote.

    `last_memory_change_seen` is a fingerprint of the scope's knowledge entries (count, newest
    update, highest id): a scope whose fingerprint still matches is skipped without a model call.
    """

    __tablename__ = "memory_maintenance_state"

    scope_key: Mapped[str] = mapped_column(String(320), primary_key=True)
    last_pass_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # the last attempt, good or bad
    last_memory_change_seen: Mapped[str | None] = mapped_column(String(80), nullable=True)
    last_error: Mapped[str | None] = mapped_column(Text, nullable=True)  # None after a good pass
    summary: Mapped[str] = mapped_column(Text, default="")  # this scope's part of AGENT.md's managed block
    report: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)  # counts and conflicts of the last good pass


JOB_ACTIVE = JobState.ACTIVE
JOB_PAUSED = JobState.PAUSED
JOB_COMPLETED = JobState.COMPLETED
JOB_RUN_RUNNING = JobRunOutcome.RUNNING
JOB_RUN_OK = JobRunOutcome.OK
JOB_RUN_FAILED = JobRunOutcome.FAILED
JOB_RUN_MISSED = JobRunOutcome.MISSED
JOB_RUN_SKIPPED = JobRunOutcome.SKIPPED


class ScheduledJobRow(Base):
    """A scheduled job (see picobot/scheduler): SQL is the authority, redbeat only wakes it up."""

    __tablename__ = "scheduled_jobs"

    id: Mapped[str] = mapped_column(String(128), primary_key=True)
    kind: Mapped[str] = mapped_column(String(32))
    schedule: Mapped[dict[str, Any]] = mapped_column(JSON)  # the job JSON's schedule object
    target: Mapped[dict[str, Any] | None] = mapped_column(JSON, nullable=True)
    payload: Mapped[dict[str, Any]] = mapped_column(JSON)
    timezone: Mapped[str | None] = mapped_column(String(64), nullable=True)  # None: time.timezone
    state: Mapped[str] = mapped_column(String(16), default=JOB_ACTIVE)  # active | paused | completed
    source: Mapped[str] = mapped_column(String(16), default="user")  # config | builtin | user
    owner_scope: Mapped[str | None] = mapped_column(String(320), nullable=True)  # channel:chat_id of the creator
    next_due_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_due_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    last_outcome: Mapped[str | None] = mapped_column(String(16), nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)
    version: Mapped[int] = mapped_column(Integer, default=1)

    __table_args__ = (Index("ix_scheduled_jobs_due", "state", "next_due_at"),)


class JobRunRow(Base):
    """One due time of a job; UNIQUE(job_id, due_at) makes each due time fire at most once."""

    __tablename__ = "job_runs"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(String(128))
    due_at: Mapped[float] = mapped_column(Float)
    created_at: Mapped[float] = mapped_column(Float)
    started_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    outcome: Mapped[str] = mapped_column(String(16), default=JOB_RUN_RUNNING)  # running | ok | failed | missed | skipped | budget_exceeded
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    session_id: Mapped[str | None] = mapped_column(String(512), nullable=True)
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)

    __table_args__ = (
        UniqueConstraint("job_id", "due_at", name="uq_job_runs_job_due"),
        Index("ix_job_runs_session", "session_id", "outcome"),
    )


class HookRunRow(Base):
    """One accepted inbound webhook call (picobot/webhooks): stored before the 202, settled by its turn."""

    __tablename__ = "hook_runs"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)  # the run_id the sender gets
    hook: Mapped[str] = mapped_column(String(64))
    idempotency_key: Mapped[str | None] = mapped_column(String(64), nullable=True)  # sha256 of the header
    status: Mapped[str] = mapped_column(String(16), default="accepted")  # accepted | completed | failed
    mode: Mapped[str] = mapped_column(String(24))
    channel: Mapped[str] = mapped_column(String(64))  # the run's input: (channel, "hook:<id>") in inbound
    session_id: Mapped[str] = mapped_column(String(512))
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    result: Mapped[str | None] = mapped_column(Text, nullable=True)
    error: Mapped[str | None] = mapped_column(Text, nullable=True)
    created_at: Mapped[float] = mapped_column(Float)
    ended_at: Mapped[float | None] = mapped_column(Float, nullable=True)
    callback_status: Mapped[str | None] = mapped_column(String(16), nullable=True)  # pending | delivered | failed | refused
    callback_attempts: Mapped[int] = mapped_column(Integer, default=0)
    callback_next_at: Mapped[float | None] = mapped_column(Float, nullable=True)  # due (or leased) until then
    callback_error: Mapped[str | None] = mapped_column(Text, nullable=True)

    __table_args__ = (
        UniqueConstraint("hook", "idempotency_key", name="uq_hook_runs_idempotency"),
        Index("ix_hook_runs_hook_created", "hook", "created_at"),
        Index("ix_hook_runs_status", "status"),
        Index("ix_hook_runs_callback", "callback_status", "callback_next_at"),
    )


class UsageRow(Base):
    """One model call's tokens and estimated cost: the ledger budgets are enforced from and usage reports read.

    Kept in SQL so spend survives a Redis flush; no foreign key to `sessions`, so a deleted dialog's
    spend still counts toward its user's and the day's totals.
    """

    __tablename__ = "usage_records"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    created_at: Mapped[float] = mapped_column(Float)
    day: Mapped[str] = mapped_column(String(10))  # "YYYY-MM-DD" in UTC; a month is its first 7 characters
    kind: Mapped[str] = mapped_column(String(32), default="turn")  # turn | subagent | compaction | title | ...
    session_id: Mapped[str | None] = mapped_column(String(512), nullable=True)  # the root dialog (sub-agents: the parent's)
    turn_id: Mapped[str | None] = mapped_column(String(64), nullable=True)
    run_id: Mapped[str | None] = mapped_column(String(64), nullable=True)  # a sub-agent run
    job_id: Mapped[str | None] = mapped_column(String(128), nullable=True)  # a scheduled job's run
    channel: Mapped[str] = mapped_column(String(64), default="")
    user: Mapped[str] = mapped_column(String(320), default="")  # "<channel>:<sender_id>"
    agent: Mapped[str] = mapped_column(String(64), default="")
    provider: Mapped[str] = mapped_column(String(64), default="")
    model: Mapped[str] = mapped_column(String(256), default="")  # the model id the provider was asked for
    input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    output_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cached_input_tokens: Mapped[int] = mapped_column(BigInteger, default=0)
    cost_usd: Mapped[float] = mapped_column(Float, default=0.0)  # estimated from `prices`

    __table_args__ = (
        Index("ix_usage_day", "day"),
        Index("ix_usage_user_day", "user", "day"),
        Index("ix_usage_session", "session_id"),
        Index("ix_usage_job_day", "job_id", "day"),
    )


class TaskPlanRow(Base):
    """A dialog's plan (the `todo` tool): at most one per dialog, its items in `task_items`."""

    __tablename__ = "task_plans"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    session_id: Mapped[str] = mapped_column(ForeignKey("sessions.id", ondelete="CASCADE"), unique=True)
    title: Mapped[str] = mapped_column(String(256), default="")
    created_at: Mapped[float] = mapped_column(Float)
    updated_at: Mapped[float] = mapped_column(Float)


class TaskItemRow(Base):
    """One item of a plan; `number` is the id the model and the user see (1, 2, ...)."""

    __tablename__ = "task_items"

    id: Mapped[int] = mapped_column(Id, primary_key=True, autoincrement=True)
    plan_id: Mapped[int] = mapped_column(ForeignKey("task_plans.id", ondelete="CASCADE"))
    number: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending | in_progress | done | blocked
    note: Mapped[str] = mapped_column(Text, default="")
    updated_at: Mapped[float] = mapped_column(Float)

    __table_args__ = (UniqueConstraint("plan_id", "number", name="uq_task_items_plan_number"),)
class ChatHostRow(Base):
    """Which worker host holds a chat's workspace (runtime/placement.py): its dialogs' turns run there.

    Absent for a chat no turn has run for yet, and unused when `tools.workspace_storage` is shared by
    every host. `moved_from`/`moved_at`: the last move, made when the holding host had died.
    """

    __tablename__ = "chat_hosts"

    channel: Mapped[str] = mapped_column(String(64), primary_key=True)
    chat_id: Mapped[str] = mapped_column(String(256), primary_key=True)
    host: Mapped[str] = mapped_column(String(64))
    pinned_at: Mapped[float] = mapped_column(Float)
    moved_from: Mapped[str | None] = mapped_column(String(64), nullable=True)
    moved_at: Mapped[float | None] = mapped_column(Float, nullable=True)
class ApprovalRow(Base):
    """A tool call that waited for a person's yes or no (the approvals capability), and its outcome.

    The wait lives here, not in a process: a decision is this row's conditional update from
    `pending` (so of two deciders exactly one wins), and a waiter re-reads it. A row approved with
    scope `session` also allows later calls of the same tool under the same rule in that dialog.
    """

    __tablename__ = "approvals"

    id: Mapped[str] = mapped_column(String(16), primary_key=True)
    session_id: Mapped[str] = mapped_column(String(512))
    turn_id: Mapped[str] = mapped_column(String(64), default="")
    tool: Mapped[str] = mapped_column(String(128))
    summary: Mapped[str] = mapped_column(Text, default="")  # the call's arguments, secrets masked, capped
    rule: Mapped[str] = mapped_column(String(128))  # the name of the rule that matched
    status: Mapped[str] = mapped_column(String(16), default="pending")  # pending|approved|denied|expired|cancelled
    scope: Mapped[str] = mapped_column(String(16), default="once")  # once | session
    decided_by: Mapped[str | None] = mapped_column(String(320), nullable=True)  # "<channel>:<sender_id>", or system
    decided_via: Mapped[str | None] = mapped_column(String(64), nullable=True)  # web | cli_chat | telegram | timeout ...
    created_at: Mapped[float] = mapped_column(Float)
    expires_at: Mapped[float] = mapped_column(Float)
    decided_at: Mapped[float | None] = mapped_column(Float, nullable=True)

    __table_args__ = (
        Index("ix_approvals_session_created", "session_id", "created_at"),
        Index("ix_approvals_status", "status"),
    )


class PluginSettingRow(Base):
    """A plugin setting changed at run time: it wins over config.json's plugins.settings.<namespace>.<name>.

    `value` is the JSON text of the value (validated against the plugin's model before it is written)."""

    __tablename__ = "plugin_settings"

    namespace: Mapped[str] = mapped_column(String(64), primary_key=True)  # the settings key a plugin registered
    name: Mapped[str] = mapped_column(String(128), primary_key=True)  # a field of its model
    value: Mapped[str] = mapped_column(Text)
    updated_at: Mapped[float] = mapped_column(Float)
    updated_by: Mapped[str] = mapped_column(String(320), default="")  # "cli", "web:<device>", "plugin:<name>"
