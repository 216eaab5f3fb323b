"""LiveRelay: follows turn events on Redis pub/sub and drives the LiveHooks of external channels.

Runs in the web process (web/app.py starts it when an enabled channel has live capabilities). For a
turn of a session on such a channel (session id ``channel:chat_id:dialog``) one process claims the
turn (``SET picobot:live:<turn_id> NX``), then calls the channel's hooks: turn_started (with the
platform message id of the turn's input, read from SQL), snapshot (latest-wins, at most
``1/min_interval`` per turn) and turn_finished. Hooks run on a small thread pool, one turn's calls in
order, so a slow platform never blocks the subscriber; a hook that raises is logged and forgotten.
Progress here is best effort: the final answer goes through the outbox.
"""

from __future__ import annotations

import atexit
import json
import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sqlalchemy import select

from picobot.channels import keys
from picobot.runtime.publisher import follow_events
from picobot.storage.models import InboundRow, SessionRow
from picobot.threadpool import watchdog

if TYPE_CHECKING:
    from picobot.channels.base import LiveHooks
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger("picobot.channels.live")

CLAIM_TTL_SECS = 3600
IDLE_TURN_SECS = 3600  # a turn not heard of this long is forgotten (its completion was missed)


claim_key = keys.live_claim


@dataclass
class _Turn:
    turn_id: str
    session_id: str
    chat_id: str
    hooks: LiveHooks
    inbound_seqs: list[int] = field(default_factory=list)
    started: bool = False
    pending: dict | None = None      # the newest snapshot not yet handed to the hooks
    finished: dict | None = None     # the turn_completed event, once seen
    running: bool = False            # a pool thread drains this turn, or it waits for its next snapshot's time
    waiting: bool = False            # waiting out min_interval on the watchdog (no thread held)
    last_call: float = 0.0
    seen: float = field(default_factory=time.monotonic)


class LiveRelay:
    def __init__(self, rt: ChannelPorts, *, workers: int = 4, min_interval: float = 0.5):
        self.rt = rt
        self.min_interval = min_interval
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="live-relay")
        self._turns: dict[str, _Turn | None] = {}  # None = another process claimed it, or not ours
        self._routes: dict[str, tuple[str, str] | None] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.calls = 0  # hook calls made (for the health page and tests)

    def start(self) -> LiveRelay:
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._run, name="live-relay", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _run(self) -> None:
        # a turn whose events were missed while Redis restarted only loses its progress
        follow_events(self.rt.redis, self._stop, self.dispatch, "live relay")

    # ---- events ------------------------------------------------------------------------------

    def dispatch(self, data: Any) -> None:
        """One pub/sub message; never raises."""
        try:
            frame = json.loads(data)
            if isinstance(frame, dict) and frame.get("type") in ("turn_updated", "turn_completed"):
                self._event(frame)
        except Exception as exc:
            log.warning("live relay: event not handled: %s", exc)

    def _event(self, frame: dict) -> None:
        turn_id, session_id = frame.get("turn_id"), frame.get("session_id")
        if not (isinstance(turn_id, str) and isinstance(session_id, str) and turn_id):
            return
        turn = self._turn(turn_id, session_id)
        if turn is None:
            if frame["type"] == "turn_completed":
                with self._lock:
                    self._turns.pop(turn_id, None)
            return
        with self._lock:
            turn.seen = time.monotonic()
            if frame["type"] == "turn_updated":
                turn.pending = frame
                turn.inbound_seqs = [s for s in frame.get("inbound_seqs") or [] if isinstance(s, int)]
            else:
                turn.finished, turn.pending = frame, None
            if not turn.running:
                turn.running = True
                waiting = False
            elif turn.waiting and turn.finished is not None:  # the end does not wait for an interval
                waiting = True
            else:
                return  # the thread draining it, or its timer, takes the new state
        if waiting:
            self._resume(turn)
        else:
            self._pool.submit(self._drain, turn)

    def _turn(self, turn_id: str, session_id: str) -> _Turn | None:
        with self._lock:
            if turn_id in self._turns:
                return self._turns[turn_id]
        turn = None
        route = self._route(session_id)
        hooks = self._hooks(route[0]) if route else None
        if route and hooks is not None and self.rt.redis.set(claim_key(turn_id), self.rt.worker_name,
                                                              nx=True, ex=CLAIM_TTL_SECS):
            turn = _Turn(turn_id, session_id, route[1], hooks)
        with self._lock:
            self._prune()
            return self._turns.setdefault(turn_id, turn)

    def _prune(self) -> None:
        now = time.monotonic()
        for turn_id, turn in list(self._turns.items()):
            if turn is not None and now - turn.seen > IDLE_TURN_SECS and not turn.running:
                del self._turns[turn_id]
        if len(self._turns) > 10_000:  # foreign turns whose completion we missed
            for turn_id in [t for t, v in self._turns.items() if v is None][:5_000]:
                del self._turns[turn_id]

    def _route(self, session_id: str) -> tuple[str, str] | None:
        """(channel, chat_id) of a session on an external live channel, else None."""
        if session_id in self._routes:
            return self._routes[session_id]
        parts = session_id.split(":")
        route = (parts[0], ":".join(parts[1:-1])) if len(parts) >= 3 else self._route_sql(session_id)
        if route is not None and not self.rt.channels.external(route[0]):
            route = None
        if len(self._routes) > 10_000:
            self._routes.clear()
        self._routes[session_id] = route
        return route

    def _route_sql(self, session_id: str) -> tuple[str, str] | None:
        with self.rt.db.connect() as conn:
            row = conn.execute(select(SessionRow.channel, SessionRow.chat_id)
                               .where(SessionRow.id == session_id)).first()
        return (row[0], row[1]) if row else None

    def _hooks(self, channel: str) -> LiveHooks | None:
        adapter = self.rt.channels.get(channel)
        if adapter is None or not adapter.capabilities.live:
            return None
        return adapter.live()

    # ---- hook calls (pool threads) -----------------------------------------------------------

    def _drain(self, turn: _Turn) -> None:
        """Hand a turn's newest state to its hooks, in order, until nothing is left.

        A snapshot that comes within `min_interval` of the turn's previous one waits on the watchdog, not on a
        pool thread: the pool's few threads keep serving the other turns meanwhile (a thread that slept through
        every turn's interval left ~8 hook calls a second for all live turns together)."""
        while True:
            with self._lock:
                snapshot, finished = turn.pending, turn.finished
                if snapshot is None and finished is None:
                    turn.running = False
                    return
                wait = turn.last_call + self.min_interval - time.monotonic()
                if finished is None and wait > 0:
                    turn.waiting = True  # the newest snapshot stays pending; _resume drains again
                    watchdog().arm(wait, lambda: self._resume(turn))
                    return
                turn.pending = None
            if not turn.started and snapshot is not None:
                turn.started = True
                self._call(turn.hooks.turn_started, turn.chat_id, self._reply_to(turn), turn.turn_id)
            if snapshot is not None:
                if turn.finished is None:
                    turn.last_call = time.monotonic()
                    self._call(turn.hooks.snapshot, turn.chat_id, turn.turn_id, snapshot)
                continue
            self._call(turn.hooks.turn_finished, turn.chat_id, turn.turn_id, finished)
            with self._lock:
                self._turns.pop(turn.turn_id, None)
                turn.running = False
            return

    def _resume(self, turn: _Turn) -> None:
        """A waiting turn goes back to the pool (its interval is over, or it finished meanwhile); once."""
        with self._lock:
            if not turn.waiting:
                return
            turn.waiting = False
        try:
            self._pool.submit(self._drain, turn)
        except RuntimeError:  # the relay stopped
            pass

    def _call(self, fn: Any, *args: Any) -> None:
        self.calls += 1
        try:
            fn(*args)
        except Exception as exc:
            log.warning("live hook %s failed: %s", getattr(fn, "__name__", fn), exc)

    def _reply_to(self, turn: _Turn) -> str | None:
        """The platform message id of the turn's last input (what a reply or reaction attaches to)."""
        query = select(InboundRow.platform_message_id).where(InboundRow.session_id == turn.session_id)
        if turn.inbound_seqs:
            query = query.where(InboundRow.seq.in_(turn.inbound_seqs))
        try:
            with self.rt.db.connect() as conn:  # no seqs yet: the session's newest input
                return conn.execute(query.order_by(InboundRow.seq.desc()).limit(1)).scalar()
        except Exception as exc:
            log.warning("live relay: no reply target for turn %s: %s", turn.turn_id, exc)
            return None


def start_relay(rt: ChannelPorts) -> LiveRelay | None:
    """A started relay when some enabled external channel shows live progress, else None."""
    live = [name for name in rt.channels.names()
            if (adapter := rt.channels.get(name)) is not None and adapter.capabilities.live]
    if not live:
        return None
    relay = LiveRelay(rt).start()
    atexit.register(relay.stop)
    log.info("live relay started for %s", ", ".join(live))
    return relay
