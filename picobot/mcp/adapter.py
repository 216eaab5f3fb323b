"""The one place PicoBot runs the async MCP client; everything else stays synchronous.

`McpLoop` is an asyncio event loop on its own daemon thread, one per process. A `Link` is one
live connection to one MCP server: `open`, `call` and `close` block the calling thread for a
bounded time while the work runs on that loop. SDK types never leave this module.

A link's task holds the transport and the `ClientSession` open (anyio requires that they are
entered and left by one task) and relays the server's messages through a forwarder that
notices, before the session does, when the stream ends (the stdio process died, the HTTP
connection closed) or carries something that is not JSON-RPC. Either breaks the link: calls
in flight fail, the next `call` is refused without being sent, and the owner reconnects.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Coroutine, TypeVar

import anyio

from picobot.config.schema import McpServerConfig
from picobot.domain.cancel import CancelToken
from picobot.errors import TurnCancelled

log = logging.getLogger("picobot.mcp")
stderr_log = logging.getLogger("picobot.mcp.stderr")

T = TypeVar("T")

MAX_LIST_PAGES = 50
STDERR_LINE_CHARS = 500
CLOSE_SECS = 8.0  # the SDK gives a stdio server 2 s to exit on its own, then 2 s after SIGTERM
_GRACE_SECS = 1.0  # on top of a call's own timeout, for the loop to deliver the timeout


class LinkError(Exception):
    """A connection could not be made or broke. The text is safe for users and the model."""


class LinkNotSent(LinkError):
    """The link was already broken: the request never reached the server (safe to retry)."""


class LinkTimeout(LinkError):
    """The server did not answer in time."""


@dataclass(frozen=True)
class ToolInfo:
    name: str
    description: str
    input_schema: Any  # as the server sent it; the caller checks it


@dataclass(frozen=True)
class CallResult:
    text: str
    is_error: bool


class McpLoop:
    """An asyncio loop on a daemon thread; `run` executes a coroutine there and waits for it."""

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="mcp-loop", daemon=True)
        self._thread.start()

    def submit(self, coro: Coroutine[Any, Any, T]) -> concurrent.futures.Future[T]:
        return asyncio.run_coroutine_threadsafe(coro, self._loop)

    def call_soon(self, fn: Callable[[], Any]) -> None:
        self._loop.call_soon_threadsafe(fn)

    def run(self, coro: Coroutine[Any, Any, T], timeout: float, cancel: CancelToken | None = None) -> T:
        """The coroutine's result; LinkTimeout after `timeout`, TurnCancelled when `cancel` fires."""
        future = self.submit(coro)
        unregister = cancel.on_cancel(future.cancel) if cancel is not None else (lambda: None)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise LinkTimeout(f"no answer within {timeout:g} s") from None
        except concurrent.futures.CancelledError:
            raise TurnCancelled(cancel.reason if cancel is not None else "stopped") from None
        finally:
            unregister()

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)


class Link:
    """One connection to one MCP server (see the module docstring)."""

    def __init__(self, loop: McpLoop, key: str, cfg: McpServerConfig, cwd: Path,
                 on_break: Callable[[str, bool], None]) -> None:
        self._mcp = loop
        self._key = key
        self._cfg = cfg
        self._cwd = cwd
        self._on_break = on_break
        self._session: Any = None
        self._stop: anyio.Event | None = None
        self._broken: str | None = None
        self._closing = False
        self._opened = False  # a break before this is a failed connect, not a dropped connection
        self._held: concurrent.futures.Future[None] | None = None

    @property
    def alive(self) -> bool:
        return self._session is not None and self._broken is None

    # --- the blocking surface ---------------------------------------------------------------

    def open(self, timeout: float) -> list[ToolInfo]:
        """Connect, initialize and list the tools; LinkError (and a closed link) on any failure."""
        ready: concurrent.futures.Future[list[ToolInfo]] = concurrent.futures.Future()
        self._held = self._mcp.submit(self._hold(ready, timeout))
        try:
            return ready.result(timeout + _GRACE_SECS)
        except concurrent.futures.TimeoutError:
            self.close()
            raise LinkTimeout(f"the server did not finish connecting within {timeout:g} s") from None
        except LinkError:
            self.close()
            raise
        except Exception as exc:
            self.close()
            raise LinkError(describe_failure(exc)) from None

    def call(self, tool: str, args: dict[str, Any], timeout: float, cancel: CancelToken) -> CallResult:
        """One tools/call. LinkNotSent if the link was broken before; LinkError if it broke during."""
        if not self.alive:
            raise LinkNotSent(self._broken or "not connected")
        try:
            return self._mcp.run(self._call(tool, args, timeout), timeout + _GRACE_SECS, cancel)
        except (LinkError, TurnCancelled):
            raise
        except Exception as exc:
            if self._broken is not None:
                raise LinkError(f"the connection broke during the call ({self._broken})") from None
            raise LinkError(describe_failure(exc)) from None

    def close(self) -> None:
        """Stop the server (stdio) or end the session (HTTP); waits a bounded time."""
        self._closing = True
        self._mcp.call_soon(self._request_stop)
        if self._held is not None:
            try:
                self._held.result(CLOSE_SECS)
            except Exception:  # closing is best effort; the hold task logs what went wrong
                pass

    # --- on the loop ------------------------------------------------------------------------

    def _request_stop(self) -> None:
        if self._stop is not None:
            self._stop.set()

    def _break(self, reason: str, fatal: bool = False) -> None:
        """`fatal`: the server misbehaved (reconnecting at once would only repeat it)."""
        if self._broken is None:
            self._broken = reason
            if self._opened and not self._closing:
                self._on_break(reason, fatal)
        if self._stop is not None:
            self._stop.set()

    async def _hold(self, ready: concurrent.futures.Future[list[ToolInfo]], timeout: float) -> None:
        from mcp import ClientSession
        from mcp.shared.message import SessionMessage

        self._stop = anyio.Event()
        if self._closing:
            self._stop.set()
        try:
            async with AsyncExitStack() as stack:
                read, write = await stack.enter_async_context(self._transport(timeout))
                relay_in, relay_out = anyio.create_memory_object_stream[SessionMessage | Exception](0)
                tasks = await stack.enter_async_context(anyio.create_task_group())
                tasks.start_soon(self._forward, read, relay_in)
                session = await stack.enter_async_context(ClientSession(relay_out, write))
                with anyio.fail_after(timeout):
                    await session.initialize()
                    tools = await _list_tools(session)
                self._session = session
                self._opened = True
                ready.set_result(tools)
                await self._stop.wait()
                tasks.cancel_scope.cancel()
        except Exception as exc:
            if not ready.done():
                ready.set_exception(_connect_failure(exc, self._broken, timeout))
            elif not self._closing:
                log.warning("MCP server %s: connection ended: %s", self._key, describe_failure(exc))
        finally:
            self._session = None
            if not ready.done():
                ready.set_exception(LinkError(self._broken or "the connection closed while connecting"))
            self._break("the connection closed")

    async def _forward(self, read: Any, out: Any) -> None:
        """Relay the server's messages to the session; break the link on garbage or at the end."""
        reason = "the server closed the connection" if self._cfg.type != "stdio" else "the server process exited"
        fatal = False
        async with out:
            async for item in read:
                if isinstance(item, Exception):
                    reason, fatal = _stream_fault(item, self._cfg.type)
                    break
                await out.send(item)
        self._break(reason, fatal)

    def _transport(self, timeout: float) -> Any:
        cfg = self._cfg
        if cfg.type == "stdio":
            return _stdio(self._key, cfg, self._cwd)
        if cfg.type == "sse":
            from mcp.client.sse import sse_client

            return sse_client(cfg.base_url or "", headers=dict(cfg.headers), timeout=timeout)
        return _streamable_http(cfg, timeout)

    async def _call(self, tool: str, args: dict[str, Any], timeout: float) -> CallResult:
        from mcp.shared.exceptions import MCPError
        from mcp_types import REQUEST_TIMEOUT

        session = self._session
        if session is None or self._broken is not None:
            raise LinkNotSent(self._broken or "not connected")
        try:
            result = await session.call_tool(tool, args, read_timeout_seconds=timeout)
        except MCPError as exc:
            if exc.error.code == REQUEST_TIMEOUT:
                raise LinkTimeout(f"no answer within {timeout:g} s") from None
            if self._broken is not None:
                raise LinkError(f"the connection broke during the call ({self._broken})") from None
            raise LinkError(f"the server answered with error {exc.error.code}: {exc.error.message}") from None
        return CallResult(result_text(result), bool(result.is_error))


# --- transports ---------------------------------------------------------------------------


class _StderrPipe:
    """The server's stderr, line by line into the log (never to the model); one per process."""

    def __init__(self, key: str) -> None:
        read_fd, write_fd = os.pipe()
        self.write_end = os.fdopen(write_fd, "w")
        threading.Thread(target=self._pump, args=(key, read_fd), name=f"mcp-stderr-{key}"[:40],
                         daemon=True).start()

    @staticmethod
    def _pump(key: str, fd: int) -> None:
        with os.fdopen(fd, "r", encoding="utf-8", errors="replace") as lines:
            for line in lines:
                text = line.rstrip()
                if text:
                    stderr_log.info("MCP server %s stderr: %s", key, text[:STDERR_LINE_CHARS])

    def close_ours(self) -> None:
        # The child holds its own copy; ours closes so the pump sees EOF when the child exits.
        self.write_end.close()


class _stdio:
    """stdio_client with the server's stderr routed to the log and its cwd resolved."""

    def __init__(self, key: str, cfg: McpServerConfig, cwd: Path) -> None:
        self._key, self._cfg, self._cwd = key, cfg, cwd
        self._cm: Any = None

    async def __aenter__(self) -> Any:
        from mcp.client.stdio import StdioServerParameters, stdio_client

        cfg = self._cfg
        if not self._cwd.is_dir():
            raise LinkError(f"the working directory {self._cwd} does not exist (check 'cwd')")
        params = StdioServerParameters(command=cfg.command or "", args=list(cfg.args), env=dict(cfg.env) or None,
                                       cwd=str(self._cwd))
        pipe = _StderrPipe(self._key)
        try:
            self._cm = stdio_client(params, errlog=pipe.write_end)
            return await self._cm.__aenter__()
        finally:
            pipe.close_ours()

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._cm.__aexit__(*exc)


class _streamable_http:
    def __init__(self, cfg: McpServerConfig, timeout: float) -> None:
        self._cfg, self._timeout = cfg, timeout
        self._stack = AsyncExitStack()

    async def __aenter__(self) -> Any:
        import httpx2
        from mcp.client.streamable_http import streamable_http_client

        client = httpx2.AsyncClient(headers=dict(self._cfg.headers), timeout=httpx2.Timeout(self._timeout, read=300))
        await self._stack.__aenter__()
        try:
            await self._stack.enter_async_context(client)
            return await self._stack.enter_async_context(streamable_http_client(self._cfg.base_url or "",
                                                                                http_client=client))
        except BaseException:
            await self._stack.aclose()
            raise

    async def __aexit__(self, *exc: Any) -> Any:
        return await self._stack.__aexit__(*exc)


# --- converting what the SDK returns ------------------------------------------------------


async def _list_tools(session: Any) -> list[ToolInfo]:
    from mcp_types import PaginatedRequestParams

    tools: list[ToolInfo] = []
    cursor = None
    for _page in range(MAX_LIST_PAGES):
        params = PaginatedRequestParams(cursor=cursor) if cursor else None
        result = await session.list_tools(params=params)
        for tool in result.tools:
            tools.append(ToolInfo(tool.name, tool.description or tool.title or "", tool.input_schema))
        cursor = result.next_cursor
        if not cursor:
            break
    return tools


def result_text(result: Any) -> str:
    """A tools/call result as text for the model: text blocks as they are, other blocks named."""
    parts: list[str] = []
    for block in result.content or []:
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            parts.append(f"[{kind} {block.mime_type}, {len(block.data or '') * 3 // 4} bytes]")
        elif kind == "resource_link":
            parts.append(f"[resource {block.uri}]")
        elif kind == "resource":
            parts.append(getattr(block.resource, "text", None) or f"[resource {block.resource.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if not parts and result.structured_content is not None:
        import json

        parts.append(json.dumps(result.structured_content, ensure_ascii=False, default=str))
    return "\n".join(parts) if parts else "(no output)"


def _connect_failure(exc: BaseException, broken: str | None, timeout: float) -> LinkError:
    """Why connecting failed. The link's own break reason wins only when the error is the
    "connection closed" it caused: a break recorded while tearing down after a real error is not the cause."""
    from mcp.shared.exceptions import MCPError
    from mcp_types import CONNECTION_CLOSED

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, TimeoutError):
        return LinkTimeout(f"the server did not finish connecting within {timeout:g} s")
    if broken and (not isinstance(exc, MCPError) or exc.error.code == CONNECTION_CLOSED):
        return LinkError(broken)
    if isinstance(exc, MCPError):
        return LinkError(f"the server answered with error {exc.error.code}: {exc.error.message}"[:300])
    return LinkError(describe_failure(exc))


def _stream_fault(exc: Exception, transport: str) -> tuple[str, bool]:
    """(reason, fatal) for an error item on the read stream: unparseable output is the server's
    fault and would recur on reconnect; anything else is the transport's."""
    if isinstance(exc, ValueError) and transport == "stdio":  # pydantic's ValidationError is one
        return ("the server wrote something that is not MCP JSON-RPC on its stdout "
                "(a stdio server must write its logs to stderr)"), True
    if isinstance(exc, ValueError):
        return "the server sent something that is not MCP JSON-RPC", True
    return f"the transport failed: {describe_failure(exc)}", False


def describe_failure(exc: BaseException) -> str:
    """A one-line reason without a traceback; exception groups are unwrapped to their first cause."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, LinkError):
        return str(exc)
    if isinstance(exc, TimeoutError):
        return "the server did not answer in time"
    if isinstance(exc, FileNotFoundError):
        return f"command not found: {exc.filename or exc}"
    text = str(exc) or type(exc).__name__
    return f"{type(exc).__name__}: {text}"[:300]
