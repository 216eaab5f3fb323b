"""JobService: list, get, put, delete, pause, resume and run jobs as an `Actor`, with permissions.

The owner (web UI, CLI: a paired device) sees and changes every job; anyone else only jobs whose
target chat or owner_scope is their own chat, and cannot target another chat or schedule internal
events. Config and builtin jobs may be paused and resumed, not replaced or deleted. After each
change the job's redbeat entry follows (picobot.scheduler.sync, imported lazily).
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from picobot.errors import ToolError
from picobot.scheduler.jobs import JobError, parse_job
from picobot.scheduler.schedules import describe, next_due
from picobot.storage import jobs as store

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

PUBLIC_KEYS = ("id", "kind", "schedule", "target", "payload", "timezone", "state", "source", "schedule_text",
               "next_due_at", "last_due_at", "last_outcome", "owner_scope", "created_at", "updated_at", "version")
RUN_KEYS = ("id", "due_at", "started_at", "ended_at", "outcome", "error", "session_id", "turn_id")


class JobAccessError(ToolError):
    """Base of JobNotFound and JobForbidden."""


class JobNotFound(JobAccessError):
    def __init__(self, job_id: str):
        self.job_id = job_id
        super().__init__(f"no job {job_id[:128]!r}")


class JobForbidden(JobAccessError):
    pass


@dataclass(frozen=True)
class Actor:
    channel: str
    chat_id: str
    sender_id: str = ""
    owner: bool = False

    @property
    def scope(self) -> str:
        return f"{self.channel}:{self.chat_id}"

    def target(self) -> dict[str, str]:
        return {"channel": self.channel, "chat_id": self.chat_id}

    def sees(self, row: dict[str, Any]) -> bool:
        if self.owner:
            return True
        target = row.get("target") or {}
        mine = target.get("channel") == self.channel and target.get("chat_id") == self.chat_id
        return mine or row.get("owner_scope") == self.scope


class JobService:
    def __init__(self, rt: "Ports"):
        self.rt = rt

    # --- reading ---------------------------------------------------------------

    def view(self, row: dict[str, Any]) -> dict[str, Any]:
        """The dict every interface prints."""
        out = {k: row.get(k) for k in PUBLIC_KEYS if k != "schedule_text"}
        try:
            out["schedule_text"] = describe(row["schedule"], self._tz(row))
        except Exception:  # a stored schedule that no longer parses (hand-edited SQL)
            out["schedule_text"] = "invalid schedule"
        return out

    def list(self, actor: Actor) -> list[dict[str, Any]]:
        with self.rt.db.connect() as conn:
            rows = store.list_jobs(conn)
        return [self.view(r) for r in rows if actor.sees(r)]

    def get(self, actor: Actor, job_id: str, runs: int = 20) -> dict[str, Any]:
        with self.rt.db.connect() as conn:
            row = self._visible(conn, actor, job_id)
            history = store.runs(conn, job_id, limit=max(0, min(int(runs), 500)))
        return {**self.view(row), "runs": [{k: r.get(k) for k in RUN_KEYS} for r in history]}

    # --- changing ----------------------------------------------------------------

    def put(self, actor: Actor, data: Any) -> dict[str, Any]:
        """Create or replace a job (the job JSON); its target defaults to the actor's chat."""
        if isinstance(data, dict) and not data.get("id"):
            data = {**data, "id": f"job-{secrets.token_hex(4)}"}
        now = time.time()
        job = parse_job(data, self.rt.config, now=now, default_target=actor.target())
        if not actor.owner:
            if job.kind == "internal_event":
                raise JobForbidden("only the owner schedules internal events")
            t = job.target or {}
            if (t.get("channel"), t.get("chat_id")) != (actor.channel, actor.chat_id):
                raise JobForbidden("a job you create can only target this chat")
        with self.rt.db.begin() as conn:
            old = store.get(conn, job.id, for_update=True)
            if old is not None:
                if not actor.sees(old):
                    raise JobForbidden(f"job {job.id!r} belongs to another chat; pick another id")
                self._not_from_config(old, "replaced")
            job.source, job.owner_scope = "user", (old or {}).get("owner_scope") or actor.scope
            values = job.row()
            # put starts the job afresh: delay and interval count from now
            nxt = next_due(job.schedule, now, job.tz(self.rt.config), now)
            values.update(created_at=now, next_due_at=nxt, state="completed" if nxt is None else job.state)
            row = store.upsert(conn, values, now=now)
        self._push(job.id)
        return self.view(row)

    def delete(self, actor: Actor, job_id: str) -> dict[str, Any]:
        with self.rt.db.begin() as conn:
            row = self._visible(conn, actor, job_id)
            self._not_from_config(row, "deleted")
            store.delete_job(conn, job_id)
        self._remove(job_id)
        return {**self.view(row), "deleted": True}

    def pause(self, actor: Actor, job_id: str) -> dict[str, Any]:
        with self.rt.db.begin() as conn:
            row = self._visible(conn, actor, job_id)
            if row["state"] == "completed":
                raise JobError("state", "the job has completed; put it again to reschedule")
            store.set_state(conn, job_id, "paused")
            row = self._visible(conn, actor, job_id)  # as just written
        self._push(job_id)
        return self.view(row)

    def resume(self, actor: Actor, job_id: str) -> dict[str, Any]:
        now = time.time()
        with self.rt.db.begin() as conn:
            row = self._visible(conn, actor, job_id)
            nxt = next_due(row["schedule"], now, self._tz(row), row["created_at"])
            if nxt is None:
                raise JobError("state", "a one-shot job whose time has passed cannot resume; put it again")
            store.set_state(conn, job_id, "active", next_due_at=nxt, now=now)
            row = self._visible(conn, actor, job_id)  # as just written
        self._push(job_id)
        return self.view(row)

    def run_now(self, actor: Actor, job_id: str) -> dict[str, Any]:
        """Fire the job once now (due_at = now) through the queue; its schedule is unchanged."""
        with self.rt.db.connect() as conn:
            row = self._visible(conn, actor, job_id)
        now = time.time()
        self.rt.queue.enqueue_job(job_id, now)
        return {**self.view(row), "queued_due_at": now}

    # --- helpers -------------------------------------------------------------------

    def _tz(self, row: dict[str, Any]) -> str:
        return row.get("timezone") or self.rt.config.time.timezone

    def _visible(self, conn: Any, actor: Actor, job_id: Any) -> dict[str, Any]:
        if not isinstance(job_id, str) or not job_id:
            raise JobError("id", "a job id is required")
        row = store.get(conn, job_id)
        if row is None or not actor.sees(row):
            raise JobNotFound(job_id)  # another chat's job looks absent: ids do not leak
        return row

    @staticmethod
    def _not_from_config(row: dict[str, Any], verb: str) -> None:
        if row["source"] in ("config", "builtin"):
            where = "config.json (scheduler.jobs)" if row["source"] == "config" else "PicoBot itself (builtin)"
            raise JobForbidden(f"job {row['id']!r} comes from {where} and cannot be {verb} here; "
                               "pause or resume it, or edit the config")

    def _push(self, job_id: str) -> None:
        from picobot.scheduler import sync

        sync.push_job(self.rt, job_id)

    def _remove(self, job_id: str) -> None:
        from picobot.scheduler import sync

        sync.remove_job(self.rt, job_id)
