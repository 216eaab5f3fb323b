"""Fire many due times at once (a burst), each exactly once, in one SQL transaction.

Beat sends the job entries due in a tick as batches of at most FIRE_BATCH_MAX (job_id, due_at)
pairs (task picobot.scheduler.fire_batch). `fire_batch`:

    claim(rt, pairs)  -- one transaction:
      load the jobs; per pair (sorted: one lock order for every batch):
        job gone / not active                  -> "inactive"
        due time is not the job's next_due_at  -> "duplicate" (a run exists) or "stale"
        internal_event                         -> fired after the commit, one by one (fire.fire)
        its next due time (cannot be computed -> fired alone, after the commit)
      claim every run in one statement (UNIQUE (job_id, due_at): taken already -> "duplicate"),
      advance the claimed jobs' next_due_at in one executemany (a one-shot ends `completed`);
      per claimed job:
        savepoint: the kind's SQL effect -- outbound_message: the outbox row keyed
                   `j:<job_id>:<due_at>` (external channel); agent kinds: the stored input
                   `job:<job_id>:<due_at>`. An error rolls back only this savepoint: the run is
                   recorded `failed`, the other jobs go on.
        outbound_message to a web, cli_chat or scheduler chat: its chat's current dialog (looked up,
                   or created, once per chat and batch); the message is held for that dialog
      the held messages, one dialog at a time (sorted): one position reservation and one insert
      per dialog, in a savepoint (on an error, again one message per savepoint, so a failure stays
      that job's). The dialog's row lock (PostgreSQL) is taken here, right before the commit, so
      batches to one chat overlap until then instead of queueing for their whole transaction;
      outbound runs end `ok`/`failed` in the same transaction; agent runs stay `running` (the
      turn's end records them); every claimed run's created_at/started_at is stamped just before
      the commit, so "claimed" means "claimed and its effect stored".
    Batch.finish(rt)  -- after the commit: the redbeat entries of the advanced jobs in one
      pipeline, the `message` events, the outbox lanes woken, the agent turns enqueued, then the
      internal_event jobs fired one by one.

Nothing is lost when the worker dies after the commit: the outbox sweeper wakes lanes with due
rows, the session sweeper runs pending input, and the 30 s sync re-writes entries of jobs whose
next due time has no entry. If the batch transaction itself fails, every pair is fired one by one
(fire.fire); the UNIQUE claim keeps that exactly once too.
"""

from __future__ import annotations

import logging
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Iterator

from sqlalchemy import update

from picobot.scheduler import kinds
from picobot.scheduler import redbeat_entries as entries

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.scheduler")

FIRE_BATCH_MAX = 200  # pairs per task: one SQLite transaction of about this many fires stays well under a second
BATCHED_KINDS = ("outbound_message", "agent_task", "silent_agent_task")  # SQL effects only


@dataclass
class Batch:
    outcomes: dict[tuple[str, float], str] = field(default_factory=dict)
    entries: dict[str, float | None] = field(default_factory=dict)  # job id -> its next wake-up (None: none)
    repush: list[str] = field(default_factory=list)  # advanced by someone else meanwhile: read SQL again
    one_by_one: list[tuple[str, float]] = field(default_factory=list)
    after: kinds.After = field(default_factory=kinds.After)
    dialogs: dict[tuple[str, str], str] = field(default_factory=dict)  # (channel, chat_id) -> its current dialog
    held: dict[str, list[tuple[int, str]]] = field(default_factory=dict)  # dialog -> [(run id, text)] to store

    def finish(self, rt: "Ports") -> None:
        """Everything after the commit; each step best effort (the sweepers and the sync repair)."""
        from picobot.scheduler import sync
        from picobot.scheduler.fire import fire

        try:
            with rt.redis.pipeline(transaction=False) as pipe:
                for job_id, due in self.entries.items():
                    if due is None:
                        entries.delete(pipe, job_id)
                    else:
                        entries.write(pipe, job_id, due)
                pipe.execute()
            for job_id in self.repush:
                sync.push_job(rt, job_id)
        except Exception:  # the sync (every 30 s) writes the entry of a job whose next due time has none
            log.exception("scheduler: re-writing the entries of a fired batch failed")
        self.after.run(rt)
        for job_id, due_at in self.one_by_one:
            try:
                self.outcomes[(job_id, due_at)] = fire(rt, job_id, due_at)
            except Exception:
                log.exception("job %s due %s: firing failed", job_id, due_at)
                self.outcomes[(job_id, due_at)] = "error"


def pairs_of(raw: Any) -> list[tuple[str, float]]:
    """The well-formed (job_id, due_at) pairs of a task's argument, sorted and without repeats."""
    out = set()
    for item in raw if isinstance(raw, (list, tuple)) else ():
        if (isinstance(item, (list, tuple)) and len(item) == 2 and isinstance(item[0], str)
                and isinstance(item[1], (int, float)) and not isinstance(item[1], bool) and math.isfinite(item[1])):
            out.add((item[0], float(item[1])))
    return sorted(out)


def fire_batch(rt: "Ports", raw_pairs: Any) -> dict[str, int]:
    """Fire these due times (each exactly once); returns how many ended with each outcome.
    Malformed items of `raw_pairs` are ignored."""
    pairs = pairs_of(raw_pairs)
    if not rt.config.scheduler.enabled:
        return {"disabled": len(pairs)}
    try:
        batch = claim(rt, pairs)
    except Exception:  # the transaction failed as a whole: nothing of it is stored; one by one instead
        log.exception("scheduler: a batch of %d fires failed; firing them one by one", len(pairs))
        batch = Batch(one_by_one=list(pairs))
    batch.finish(rt)
    counts: dict[str, int] = {}
    for outcome in batch.outcomes.values():
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


def claim(rt: "Ports", pairs: list[tuple[str, float]]) -> Batch:
    """The batch's one transaction (see the module doc); `Batch.finish` does the rest after the commit."""
    from picobot.scheduler.fire import end_run, job_view
    from picobot.scheduler.schedules import next_due
    from picobot.storage import jobs as store

    batch = Batch()
    claimed: list[int] = []
    ok: dict[int, str] = {}  # run id -> job id
    failed: list[tuple[int, str | None]] = []
    todo: list[tuple[Any, float, float, float | None]] = []  # (job, due_at, its next_due_at, the one after)
    with rt.db.begin() as conn:
        ids = sorted({job_id for job_id, _ in pairs})
        jobs = {row["id"]: job_view(row) for row in store.get_many(conn, ids)}
        for job_id, due_at in pairs:
            job = jobs.get(job_id)
            if job is None or job.state != "active":
                batch.outcomes[(job_id, due_at)] = "inactive"
                continue
            if job.next_due_at is None or abs(float(job.next_due_at) - due_at) >= 1e-6:
                seen = store.run_for(conn, job_id, due_at) is not None
                batch.outcomes[(job_id, due_at)] = "duplicate" if seen else "stale"
                continue
            if job.kind not in BATCHED_KINDS:
                batch.one_by_one.append((job_id, due_at))
                continue
            try:  # the next due time first: a schedule that cannot be evaluated has written nothing yet
                nxt = next_due(job.schedule, due_at, job.timezone or rt.config.time.timezone, job.created_at)
            except Exception:
                log.exception("job %s due %s: its next due time failed; firing it alone", job_id, due_at)
                batch.one_by_one.append((job_id, due_at))
                continue
            expect = float(job.next_due_at)
            job.next_due_at, job.state = nxt, "active" if nxt is not None else "completed"
            todo.append((job, due_at, expect, nxt))
        # every claim in one statement, every advance in one executemany (a statement per job each was
        # most of a batch's time)
        run_ids = store.claim_runs(conn, [(job.id, due_at) for job, due_at, _, _ in todo])
        claims = [(job, due_at, expect, nxt) for job, due_at, expect, nxt in todo if (job.id, due_at) in run_ids]
        for job, due_at, _, _ in todo:
            if (job.id, due_at) not in run_ids:
                batch.outcomes[(job.id, due_at)] = "duplicate"
        if store.advance_many(conn, [(job.id, expect, nxt) for job, _, expect, nxt in claims]) == len(claims):
            batch.entries.update({job.id: nxt for job, _, _, nxt in claims})
        else:  # someone moved a job meanwhile (PostgreSQL): its entry is written from SQL after the commit
            batch.repush.extend(job.id for job, _, _, _ in claims)
        for job, due_at, _, _ in claims:
            run_id = run_ids[(job.id, due_at)]
            claimed.append(run_id)
            outcome, error = _effect(rt, conn, job, due_at, run_id, batch)
            batch.outcomes[(job.id, due_at)] = outcome
            if outcome == "ok":
                ok[run_id] = job.id
            elif outcome == "failed":
                failed.append((run_id, error))
                log.warning("job %s due %s failed: %s", job.id, due_at, error)
        if batch.held:
            pair_of = {run_id: pair for pair, run_id in run_ids.items()}
            for run_id, error in _store_held(conn, batch).items():
                ok.pop(run_id, None)
                batch.outcomes[pair_of[run_id]] = "failed"
                failed.append((run_id, error))
                log.warning("job %s due %s failed: %s", *pair_of[run_id], error)
        _stamp(conn, claimed, ok)
        for run_id, error in failed:
            end_run(conn, run_id, "failed", error)
    return batch


def _effect(rt: "Ports", conn: "Connection", job: Any, due_at: float, run_id: int,
            batch: Batch) -> tuple[str, str | None]:
    """The kind's SQL in a savepoint of its own (a web, cli_chat or scheduler chat's message is held for its
    dialog instead: `_hold`); (outcome, error)."""
    from picobot.storage import jobs as store

    try:
        if job.kind == "outbound_message":
            text = str(job.payload.get("text") or job.payload.get("prompt") or "")
            if not text.strip():
                return "failed", "payload.text is empty"
            target = job.target or {}
            chat = (str(target.get("channel") or ""), str(target.get("chat_id") or ""))
            if chat[0] in kinds.LOCAL_CHANNELS and chat[1]:
                _hold(conn, batch, chat, run_id, text)
                return "ok", None
        with _savepoint(conn):
            if job.kind == "outbound_message":
                after = kinds.store_delivery(rt, conn, target, text, key=f"j:{job.id}:{due_at!r}")
                batch.after.merge(after)
                return "ok", None
            session_id = kinds.store_input(rt, conn, job, due_at)
            if (job.payload or {}).get("fresh_session"):  # a chat's current dialog changed: look them up again
                batch.dialogs.clear()
            store.set_run_session(conn, run_id, session_id)
            if session_id not in batch.after.turns:
                batch.after.turns.append(session_id)
            return "running", None
    except Exception as exc:  # a bug or a bad target: this job's run fails, the batch goes on
        log.exception("job %s failed", job.id)
        return "failed", f"{type(exc).__name__}: {exc}"[:2000]


def _hold(conn: "Connection", batch: Batch, chat: tuple[str, str], run_id: int, text: str) -> None:
    """A message to a web, cli_chat or scheduler chat, stored with its dialog's others by `_store_held`."""
    from picobot.storage import sessions

    dialog = batch.dialogs.get(chat)
    if dialog is None:
        with _savepoint(conn):
            dialog = sessions.current_or_create_id(conn, *chat)
        batch.dialogs[chat] = dialog
    batch.held.setdefault(dialog, []).append((run_id, text))


def _store_held(conn: "Connection", batch: Batch) -> dict[int, str]:
    """Store the held messages, each dialog's in one reservation and one insert; queue their `message`
    events. Returns the runs whose message could not be stored, with the error."""
    from picobot.storage import messages

    failed: dict[int, str] = {}
    for dialog in sorted(batch.held):  # one lock order for every batch (PostgreSQL row locks)
        held = batch.held[dialog]
        rows = [kinds.job_message(text) for _, text in held]
        try:
            with _savepoint(conn):
                messages.append(conn, dialog, None, rows)
            stored = held
        except Exception:
            log.exception("scheduler: storing %d job messages in %s together failed; one by one", len(held), dialog)
            stored = []
            for item, row in zip(held, rows):
                try:
                    with _savepoint(conn):
                        messages.append(conn, dialog, None, [row])
                    stored.append(item)
                except Exception as exc:
                    failed[item[0]] = f"{type(exc).__name__}: {exc}"[:2000]
        batch.after.events += [kinds.message_event(dialog, text) for _, text in stored]
    return failed


@contextmanager
def _savepoint(conn: "Connection") -> Iterator[None]:
    """A plain SAVEPOINT: SQLAlchemy's begin_nested compiles its statements anew each time, which
    cost more than the job's own SQL here."""
    conn.exec_driver_sql("SAVEPOINT picobot_job")
    try:
        yield
    except BaseException:
        conn.exec_driver_sql("ROLLBACK TO SAVEPOINT picobot_job")
        conn.exec_driver_sql("RELEASE SAVEPOINT picobot_job")
        raise
    conn.exec_driver_sql("RELEASE SAVEPOINT picobot_job")


def _stamp(conn: "Connection", claimed: list[int], ok: dict[int, str]) -> None:
    """Claimed runs: created/started now, just before the commit that makes them and their effects
    visible; the outbound ones end `ok` (and their jobs' last_outcome with them)."""
    from picobot.storage import jobs as store

    if not claimed:
        return
    now = time.time()
    runs, jobs = store.RUNS, store.JOBS
    conn.execute(update(runs).where(runs.c.id.in_(claimed)).values(created_at=now, started_at=now))
    if ok:
        conn.execute(update(runs).where(runs.c.id.in_(list(ok)), runs.c.outcome == "running")
                     .values(outcome="ok", ended_at=now))
        conn.execute(update(jobs).where(jobs.c.id.in_(sorted(set(ok.values())))).values(last_outcome="ok"))


