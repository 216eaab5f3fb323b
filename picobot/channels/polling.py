"""What every platform connection process shares (Feishu's long connection, the Telegram and WeChat
pollers): the retry backoff with jitter and the deadline exit after a stop signal."""

from __future__ import annotations

import logging
import os
import random
import time
from typing import Callable

log = logging.getLogger("picobot.channels")

BACKOFF_CAP_SECS = 60.0


def backoff_delay(attempt: int, rand: Callable[[], float] = random.random, base: float = 1.0,
                  cap: float = BACKOFF_CAP_SECS) -> float:
    """Seconds before retry `attempt` (0-based): 0.5-1 s, 1-2 s, 2-4 s, … up to `cap` (jitter: half of it)."""
    ceiling = min(cap, base * 2.0 ** min(attempt, 16))
    return ceiling * (0.5 + rand() / 2)


def exit_after(seconds: float, who: str) -> None:
    """The stop's deadline: a process still running after it exits at once. Its callers confirm a
    platform event only once it is in SQL, so nothing accepted is lost."""
    time.sleep(seconds)
    log.warning("%s: not stopped within %.0f s; exiting now", who, seconds)
    logging.shutdown()
    os._exit(0)
