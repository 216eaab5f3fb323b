"""What every platform connection process shares (Feishu's long connection, the Telegram and WeChat
pollers): the retry backoff with jitter and the deadline exit after a stop signal."""

from __future__ import annotations

import logging
import os
import time

from picobot.coord.backoff import BACKOFF_CAP_SECS, backoff_delay

__all__ = ["BACKOFF_CAP_SECS", "backoff_delay", "exit_after"]

log = logging.getLogger("picobot.channels")


def exit_after(seconds: float, who: str) -> None:
    """The stop's deadline: a process still running after it exits at once. Its callers confirm a
    platform event only once it is in SQL, so nothing accepted is lost."""
    time.sleep(seconds)
    log.warning("%s: not stopped within %.0f s; exiting now", who, seconds)
    logging.shutdown()
    os._exit(0)
