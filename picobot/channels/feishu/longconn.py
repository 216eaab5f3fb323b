"""Feishu long-connection intake (`picobot run channels:feishu:<key>`, `picobot feishu`): the SDK's WebSocket event
client, one consumer per app.

Feishu pushes events over a WebSocket the app opens itself (no public URL needed): the SDK
(`lark_oapi.ws.Client`, imported only by ws_sdk.py, in this process) POSTs {domain}/callback/ws/endpoint for a ws URL,
then reads protobuf frames. Each im.message.receive_v1 is recorded in the SQL event inbox and
its processing enqueued, exactly as the webhook does (nothing slower runs here).

We drive the SDK's connect/ping/disconnect steps ourselves instead of `Client.start()`, which
blocks forever on a module-level loop and retries every 2 minutes: here a failed endpoint call
or a dropped socket is retried with capped exponential backoff and jitter, the endpoint call runs
off the loop with a timeout, and SIGTERM/SIGINT end the process within SHUTDOWN_DEADLINE seconds
(the process's stop event set from elsewhere ends the loop too, within STOP_CHECK_SECS).
A Redis lease (`picobot:feishu:ws:<app_id>`, see singleton.py) lets one process per app connect;
others stand by and take over when the holder dies. Written against lark-oapi 1.7.
"""

from __future__ import annotations

import asyncio
import logging
import random
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from picobot.channels import polling
from picobot.channels.feishu.singleton import RedisLease, feishu_lock_key
from picobot.channels.feishu.ws_sdk import EventSink, client_class, describe, load_sdk

if TYPE_CHECKING:
    from picobot.channels.feishu.config import FeishuConfig
    from picobot.channels.ports import ChannelPorts

log = logging.getLogger(__name__)

LEASE_TTL_MS = 10_000
STANDBY_POLL_SECS = 1.0
BACKOFF_BASE_SECS = 1.0
BACKOFF_CAP_SECS = 60.0
STABLE_SECS = 60.0  # a connection that lasted this long starts the backoff over
ENDPOINT_TIMEOUT_SECS = 15.0
SHUTDOWN_DEADLINE_SECS = 5.0
STOP_CHECK_SECS = 0.5


def backoff_delay(attempt: int, rand: Callable[[], float] = random.random) -> float:
    """Seconds before retry `attempt` (0-based): 0.5-1 s, 1-2 s, 2-4 s, … up to BACKOFF_CAP_SECS."""
    return polling.backoff_delay(attempt, rand, base=BACKOFF_BASE_SECS, cap=BACKOFF_CAP_SECS)


def _off_loop(fn: Callable[[], Any]) -> asyncio.Future:
    """Run a blocking call on a daemon thread (one that may hang must not hold up the process's exit)."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def settle(result: Any, error: BaseException | None) -> None:
        if not future.done():
            future.set_exception(error) if error else future.set_result(result)

    def run() -> None:
        try:
            result, error = fn(), None
        except BaseException as exc:
            result, error = None, exc
        try:
            loop.call_soon_threadsafe(settle, result, error)
        except RuntimeError:  # the loop is closed: nobody waits for this any more
            pass

    threading.Thread(target=run, name="feishu-blocking-call", daemon=True).start()
    return future


class LongConnection:
    def __init__(self, rt: ChannelPorts, cfg: FeishuConfig, channel: str = "feishu", lease_ttl_ms: int = LEASE_TTL_MS,
                 stopping: threading.Event | None = None):
        self.rt = rt
        self.cfg = cfg
        self.channel = channel
        self.lease = RedisLease(rt.redis, feishu_lock_key(cfg.app_id), lease_ttl_ms)
        self._stop = stopping if stopping is not None else threading.Event()  # a plugin process's ctx.stopping
        self._loop: asyncio.AbstractEventLoop | None = None
        self._halt: asyncio.Event | None = None
        self._redis_ok = True

    # --- process lifecycle ----------------------------------------------------------------

    def run(self) -> int:
        """Serve until SIGTERM/SIGINT (or request_stop(), or the stop event set); 0 after a stop."""
        previous = polling.on_stop_signals(self._on_signal)
        loop = asyncio.new_event_loop()
        try:
            sdk = load_sdk()  # ~2 s: a signal meanwhile is remembered and ends _main at once
            sdk.loop = loop  # the SDK schedules its receive and handler tasks on this module global
            loop.set_exception_handler(_background_error)
            self._loop = loop
            loop.run_until_complete(self._main(sdk))
        finally:
            polling.restore_signals(previous)
            _finish(loop)
        log.info("feishu long connection (%s): stopped", self.channel)
        return 0

    def _on_signal(self, signum: int, _frame: Any) -> None:
        log.info("feishu long connection (%s): %s received, stopping", self.channel, signal.Signals(signum).name)
        self.request_stop()

    def request_stop(self) -> None:
        if self._stop.is_set():
            return
        self._stop.set()
        threading.Thread(target=_exit_after, args=(SHUTDOWN_DEADLINE_SECS,), name="feishu-deadline",
                         daemon=True).start()
        loop, halt = self._loop, self._halt
        if loop is not None and halt is not None:
            try:
                loop.call_soon_threadsafe(halt.set)
            except RuntimeError:  # the loop already ended
                pass

    def _halted(self) -> bool:
        """Whether stop() reached the loop; only asked inside _main, which creates the event first."""
        if self._halt is None:
            raise RuntimeError("the long connection's loop has not started")
        return self._halt.is_set()

    # --- lease: hold it or stand by -------------------------------------------------------

    async def _main(self, sdk: Any) -> None:
        self._halt = asyncio.Event()
        if self._stop.is_set():
            return
        watcher = asyncio.create_task(self._watch_stop(self._halt))  # cancelled by _finish
        waiting_logged = False
        while not self._halt.is_set():
            if await self._acquire():
                waiting_logged = False
                try:
                    await self._hold(sdk)
                finally:
                    await self._release()
                continue
            if not waiting_logged:
                log.info("feishu long connection (%s): standing by; another process holds the connection of "
                         "app %s", self.channel, self.cfg.app_id)
                waiting_logged = True
            await self._pause(STANDBY_POLL_SECS)
        watcher.cancel()

    async def _watch_stop(self, halt: asyncio.Event) -> None:
        """The stop event set without request_stop() (by the plugin process runner, from another thread)."""
        while not self._stop.is_set():
            await asyncio.sleep(STOP_CHECK_SECS)
        halt.set()

    async def _acquire(self) -> bool:
        try:
            held = bool(await _off_loop(self.lease.acquire))
        except Exception as exc:
            if self._redis_ok:  # once per outage, not once per poll
                log.warning("feishu long connection (%s): Redis unavailable (%s); retrying", self.channel,
                            describe(exc))
            self._redis_ok = False
            return False
        if not self._redis_ok:
            log.info("feishu long connection (%s): Redis is back", self.channel)
        self._redis_ok = True
        return held

    async def _release(self) -> None:
        try:
            await asyncio.wait_for(_off_loop(self.lease.release), 1.0)
        except Exception as exc:  # it expires by itself
            log.info("feishu long connection (%s): lease not released (%s)", self.channel, describe(exc))

    async def _renew(self, lost: asyncio.Event) -> None:
        ttl = self.lease.ttl_ms / 1000
        last_ok = time.monotonic()
        while True:
            await asyncio.sleep(ttl / 3)
            try:
                if await asyncio.wait_for(_off_loop(self.lease.renew), ttl / 3):
                    last_ok = time.monotonic()
                    continue
                log.warning("feishu long connection (%s): lost the lease to another process; disconnecting",
                            self.channel)
            except Exception as exc:
                if time.monotonic() - last_ok < ttl * 0.6:
                    log.warning("feishu long connection (%s): lease not renewed (%s)", self.channel, describe(exc))
                    continue
                log.warning("feishu long connection (%s): lease not renewed for %.0f s; disconnecting so that no "
                            "two processes serve the app", self.channel, time.monotonic() - last_ok)
            lost.set()
            return

    async def _hold(self, sdk: Any) -> None:
        log.info("feishu long connection (%s): this process serves app %s", self.channel, self.cfg.app_id)
        lost = asyncio.Event()
        renewer = asyncio.create_task(self._renew(lost))
        attempt = 0
        try:
            while not (self._halted() or lost.is_set()):
                started = time.monotonic()
                connected = await self._session(sdk, lost)
                if self._halted() or lost.is_set():
                    break
                if connected and time.monotonic() - started >= STABLE_SECS:
                    attempt = 0
                delay = backoff_delay(attempt)
                attempt += 1
                log.info("feishu long connection (%s): reconnecting in %.1f s", self.channel, delay)
                await self._pause(delay, lost)
        finally:
            renewer.cancel()

    # --- one connection ---------------------------------------------------------------------

    async def _session(self, sdk: Any, lost: asyncio.Event) -> bool:
        """Connect once and serve until the socket closes, the lease is lost or we stop; True if it connected."""
        client = client_class(sdk)(self.cfg.app_id, self.cfg.app_secret, event_handler=EventSink(self.rt, self.channel),
                                    domain=self.cfg.domain, auto_reconnect=False)
        logging.getLogger("Lark").setLevel(logging.WARNING)  # Client() sets INFO; our own lines say enough
        try:
            done, url = await self._race(asyncio.wait_for(_off_loop(client.fetch_endpoint), ENDPOINT_TIMEOUT_SECS),
                                         lost)
            if not done:
                return False
            client.endpoint_url = url
            done, _ = await self._race(client._connect(), lost)
            if not done or client._conn is None:
                await self._close(client)
                return False
        except Exception as exc:
            log.warning("feishu long connection (%s): could not connect (%s)", self.channel, describe(exc))
            await self._close(client)
            return False
        log.info("feishu long connection (%s): connected", self.channel)
        pinger = asyncio.create_task(client._ping_loop())
        try:
            await self._race(client._conn.wait_closed(), lost)
        finally:
            pinger.cancel()
            await self._close(client)
        if not (self._halted() or lost.is_set()):
            log.warning("feishu long connection (%s): the connection closed", self.channel)
        return True

    async def _close(self, client: Any) -> None:
        conn = client._conn
        try:
            await asyncio.wait_for(client._disconnect(), 2.0)
        except Exception as exc:
            log.info("feishu long connection (%s): no clean close (%s)", self.channel, describe(exc))
            transport = getattr(conn, "transport", None)
            if transport is not None:
                transport.abort()

    async def _race(self, aw: Awaitable[Any], *events: asyncio.Event) -> tuple[bool, Any]:
        """Await `aw` unless we stop or one of `events` is set first: (finished, result)."""
        task = asyncio.ensure_future(aw)
        if self._halt is None:  # _main creates it before anything races
            raise RuntimeError("the long connection's loop has not started")
        waiters = [asyncio.create_task(e.wait()) for e in (self._halt, *events)]
        try:
            await asyncio.wait([task, *waiters], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        if task.done():
            return True, task.result()
        task.cancel()
        return False, None

    async def _pause(self, seconds: float, *events: asyncio.Event) -> None:
        await self._race(asyncio.sleep(seconds), *events)


def _background_error(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
    # The SDK's receive loop raises when the socket closes (we reconnect ourselves): expected, not alarming.
    exc = context.get("exception")
    what = describe(exc) if exc is not None else str(context.get("message"))
    log.debug("feishu long connection: a background task ended: %s", what)


def _finish(loop: asyncio.AbstractEventLoop) -> None:
    pending = [t for t in asyncio.all_tasks(loop) if not t.done()]
    for task in pending:
        task.cancel()
    if pending:
        loop.run_until_complete(asyncio.wait(pending, timeout=1.0))
    loop.close()


def long_connection_channels(config: Any) -> list[str]:
    """Keys of the enabled Feishu channels in long_connection mode: the instances of `channels:feishu`."""
    keys = []
    for key, channel in config.channels.items():
        extra = channel.model_extra or {}
        if (channel.type or key) == "feishu" and channel.enabled and extra.get("mode") == "long_connection":
            keys.append(key)
    return keys


def run_process(ctx: Any) -> None:
    """`picobot run channels:feishu:<key>`: serve channels.<key>'s long connection until ctx.stopping is set."""
    from picobot.channels.feishu.config import FeishuConfig

    rt = polling.process_runtime(ctx)
    cfg = FeishuConfig.from_channel(rt.config.channels[ctx.instance])
    LongConnection(rt, cfg, channel=ctx.instance, stopping=ctx.stopping).run()


def _exit_after(seconds: float) -> None:
    polling.exit_after(seconds, "feishu long connection")
