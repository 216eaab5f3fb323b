"""Shared provider machinery: retries, error mapping, secret redaction, the closable stream.

No SDK imports here; provider modules translate SDK objects before they reach this code.
"""

from __future__ import annotations

import base64
import email.utils
import logging
import mimetypes
import os
import queue
import random
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Mapping, Protocol

from picobot.errors import (
    ContextLengthExceeded,
    ProviderAuthError,
    ProviderBadRequest,
    ProviderError,
    ProviderRateLimited,
    ProviderUnavailable,
)
from picobot.providers.base import Completed, ProviderEvent
from picobot.security.redact import header_secrets, redact
from picobot.threadpool import pool, watchdog

log = logging.getLogger("picobot.providers")

NO_KEY = "no-key"  # sent when no key is configured, so the SDKs never read keys from the environment
REDACTED = "[redacted]"
_OVERFLOW_PHRASES = (
    "context_length_exceeded", "maximum context length", "context window", "prompt is too long",
    "input is too long", "reduce the length of the messages", "model_context_window_exceeded",
)


# --- secrets ----------------------------------------------------------------------


@dataclass
class Redactor:
    """Removes the provider's key, its credential headers and anything shaped like a credential."""

    secrets: list[str] = field(default_factory=list)

    @classmethod
    def for_config(cls, api_key: str | None, extra_headers: Mapping[str, str] | None) -> Redactor:
        secrets = header_secrets(extra_headers or {})
        if api_key:
            secrets.add(api_key)
        return cls(sorted(secrets, key=len, reverse=True))

    def __call__(self, text: str) -> str:
        return redact(text, self.secrets, mask=REDACTED)


# --- errors -----------------------------------------------------------------------


def looks_like_context_overflow(text: str) -> bool:
    lowered = text.lower()
    return any(phrase in lowered for phrase in _OVERFLOW_PHRASES)


def error_for_status(
    status: int, message: str, *, provider: str, redact: Redactor, overflow: bool = False,
    retry_after: float | None = None,
) -> ProviderError:
    """The PicoBot error for an HTTP status (or an in-stream error when status < 400)."""
    where = f"HTTP {status}" if status >= 400 else "stream error"
    text = redact(f"provider {provider!r}: {where}: {message}")
    if overflow:
        cls: type[ProviderError] = ContextLengthExceeded
    elif status == 429:
        cls = ProviderRateLimited
    elif status in (401, 403):
        cls = ProviderAuthError
    elif status == 408 or status >= 500 or status < 400:
        cls = ProviderUnavailable
    else:
        cls = ProviderBadRequest
    err = cls(text, status=status if status >= 400 else None, provider=provider)
    err.retry_after = retry_after  # read by RetryingStream
    return err


def unavailable(provider: str, message: str, redact: Redactor) -> ProviderUnavailable:
    return ProviderUnavailable(redact(f"provider {provider!r}: {message}"), provider=provider)


def parse_retry_after(headers: Mapping[str, str] | None) -> float | None:
    """Seconds from retry-after-ms / retry-after (seconds or an HTTP date), or None."""
    if not headers:
        return None
    for name, divisor in (("retry-after-ms", 1000.0), ("retry-after", 1.0)):
        value = headers.get(name)
        if value is None:
            continue
        try:
            return max(0.0, float(value) / divisor)
        except ValueError:
            parsed = email.utils.parsedate_tz(value)
            if parsed is not None:
                return max(0.0, email.utils.mktime_tz(parsed) - time.time())
    return None


def api_message(body: object, fallback: str) -> str:
    """The human message of an error body in OpenAI or Anthropic shape."""
    if isinstance(body, dict):
        inner = body.get("error") if isinstance(body.get("error"), dict) else body
        message = inner.get("message") if isinstance(inner, dict) else None
        if isinstance(message, str) and message:
            return message
    if isinstance(body, str) and body.strip():
        return body.strip()[:500]
    return fallback


# --- retries ----------------------------------------------------------------------


@dataclass
class RetryPolicy:
    max_retries: int = 2
    base_delay: float = 0.5  # seconds before the first retry, doubled each time
    max_delay: float = 8.0
    max_retry_after: float = 30.0  # a server's Retry-After is honoured up to this

    def delay(self, retry: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(max(retry_after, 0.0), self.max_retry_after)
        ceiling = min(self.max_delay, self.base_delay * (2**retry))
        return ceiling * random.uniform(0.5, 1.0)  # jitter so clients that failed together spread out


# --- the stream -------------------------------------------------------------------


class Attempt(Protocol):
    """One HTTP call: iterate events once; abort() may be called from another thread."""

    def events(self) -> Iterator[ProviderEvent]: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class SdkAttempt:
    """An Attempt over an SDK stream object with a `.response` (httpx2) and `.close()`."""

    def __init__(self, sdk_stream: Any) -> None:
        self.sdk_stream = sdk_stream

    def events(self) -> Iterator[ProviderEvent]:
        raise NotImplementedError

    def abort(self) -> None:
        shutdown_socket(getattr(self.sdk_stream, "response", None))

    def close(self) -> None:
        try:
            self.sdk_stream.close()
        except Exception:  # closing a broken stream may fail again; nothing left to do
            pass


class SdkProvider:
    """What the SDK-backed providers share: settings, retries, redaction, streaming, closing.

    Subclasses build their SDK client in `_make_client` and implement `_request_kwargs` and `_open`.
    """

    def __init__(
        self,
        key: str,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        extra_headers: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        max_retries: int = 2,
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self.key = key
        self._timeout = timeout
        self._redact = Redactor.for_config(api_key, extra_headers)
        self._policy = retry_policy or RetryPolicy(max_retries=max_retries)
        # the SDK's own retries are off: ours are configurable and happen only before the first event
        self._client = self._make_client(api_key or NO_KEY, base_url or None, dict(extra_headers or {}), timeout)

    @classmethod
    def from_config(cls, key: str, cfg: Any) -> Any:
        return cls(
            key,
            base_url=cfg.base_url,
            api_key=cfg.api_key,
            extra_headers=getattr(cfg, "extra_headers", None) or {},
            timeout=float(cfg.llm_timeout_secs),
            max_retries=int(cfg.max_retries),
        )

    def stream(self, request: Any) -> "RetryingStream":
        kwargs = self._request_kwargs(request)
        return RetryingStream(lambda: self._open(kwargs), self._policy, provider=self.key)

    def close(self) -> None:
        self._client.close()

    def _make_client(self, api_key: str, base_url: str | None, headers: dict[str, str], timeout: float) -> Any:
        raise NotImplementedError

    def _request_kwargs(self, request: Any) -> dict[str, Any]:
        raise NotImplementedError

    def _open(self, kwargs: dict[str, Any]) -> Any:
        raise NotImplementedError


def shutdown_socket(response: Any) -> None:
    """Wake a thread blocked reading this response: closing a socket does not, shutdown does."""
    extensions = getattr(response, "extensions", None) or {}
    stream = extensions.get("network_stream")
    try:
        sock = stream.get_extra_info("socket") if stream is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except (OSError, AttributeError):
        pass


DRAIN_SECS = 0.25


def drain_rest(response: Any, rest: Iterable[Any]) -> None:
    """Read what is left of a streamed body so its keep-alive connection goes back to the pool.

    After the last event a well-behaved server only ends the chunked body, so this returns at
    once; a server that keeps the body open is cut off after DRAIN_SECS (the connection is then
    closed, which is what not draining would have done anyway).
    """
    state = {"done": False}
    lock = threading.Lock()

    def cut() -> None:
        with lock:  # never after the drain: the connection may be pooled, or serving another call
            if not state["done"]:
                shutdown_socket(response)

    disarm = watchdog().arm(DRAIN_SECS, cut)
    try:
        for _ in rest:
            pass
    except Exception:  # cleanup must not turn a complete answer into an error
        pass
    finally:
        with lock:
            state["done"] = True
        disarm()


_EVENT, _ERROR, _END = range(3)


class RetryingStream:
    """A ProviderStream: runs attempts in a worker thread, retrying until the first event.

    The worker blocks in socket reads; the consumer waits on a queue, so close() from any
    thread ends iteration at once (the worker is woken or finishes on its own, bounded by
    the SDK timeout). Iteration after close() ends without a Completed event.
    """

    def __init__(self, open_attempt: Callable[[], Attempt], policy: RetryPolicy, *, provider: str) -> None:
        self._open_attempt = open_attempt
        self._policy = policy
        self._provider = provider
        self._queue: queue.SimpleQueue[tuple[int, Any]] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._lock = threading.Lock()
        self._attempt: Attempt | None = None
        self._started = False
        self._delivered = False
        self.attempts = 0
        self.idle_timeout: float | None = None  # the longest wait for the next event (None: the SDK's timeouts)

    # close() from another thread ends iteration at once: the agent loop consumes it directly
    wakes_on_close = True

    def __iter__(self) -> Iterator[ProviderEvent]:
        with self._lock:
            if self._started:
                raise RuntimeError("a provider stream can be iterated only once")
            self._started = True
        if not self._closed.is_set():
            pool("llm-stream").submit(self._produce)
        return self._consume()

    def close(self) -> None:
        self._closed.set()
        self._queue.put((_END, None))
        with self._lock:
            attempt = self._attempt
        if attempt is not None:
            attempt.abort()

    @property
    def closed(self) -> bool:
        return self._closed.is_set()

    def _consume(self) -> Iterator[ProviderEvent]:
        try:
            while not self._closed.is_set():
                try:
                    kind, value = self._queue.get(timeout=self.idle_timeout)
                except queue.Empty:
                    raise ProviderUnavailable(f"the model sent nothing for {self.idle_timeout:.0f} s") from None
                if self._closed.is_set() or kind == _END:
                    return
                if kind == _ERROR:
                    raise value
                yield value
        finally:
            self.close()

    def _produce(self) -> None:
        retry = 0
        while not self._closed.is_set():
            try:
                self._run_attempt()
                self._queue.put((_END, None))
                return
            except ProviderError as err:
                err.__context__ = err.__cause__ = None  # drop SDK objects (they hold request headers)
                if self._closed.is_set():
                    return
                if self._delivered or not err.retryable or retry >= self._policy.max_retries:
                    self._queue.put((_ERROR, err))
                    return
                delay = self._policy.delay(retry, getattr(err, "retry_after", None))
                retry += 1
                log.warning("%s; retry %d/%d in %.2fs", err, retry, self._policy.max_retries, delay)
                if self._closed.wait(delay):
                    return
            except BaseException as err:  # a bug: surface it to the consumer, not a dead thread
                self._queue.put((_ERROR, err))
                return

    def _run_attempt(self) -> None:
        self.attempts += 1
        attempt = self._open_attempt()
        with self._lock:
            self._attempt = attempt
        try:
            if self._closed.is_set():
                return
            for event in attempt.events():
                if self._closed.is_set():
                    return
                self._delivered = True
                if isinstance(event, Completed):
                    # the response is read to its end and its connection may be pooled again:
                    # a close() from here on must not shut that socket down
                    with self._lock:
                        self._attempt = None
                self._queue.put((_EVENT, event))
        finally:
            with self._lock:
                self._attempt = None
            attempt.close()


# --- media ------------------------------------------------------------------------

MAX_INLINE_IMAGE_BYTES = 20 * 1024 * 1024


def read_image(path: str, mime: str | None) -> tuple[str, str] | None:
    """(mime, base64 data) of a readable local image file, else None."""
    mime = mime or mimetypes.guess_type(path)[0] or ""
    if not mime.startswith("image/"):
        return None
    try:
        if os.path.getsize(path) > MAX_INLINE_IMAGE_BYTES:
            return None
        with open(path, "rb") as f:
            return mime, base64.b64encode(f.read()).decode("ascii")
    except OSError:
        return None


def media_note(block: Mapping[str, Any]) -> str:
    name = os.path.basename(str(block.get("path") or "file"))
    mime = block.get("mime") or mimetypes.guess_type(name)[0] or "unknown type"
    return f"[attachment {name} ({mime}) could not be shown to the model]"


def turn_start(messages: list[Any]) -> int:
    """Where the current turn starts (its last user message). A tool's images (a browser screenshot) are
    sent only from here on: sent again with every later call, they would cost their tokens each time."""
    for i in range(len(messages) - 1, -1, -1):
        if messages[i].role == "user":
            return i
    return 0


def split_data_url(url: str) -> tuple[str, str] | None:
    """(mime, base64 data) of a base64 data: URL, else None."""
    match = re.match(r"data:([^;,]+);base64,(.*)", url, re.S)
    return (match.group(1), match.group(2)) if match else None


def join_nonempty(parts: Iterable[str], sep: str = "\n\n") -> str:
    return sep.join(p for p in parts if p)
