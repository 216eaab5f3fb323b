"""One configured MCP server in this worker process: its state, its tools and its connection.

States: `disabled` (isActive false), `connecting`, `connected`, `disconnected` (the connection
dropped; the next call reconnects), `failed` (connecting failed or the server misbehaved; retried
in the background with exponential backoff). Nothing here raises into the worker: a failure is
recorded as state and last error, and a tool call gets an error text the model can act on.
"""

from __future__ import annotations

import logging
import threading
import time
from pathlib import Path
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from picobot.config.schema import McpServerConfig
from picobot.domain.cancel import CancelToken
from picobot.mcp.adapter import CallResult, Link, LinkError, LinkNotSent, McpLoop, ToolInfo
from picobot.mcp.names import exposed_name, trim_description
from picobot.security.redact import redact
from picobot.tools.registry import ToolRegistry

log = logging.getLogger("picobot.mcp")

DISABLED, CONNECTING, CONNECTED, DISCONNECTED, FAILED = "disabled", "connecting", "connected", "disconnected", "failed"
BACKOFF_FIRST_SECS = 1.0
BACKOFF_MAX_SECS = 60.0
SCHEMA_ERROR_CHARS = 200


class McpServer:
    def __init__(self, key: str, cfg: McpServerConfig, loop: McpLoop | None, registry: ToolRegistry,
                 cwd: Path, secrets: frozenset[str] = frozenset()) -> None:
        self.key = key
        self.cfg = cfg
        self.name = cfg.name or key
        self._loop = loop
        self._registry = registry
        self._cwd = cwd
        self._secrets = secrets  # kept out of the errors shown on /mcp, /health and to the model
        self._lock = threading.Lock()  # the fields below
        self._connecting = threading.Lock()  # one connect at a time
        self.state = CONNECTING if cfg.is_active else DISABLED
        self.last_error: str | None = None
        self.since = time.time()
        self.failures = 0
        self.retry_at: float | None = None  # wall clock, for status; the timer does the retry
        self.failed_tools: dict[str, str] = {}
        self._tools: dict[str, Any] = {}  # exposed name -> McpTool
        self._link: Link | None = None
        self._timer: threading.Timer | None = None
        self._closed = False

    @property
    def timeout(self) -> float:
        return self.cfg.timeout

    # --- connecting ------------------------------------------------------------------------

    def start(self) -> None:
        """Connect in the background: start-up never waits for a server."""
        if self.state != DISABLED:
            threading.Thread(target=self._connect_quietly, name=f"mcp-connect-{self.key}"[:40], daemon=True).start()

    def _connect_quietly(self) -> None:
        try:
            self.connect()
        except LinkError:
            pass  # recorded as state; the backoff timer tries again

    def connect(self) -> Link:
        """The live link, connecting first when there is none; LinkError when that fails."""
        with self._connecting:
            link = self._link
            if link is not None and link.alive:
                return link
            if self._closed or self._loop is None:
                raise LinkError("the server is disabled" if self._loop is None else "PicoBot is shutting down")
            self._set(CONNECTING, self.last_error)
            if link is not None:
                link.close()  # reap what is left of the old connection (a stdio process)
            link = Link(self._loop, self.key, self.cfg, self._cwd, self._on_break)
            try:
                tools = link.open(self.cfg.connect_timeout)
            except LinkError as exc:
                self._fail(str(exc))
                raise
            self._link = link
            self._sync_tools(tools)
            with self._lock:
                self.failures, self.retry_at = 0, None
            self._set(CONNECTED, None)
            log.info("MCP server %s connected: %d tool(s)%s", self.key, len(self._tools),
                     f", {len(self.failed_tools)} failed" if self.failed_tools else "")
            return link

    def _set(self, state: str, error: str | None) -> None:
        error = redact(error, self._secrets) if error else None
        with self._lock:
            if state != self.state:
                self.since = time.time()
            self.state, self.last_error = state, error

    def _fail(self, reason: str) -> None:
        with self._lock:
            self.failures += 1
            delay = min(BACKOFF_MAX_SECS, BACKOFF_FIRST_SECS * 2 ** (self.failures - 1))
            self.retry_at = time.time() + delay
            if self._timer is not None:
                self._timer.cancel()
            self._timer = None if self._closed else threading.Timer(delay, self._connect_quietly)
            timer = self._timer
        self._set(FAILED, reason)
        log.warning("MCP server %s failed: %s (retrying in %.0f s)", self.key, reason, delay)
        if timer is not None:
            timer.daemon = True
            timer.start()

    def _on_break(self, reason: str, fatal: bool) -> None:
        """From the loop thread when a live connection ends; must not block."""
        if fatal:
            self._fail(reason)
            return
        self._set(DISCONNECTED, reason)
        log.warning("MCP server %s disconnected: %s (reconnecting on the next call)", self.key, reason)

    # --- tools ----------------------------------------------------------------------------

    def _sync_tools(self, infos: list[ToolInfo]) -> None:
        """Register the server's tools (replacing those of an earlier connection)."""
        from picobot.mcp.tool import McpTool

        fresh: dict[str, McpTool] = {}
        failed: dict[str, str] = {}
        for info in infos:
            schema, problem = checked_schema(info.input_schema)
            if problem:
                failed[str(info.name)] = problem
                log.warning("MCP server %s: tool %r is not usable: %s", self.key, info.name, problem)
                continue
            name = exposed_name(self.key, info.name)
            if name in fresh:  # two names that sanitise alike: the later one gets a hash
                name = exposed_name(self.key, info.name, force_hash=True)
            fresh[name] = McpTool(self, info.name, name, trim_description(info.description, self.name), schema)
        for name in list(self._tools):
            self._registry.unregister(name)
        for name, tool in list(fresh.items()):
            try:
                self._registry.register(tool)
            except ValueError as exc:  # a name a built-in or another server already has
                failed[tool.remote_name] = str(exc)
                del fresh[name]
        with self._lock:
            self._tools, self.failed_tools = fresh, failed

    def call(self, remote_name: str, args: dict[str, Any], cancel: CancelToken) -> CallResult:
        """One tools/call; reconnects first when the connection is gone. LinkError says why not."""
        self._refuse_while_backing_off()
        link = self.connect()
        try:
            return link.call(remote_name, args, self.timeout, cancel)
        except LinkNotSent:
            # it broke while idle and nobody had noticed: the request was never sent, so retry once
            return self.connect().call(remote_name, args, self.timeout, cancel)

    def _refuse_while_backing_off(self) -> None:
        with self._lock:
            if self.state != FAILED or self.retry_at is None:
                return
            wait = self.retry_at - time.time()
            error = self.last_error
        if wait > 0:
            raise LinkError(f"the server is unavailable ({error}); the next connection attempt is in {wait:.0f} s")

    # --- status and shutdown --------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        with self._lock:
            return {
                "key": self.key, "name": self.name, "transport": self.cfg.type, "state": self.state,
                "tools": len(self._tools), "tool_names": sorted(self._tools), "failed_tools": dict(self.failed_tools),
                "last_error": self.last_error, "since": self.since,
                "retry_at": self.retry_at if self.state == FAILED else None,
            }

    def close(self) -> None:
        with self._lock:
            self._closed = True
            timer, self._timer = self._timer, None
            link, self._link = self._link, None
        if timer is not None:
            timer.cancel()
        for name in list(self._tools):
            self._registry.unregister(name)
        if link is not None:
            link.close()


def checked_schema(schema: Any) -> tuple[dict[str, Any], str | None]:
    """(the schema as the model gets it, None) or ({}, why the tool cannot be offered)."""
    if not isinstance(schema, dict):
        return {}, "its input schema is not a JSON object"
    if schema.get("type", "object") != "object":
        return {}, "its input schema does not describe an object (\"type\": \"object\")"
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return {}, f"its input schema is not valid JSON Schema: {exc.message[:SCHEMA_ERROR_CHARS]}"
    except RecursionError:
        return {}, "its input schema is nested too deeply"
    return {"type": "object", **schema}, None
