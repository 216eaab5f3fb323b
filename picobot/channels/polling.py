"""What every platform connection process shares (Feishu's long connection, the Telegram and WeChat
pollers): the retry backoff with jitter, the stop signals, the deadline exit after one, and the
runtime a `picobot run channels:<process>:<key>` process runs them on."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time
from typing import TYPE_CHECKING, Any, Callable

from picobot.coord.backoff import BACKOFF_CAP_SECS, backoff_delay

if TYPE_CHECKING:
    from picobot.channels.ports import ChannelPorts

__all__ = ["BACKOFF_CAP_SECS", "backoff_delay", "exit_after", "on_stop_signals", "restore_signals",
           "process_runtime"]

log = logging.getLogger("picobot.channels")

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def exit_after(seconds: float, who: str) -> None:
    """The stop's deadline: a process still running after it exits at once. Its callers confirm a
    platform event only once it is in SQL, so nothing accepted is lost."""
    time.sleep(seconds)
    log.warning("%s: not stopped within %.0f s; exiting now", who, seconds)
    logging.shutdown()
    os._exit(0)


def on_stop_signals(handler: Callable[[int, Any], None]) -> dict[int, Any]:
    """`handler` for SIGTERM and SIGINT; the handlers it replaced, for restore_signals(). Only the main
    thread has signals: run in another (a test's), it installs nothing and the stop event alone stops it."""
    if threading.current_thread() is not threading.main_thread():
        return {}
    return {sig: signal.signal(sig, handler) for sig in STOP_SIGNALS}


def restore_signals(previous: dict[int, Any]) -> None:
    for sig, handler in previous.items():
        signal.signal(sig, handler)


def process_runtime(ctx: Any) -> "ChannelPorts":
    """The process's own runtime under a plugin process's `ctx.ports`. The connections PicoBot ships are
    the kernel's channels capability, not a third party's: they record events, queue them, read the slash
    commands and redact with the runtime's secrets, which PluginPorts keeps to itself."""
    from picobot.channels.ports import channel_ports

    return channel_ports(ctx.ports._rt)
