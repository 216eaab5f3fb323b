"""The one retry backoff: exponential with jitter, capped, for every reconnect and retry loop."""

from __future__ import annotations

import random
from typing import Callable

BACKOFF_CAP_SECS = 60.0


def backoff_delay(attempt: int, rand: Callable[[], float] = random.random, base: float = 1.0,
                  cap: float = BACKOFF_CAP_SECS) -> float:
    """Seconds before retry `attempt` (0-based): 0.5-1 s, 1-2 s, 2-4 s, … up to `cap` (jitter: half of it)."""
    ceiling = min(cap, base * 2.0 ** min(max(attempt, 0), 16))
    return ceiling * (0.5 + rand() / 2)
