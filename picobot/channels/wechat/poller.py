"""`picobot run channels:wechat:<key>` (`picobot wechat`): the getupdates long poll of one WeChat account, one
poller per account.

A Redis lease (`picobot:wechat:poll:<channel>`, 10 s, renewed by a thread) lets one process poll;
the others stand by and take over when it dies. Each message is recorded (intake.py: allow_from,
24 h replay keys, the event inbox) before the cursor moves on; the cursor is persisted in SQL, and
only when iLink hands a non-empty one. If recording fails (the database is away) the cursor stays
and the same batch is asked for again.

With no credentials the poller waits for `picobot channels login` (state login_required). On -14
(the login was revoked or expired) it stops polling, marks the channel login_required, tells the
owner on `owner_chat` if set, and polls again as soon as a new login is saved — no restart. Other
errors back off (jittered, capped at 60 s). SIGTERM/SIGINT stop it at once: a long poll in flight
is abandoned (its messages were not confirmed: the cursor did not move); the process's stop event set
from elsewhere stops it after the poll at hand.
"""

from __future__ import annotations

import logging
import random
import signal
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from picobot.channels import polling
from picobot.channels.wechat import creds, intake, keys, state, status
from picobot.channels.wechat.api import IlinkApi, IlinkError
from picobot.coord import KeptLease

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts
    from picobot.channels.wechat.config import WeChatConfig

log = logging.getLogger("picobot.channels.wechat")

LEASE_TTL_SECS = 10.0
STANDBY_POLL_SECS = 1.0
LOGIN_CHECK_SECS = 1.0
BACKOFF_CAP_SECS = 60.0
PRUNE_EVERY_SECS = 600.0
SHUTDOWN_DEADLINE_SECS = 10.0


class _Stopping(Exception):
    """Raised by the signal handler to abandon a long poll in flight."""


def backoff_delay(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry `attempt` (0-based): 0.5-1 s, 1-2 s, 2-4 s, … up to BACKOFF_CAP_SECS."""
    return polling.backoff_delay(attempt, rand, base=1.0, cap=BACKOFF_CAP_SECS)


class Poller:
    def __init__(self, rt: ChannelPorts, cfg: WeChatConfig, channel: str = "wechat",
                 lease_ttl: float = LEASE_TTL_SECS, stopping: threading.Event | None = None):
        self.rt, self.cfg, self.channel = rt, cfg, channel
        self.cred_path: Path = cfg.credentials_path(rt.config.home)
        self.lease = KeptLease(rt.redis, keys.poll(channel), lease_ttl, renew_secs=lease_ttl / 3)
        self._stop = stopping if stopping is not None else threading.Event()  # a plugin process's ctx.stopping
        self._in_poll = False
        self._dead_token: str | None = None  # the token iLink answered -14 for: wait for another
        self._pruned_at = 0.0

    # ---- process lifecycle ---------------------------------------------------------------

    def run(self) -> int:
        """Poll until SIGTERM/SIGINT (or the stop event set); 0 after a stop."""
        previous = polling.on_stop_signals(self._on_signal)
        try:
            self._main()
        except _Stopping:
            pass
        finally:
            polling.restore_signals(previous)
            self._in_poll = False
            self.lease.release()
        log.info("wechat poller (%s): stopped", self.channel)
        return 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("wechat poller (%s): %s received, stopping", self.channel, signal.Signals(signum).name)
        self.request_stop()
        if self._in_poll:
            self._in_poll = False
            raise _Stopping()

    def request_stop(self) -> None:
        if not self._stop.is_set():
            self._stop.set()
            threading.Thread(target=_exit_after, args=(SHUTDOWN_DEADLINE_SECS,), daemon=True).start()

    # ---- lease: hold it or stand by -------------------------------------------------------

    def _main(self) -> None:
        waiting_logged = False
        while not self._stop.is_set():
            try:
                held = self.lease.acquire()
            except Exception as exc:
                log.warning("wechat poller (%s): Redis unavailable (%s); retrying", self.channel, type(exc).__name__)
                held = False
            if held:
                waiting_logged = False
                try:
                    self._hold()
                finally:
                    self.lease.release()
                continue
            if not waiting_logged:
                log.info("wechat poller (%s): standing by; another process polls this account", self.channel)
                waiting_logged = True
            self._stop.wait(STANDBY_POLL_SECS)

    def _hold(self) -> None:
        log.info("wechat poller (%s): this process polls the account", self.channel)
        attempt = 0
        while not self._stop.is_set() and self.lease.held:
            login = self._login()
            if login is None:
                self._stop.wait(LOGIN_CHECK_SECS)
                continue
            try:
                self._poll_once(login)
                attempt = 0
            except IlinkError as exc:
                if exc.session_expired:
                    self._expired(login)
                    continue
                delay = backoff_delay(attempt)
                attempt += 1
                log.warning("wechat poller (%s): getupdates failed (%s); again in %.1f s", self.channel, exc, delay)
                self._beat(status.ERROR, str(exc))
                self._stop.wait(delay)
            except _Stopping:
                raise
            except Exception as exc:  # the database or Redis away: ask for the same batch again later
                delay = backoff_delay(attempt)
                attempt += 1
                log.warning("wechat poller (%s): %s; again in %.1f s", self.channel, type(exc).__name__, delay)
                self._stop.wait(delay)
        if not self.lease.held:
            log.warning("wechat poller (%s): lost the lease to another process; standing by", self.channel)

    # ---- login --------------------------------------------------------------------------

    def _login(self) -> creds.Credentials | None:
        login = creds.load(self.cred_path)
        if login is None or not login.usable or login.token == self._dead_token:
            self._beat(status.LOGIN_REQUIRED, self._login_detail())
            return None
        if self._dead_token is not None:
            log.info("wechat poller (%s): a new login was saved; polling again", self.channel)
            self._dead_token = None
        return login

    def _login_detail(self) -> str:
        if self._dead_token is not None:
            return f"the WeChat login expired (-14); {status.login_hint(self.channel)}"
        return status.login_hint(self.channel)

    def _expired(self, login: creds.Credentials) -> None:
        log.warning("wechat poller (%s): the login expired or was revoked (-14); waiting for a new login "
                    "(`picobot channels login %s`)", self.channel, self.channel)
        self._dead_token = login.token
        try:
            creds.mark_expired(self.cred_path, login.token)
        except OSError as exc:
            log.warning("wechat poller (%s): could not mark the login expired (%s)", self.channel, exc)
        self._beat(status.LOGIN_REQUIRED, self._login_detail())
        self._tell_owner(login)

    def _tell_owner(self, login: creds.Credentials) -> None:
        target = self.cfg.owner_chat
        if not target:
            return
        channel, _, chat_id = target.partition(":")
        from picobot.channels import outbound

        text = (f"⚠ The WeChat channel {self.channel!r} was logged out (iLink -14): it receives nothing until "
                f"you log in again with `picobot channels login {self.channel}`.")
        try:
            outbound.record_message(self.rt, channel, chat_id, text, kind="notice",
                                    key=f"wx-expired:{self.channel}:{login.token[-12:]}")
        except Exception as exc:  # not configured, or SQL away: the log line and /health still say it
            log.warning("wechat poller (%s): could not tell %s (%s)", self.channel, target, exc)

    # ---- one poll ---------------------------------------------------------------------------

    def _poll_once(self, login: creds.Credentials) -> None:
        api = IlinkApi(login.base_url or self.cfg.base_url, login.token)
        cursor = state.cursor(self.rt.db, self.channel)
        self._beat(status.POLLING, "")
        try:
            self._in_poll = True
            try:
                body = api.get_updates(cursor, self.cfg.poll_timeout_secs)
            finally:
                self._in_poll = False
        finally:
            api.close()
        msgs = body.get("msgs")
        msgs = msgs if isinstance(msgs, list) else []
        counts: dict[str, int] = {}
        for msg in msgs:
            outcome = intake.accept(self.rt, self.channel, msg)
            counts[outcome] = counts.get(outcome, 0) + 1
        if counts:
            log.info("wechat poller (%s): %s", self.channel, ", ".join(f"{n} {k}" for k, n in sorted(counts.items())))
        buf = body.get("get_updates_buf")
        if isinstance(buf, str) and buf and buf != cursor:
            state.save_cursor(self.rt.db, self.channel, buf)
        if time.monotonic() - self._pruned_at > PRUNE_EVERY_SECS:
            self._pruned_at = time.monotonic()
            state.prune_seen(self.rt.db, self.channel)

    def _beat(self, state_name: str, detail: str) -> None:
        try:
            status.set_state(self.rt.redis, self.channel, state_name, detail)
        except Exception:  # Redis away: /health says so by itself
            pass


def wechat_channels(config: Any) -> list[str]:
    """Keys of the enabled WeChat channels: the instances of `channels:wechat`."""
    return [key for key, channel in config.channels.items() if (channel.type or key) == "wechat" and channel.enabled]


def run_process(ctx: Any) -> None:
    """`picobot run channels:wechat:<key>`: poll channels.<key> until ctx.stopping is set (SIGTERM, Ctrl-C)."""
    from picobot.channels.wechat.config import WeChatConfig

    rt = polling.process_runtime(ctx)
    cfg = WeChatConfig.from_channel(rt.config.channels[ctx.instance])
    Poller(rt, cfg, channel=ctx.instance, stopping=ctx.stopping).run()


def _exit_after(seconds: float) -> None:
    polling.exit_after(seconds, "wechat poller")
