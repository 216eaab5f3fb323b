"""How search results are ordered: relevance first, then importance, then recency.

    score = 0.6 * relevance + 0.25 * importance + 0.15 * recency

relevance is the full-text rank scaled to 0..1 within the candidates (the best match is 1; every
LIKE-fallback match is 1), importance is the memory's own 0..1, and recency halves every 30 days
since the memory was last updated. The full-text query picks the candidates (a few times the
limit, best-ranked first); the score orders them.
"""

from __future__ import annotations

import time

RELEVANCE_WEIGHT = 0.6
IMPORTANCE_WEIGHT = 0.25
RECENCY_WEIGHT = 0.15
RECENCY_HALF_LIFE_DAYS = 30.0
_DAY = 86400.0


def recency(updated_at: float, now: float | None = None) -> float:
    age_days = max(0.0, ((now or time.time()) - updated_at) / _DAY)
    return 0.5 ** (age_days / RECENCY_HALF_LIFE_DAYS)


def relevances(ranks: list[float], higher_is_better: bool) -> list[float]:
    """Raw full-text ranks scaled so the best is 1 (bm25: lower is better; ts_rank: higher)."""
    if not ranks:
        return []
    best = max(ranks) if higher_is_better else min(ranks)
    if best == 0:
        return [1.0 for _ in ranks]
    return [max(0.0, min(1.0, r / best)) for r in ranks]


def score(relevance: float, importance: float, updated_at: float, now: float | None = None) -> float:
    return (RELEVANCE_WEIGHT * relevance + IMPORTANCE_WEIGHT * importance
            + RECENCY_WEIGHT * recency(updated_at, now))
