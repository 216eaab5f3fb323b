"""`picobot run channels:telegram:<key>` (`picobot telegram`): getUpdates long polling, one poller per bot token
across all processes.

A Redis lease (`picobot:telegram:poll:<bot id>`, 10 s, renewed by a thread) lets one process poll a
bot; the others stand by and take over when it dies. Each update is recorded in the SQL event inbox
(intake.py) before the offset moves past it: Telegram confirms an update only when the next
getUpdates asks for a higher offset, so a crash before that redelivers it and the inbox dedupes it.
If recording fails (the database is away) the batch is polled again later, offset unchanged.

Errors never end the process: 409 (another getUpdates for this token elsewhere, or a webhook is set),
401/404 (a wrong token), 429, 5xx and network errors back off (jittered, capped at 60 s; 429 waits its
retry_after) and show in the heartbeat (status.py) that /health reads. SIGTERM/SIGINT stop it at
once: a long poll in flight is abandoned (nothing it returned was confirmed, so nothing is lost); the
process's stop event set from elsewhere stops it after the poll at hand.
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from picobot.channels import polling
from picobot.channels.telegram import intake, keys, setup, status
from picobot.channels.telegram.api import TelegramApi, TelegramError
from picobot.coord import KeptLease
from picobot.security.redact import redact

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.channels.telegram.config import TelegramConfig

log = logging.getLogger("picobot.channels.telegram")

LEASE_TTL_SECS = 10.0
STANDBY_POLL_SECS = 1.0
BACKOFF_CAP_SECS = 60.0
SHUTDOWN_DEADLINE_SECS = 10.0


class _Stopping(Exception):
    """Raised by the signal handler to abandon a long poll in flight."""


def backoff_delay(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry `attempt` (0-based): 0.5-1 s, 1-2 s, 2-4 s, … up to BACKOFF_CAP_SECS."""
    return polling.backoff_delay(attempt, rand, base=1.0, cap=BACKOFF_CAP_SECS)


class Poller:
    def __init__(self, rt: ChannelPorts, cfg: TelegramConfig, channel: str = "telegram",
                 lease_ttl: float = LEASE_TTL_SECS, stopping: threading.Event | None = None):
        self.rt, self.cfg, self.channel = rt, cfg, channel
        self.api = TelegramApi(cfg.token, cfg.base_url, redis=rt.redis)
        self.lease = KeptLease(rt.redis, keys.poll(self.api.bot_id), lease_ttl, renew_secs=lease_ttl / 3)
        self.offset: int | None = None
        self._stop = stopping if stopping is not None else threading.Event()  # a plugin process's ctx.stopping
        self._in_poll = False
        self._failing: str | None = None  # the kind of error of the current streak (logged once)
        self._last_update_at: float | None = None
        self._redis_ok = True

    # ---- process lifecycle ---------------------------------------------------------------

    def run(self) -> int:
        """Poll until SIGTERM/SIGINT (or request_stop(), or the stop event set); 0 after a stop."""
        previous = polling.on_stop_signals(self._on_signal)
        try:
            self._main()
        except _Stopping:
            pass
        finally:
            polling.restore_signals(previous)
            self._in_poll = False
            try:
                self.lease.release()
            except Exception:  # it expires by itself
                pass
            self.api.close()
        log.info("telegram poller (%s): stopped", self.channel)
        return 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("telegram poller (%s): %s received, stopping", self.channel, signal.Signals(signum).name)
        self.request_stop(deadline=SHUTDOWN_DEADLINE_SECS)
        if self._in_poll:
            self._in_poll = False
            raise _Stopping()

    def request_stop(self, deadline: float | None = None) -> None:
        """Stop after the step at hand; with a deadline (the process's signal), exit after it at the latest."""
        if not self._stop.is_set():
            self._stop.set()
            if deadline is not None:
                threading.Thread(target=_exit_after, args=(deadline,), daemon=True).start()

    def serve(self) -> None:
        """Poll in this thread until request_stop() (no signal handlers: for a thread of a bigger process)."""
        try:
            self._main()
        finally:
            self.api.close()

    # ---- lease: hold it or stand by -------------------------------------------------------

    def _main(self) -> None:
        waiting_logged = False
        while not self._stop.is_set():
            if self._acquire():
                waiting_logged = False
                try:
                    self._hold()
                finally:
                    self.lease.release()
                continue
            if not waiting_logged:
                log.info("telegram poller (%s): standing by; another process polls bot %s", self.channel,
                         self.api.bot_id)
                waiting_logged = True
            self._stop.wait(STANDBY_POLL_SECS)

    def _acquire(self) -> bool:
        try:
            held = self.lease.acquire()
        except Exception as exc:
            if self._redis_ok:
                log.warning("telegram poller (%s): Redis unavailable (%s); retrying", self.channel, type(exc).__name__)
            self._redis_ok = False
            return False
        self._redis_ok = True
        return held

    def _hold(self) -> None:
        log.info("telegram poller (%s): this process polls bot %s", self.channel, self.api.bot_id)
        self._prepare()
        attempt = 0
        while not self._stop.is_set():
            if not self.lease.held:
                log.warning("telegram poller (%s): lost the lease to another process; standing by", self.channel)
                return
            try:
                updates = self._poll()
                self._handle(updates)
            except TelegramError as exc:
                delay = self._on_error(exc, attempt)
            except _Stopping:
                raise
            except Exception as exc:  # the database or Redis away: poll the same batch again later
                delay = self._on_error(exc, attempt)
            else:
                if self._failing:
                    log.info("telegram poller (%s): polling again", self.channel)
                self._failing = None
                attempt = 0
                self._beat(state="polling", last_error="")
                continue
            attempt += 1
            self._stop.wait(delay)

    def _prepare(self) -> None:
        """Once per hold: the command menu, and no webhook (getUpdates answers 409 while one is set)."""
        setup.register_commands(self.rt, self.cfg, self.api, self.channel)
        try:
            self.api.delete_webhook()
        except Exception as exc:
            log.info("telegram poller (%s): deleteWebhook failed (%s)", self.channel, self._clean(exc))

    # ---- one poll -------------------------------------------------------------------------

    def _poll(self) -> list[Any]:
        self._in_poll = True
        try:
            if self._stop.is_set():
                raise _Stopping()
            return self.api.get_updates(self.offset, self.cfg.poll_timeout_secs, setup.ALLOWED_UPDATES)
        finally:
            self._in_poll = False

    def _handle(self, updates: list[Any]) -> None:
        """Record each update, then move the offset past it (never past one that failed to record)."""
        for raw in sorted(updates, key=lambda u: intake.update_id(u) or -1):
            uid = intake.update_id(raw)
            if uid is None:
                log.info("telegram poller (%s): an update without an update_id was skipped", self.channel)
                continue
            try:
                outcome = intake.accept(self.rt, self.channel, intake.clean(raw))
            except intake.Malformed as exc:
                log.info("telegram poller (%s): update %d ignored: %s", self.channel, uid, exc)
                outcome = intake.IGNORED
            if outcome == intake.RECORDED:
                self._last_update_at = time.time()
            self.offset = max(self.offset or 0, uid + 1)

    # ---- errors and the heartbeat ---------------------------------------------------------

    def _on_error(self, exc: Exception, attempt: int) -> float:
        code = getattr(exc, "code", None)
        if isinstance(exc, TelegramError) and code == 409:
            state = "conflict"
            if exc.says("webhook is active") and self.cfg.mode == "polling":
                self._prepare_again()
        elif isinstance(exc, TelegramError) and code in (401, 403, 404):
            state = "unauthorized"  # a wrong or revoked token: keep trying, slowly
            attempt = max(attempt, 5)
        else:
            state = "error"
        retry_after = getattr(exc, "retry_after", None)
        delay = min(float(retry_after), 3600.0) if retry_after else backoff_delay(attempt)
        error = self._clean(exc)
        if self._failing != state:
            log.warning("telegram poller (%s): %s (%s); retrying in %.1f s", self.channel, state, error, delay)
            self._failing = state
        else:
            log.debug("telegram poller (%s): %s again; retrying in %.1f s", self.channel, state, delay)
        self._beat(state=state, last_error=error)
        return delay

    def _prepare_again(self) -> None:
        try:
            self.api.delete_webhook()
        except Exception as exc:
            log.info("telegram poller (%s): deleteWebhook failed (%s)", self.channel, self._clean(exc))

    def _clean(self, exc: Exception) -> str:
        text = str(exc) if isinstance(exc, TelegramError) else type(exc).__name__
        return redact(text, self.rt.secrets)[:300]

    def _beat(self, **fields: Any) -> None:
        fields.update(last_poll_at=f"{time.time():.3f}", offset=self.offset or "", pid=os.getpid(),
                      bot_id=self.api.bot_id)
        if self._last_update_at is not None:
            fields["last_update_at"] = f"{self._last_update_at:.3f}"
        try:
            status.write(self.rt.redis, self.channel, **fields)
        except Exception:  # the heartbeat is for /health; polling goes on without it
            pass


def polling_channels(config: Any) -> list[str]:
    """Keys of the enabled Telegram channels in polling mode: the instances of `channels:telegram`."""
    keys = []
    for key, channel in config.channels.items():
        extra = channel.model_extra or {}
        if (channel.type or key) == "telegram" and channel.enabled and extra.get("mode", "polling") == "polling":
            keys.append(key)
    return keys


def run_process(ctx: Any) -> None:
    """`picobot run channels:telegram:<key>`: poll channels.<key> until ctx.stopping is set (SIGTERM, Ctrl-C)."""
    from picobot.channels.telegram.config import TelegramConfig

    rt = polling.process_runtime(ctx)
    cfg = TelegramConfig.from_channel(rt.config.channels[ctx.instance])
    Poller(rt, cfg, channel=ctx.instance, stopping=ctx.stopping).run()


def _exit_after(seconds: float) -> None:
    polling.exit_after(seconds, "telegram poller")
