"""A fallback chain: one request, tried on each `<provider>:<model>` entry in turn.

An agent's own provider and model come first, then `agents.<name>.fallback`. A call moves on to
the next entry only when the provider is unavailable (connection error, timeout, 5xx, a broken
stream) or rate-limited after its own retries; a bad request, an auth error or a context overflow
would fail the same way elsewhere and is raised at once. A stream that breaks after it has sent
events is restarted on the next entry after a `StreamRestarted` event, so the consumer can throw
away the partial answer and the user sees one answer.

Each provider has a circuit breaker (`CircuitBreakers`): after `breaker_failures` consecutive
failures it is skipped for `breaker_cooldown_secs`, then one call probes it again. The state
lives in Redis so every worker skips the same provider and `/health` can show it.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterator

from picobot.errors import ContextLengthExceeded, ProviderError, ProviderRateLimited, ProviderUnavailable
from picobot.providers.base import ChatRequest, Completed, Provider, ProviderEvent, StreamRestarted

log = logging.getLogger("picobot.providers")

BREAKER_KEY = "picobot:breaker:"  # + provider key: a hash {failures, open_until}


def falls_through(err: ProviderError) -> bool:
    """True for the failures another provider may not share: unavailable or rate-limited."""
    return isinstance(err, (ProviderUnavailable, ProviderRateLimited)) and not isinstance(err, ContextLengthExceeded)


@dataclass(frozen=True)
class BreakerSettings:
    failures: int = 3  # consecutive failures that open the breaker; 0 = never open
    cooldown_secs: float = 30.0


class CircuitBreakers:
    """Per-provider consecutive-failure counters in Redis, shared by every process.

    When Redis cannot be reached every provider counts as closed: a breaker only saves time, it
    must never be the reason a call is not made.
    """

    def __init__(self, redis: Any, settings: Callable[[str], BreakerSettings]) -> None:
        self._redis = redis
        self._settings = settings

    def allows(self, provider: str, now: float | None = None) -> bool:
        """False while the provider's cool-down runs; after it, calls go through as probes."""
        try:
            until = self._redis.hget(BREAKER_KEY + provider, "open_until")
        except Exception:
            return True
        return until is None or float(until) <= (time.time() if now is None else now)

    def failed(self, provider: str) -> None:
        s = self._settings(provider)
        if s.failures <= 0:
            return
        key = BREAKER_KEY + provider
        try:
            count = int(self._redis.hincrby(key, "failures", 1))
            if count >= s.failures:  # a failed probe opens it again for a whole cool-down
                self._redis.hset(key, "open_until", str(time.time() + s.cooldown_secs))
            self._redis.expire(key, max(60, int(s.cooldown_secs * 10)))
        except Exception:
            pass

    def succeeded(self, provider: str) -> None:
        try:
            self._redis.delete(BREAKER_KEY + provider)
        except Exception:
            pass

    def state(self, provider: str) -> dict[str, Any]:
        """{"state": closed|open|probing, "failures": n, "open_until": t|None} for /health."""
        raw = self._redis.hgetall(BREAKER_KEY + provider) or {}
        text = {(k.decode() if isinstance(k, bytes) else k): (v.decode() if isinstance(v, bytes) else v)
                for k, v in raw.items()}
        failures = int(text.get("failures") or 0)
        until = float(text["open_until"]) if text.get("open_until") else None
        if until is None:
            state = "closed"
        else:
            state = "open" if until > time.time() else "probing"
        return {"state": state, "failures": failures, "open_until": until}


@dataclass(frozen=True)
class ChainEntry:
    """One `<provider>:<model>` of a chain, with the model's request settings."""

    label: str  # "<provider key>:<model key>", what the turn records as having answered
    provider: Provider
    model_id: str
    temperature: float | None = None
    max_tokens: int | None = None
    options: dict[str, Any] | None = None

    def request(self, base: ChatRequest) -> ChatRequest:
        return replace(base, model=self.model_id, temperature=self.temperature, max_tokens=self.max_tokens,
                       options=dict(self.options or {}))


class FallbackProvider:
    """A Provider over a chain of entries; its key is the first entry's provider."""

    def __init__(self, chain: list[ChainEntry], breakers: CircuitBreakers) -> None:
        if not chain:
            raise ValueError("a fallback chain needs at least one entry")
        self.chain = chain
        self.breakers = breakers
        self.key = chain[0].provider.key

    def stream(self, request: ChatRequest) -> "FallbackStream":
        return FallbackStream(self.chain, request, self.breakers)


class FallbackStream:
    """A ProviderStream that moves to the next entry when one fails in a way another may not.

    The request the agent loop built is for the first entry; each other entry gets its own model
    id and settings. `answered_by` names the entry whose answer completed.
    """

    wakes_on_close = True  # close() closes the inner stream, which wakes this one's consumer

    def __init__(self, chain: list[ChainEntry], request: ChatRequest, breakers: CircuitBreakers) -> None:
        self._chain = chain
        self._request = request
        self._breakers = breakers
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._current: Any = None
        self.idle_timeout: float | None = None
        self.answered_by: str | None = None
        self.answered: tuple[str, str] | None = None  # (provider key, model id) of that entry
        self.tried: list[str] = []

    def __iter__(self) -> Iterator[ProviderEvent]:
        return self._run()

    def close(self) -> None:
        self._closed.set()
        with self._lock:
            current = self._current
        if current is not None:
            try:
                current.close()
            except Exception:
                pass

    def _run(self) -> Iterator[ProviderEvent]:
        candidates = [e for e in self._chain if self._breakers.allows(e.provider.key)]
        if not candidates:  # every breaker open: trying beats failing without a call
            candidates = list(self._chain)
        last = len(candidates) - 1
        for i, entry in enumerate(candidates):
            if self._closed.is_set():
                return
            self.tried.append(entry.label)
            request = self._request if entry is self._chain[0] else entry.request(self._request)
            stream = entry.provider.stream(request)
            with self._lock:
                self._current = stream
            if self._closed.is_set():
                stream.close()
                return
            if self.idle_timeout is not None and hasattr(stream, "idle_timeout"):  # ours have one; others: their own
                stream.idle_timeout = self.idle_timeout
            sent = False
            try:
                for event in stream:
                    if isinstance(event, Completed):
                        self._breakers.succeeded(entry.provider.key)
                        self.answered_by = entry.label
                        self.answered = (entry.provider.key, entry.model_id)
                        event.answered_by = entry.label
                    sent = True
                    yield event
                return
            except ProviderError as err:
                if self._closed.is_set():
                    return
                if not falls_through(err):
                    raise
                self._breakers.failed(entry.provider.key)
                if i == last:
                    raise
                log.warning("%s; falling back to %s", err, candidates[i + 1].label)
                if sent:
                    yield StreamRestarted(reason=str(err))
            finally:
                with self._lock:
                    self._current = None
