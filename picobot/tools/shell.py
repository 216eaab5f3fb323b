"""`bash` (`shell` on Windows): run a command in the workspace, killable by timeout and /stop.

The command runs in its own process group so that a timeout or a cancel kills everything
it started, not just the shell. Its environment is an allowlist (shell_env), never PicoBot's
own; where bubblewrap works it runs in the sandbox of picobot/security/sandbox.py.
"""

from __future__ import annotations

import codecs
import os
import select
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from picobot.config.schema import picobot_home
from picobot.errors import ToolError, TurnCancelled
from picobot.security.sandbox import (
    AUTO, EgressLink, SandboxUnavailable, bridge_argv, bwrap_argv, proxy_env, require, sandbox_env, sandbox_status,
)
from picobot.tools.base import Tool, ToolContext
from picobot.tools.files import workspace_root
from picobot.tools.shell_env import command_env

IS_WINDOWS = os.name == "nt"
SHELL_TOOL_NAME = "shell" if IS_WINDOWS else "bash"
DEFAULT_TIMEOUT_SECS = 60
MAX_TIMEOUT_SECS = 600
DEFAULT_OUTPUT_MAX_CHARS = 20_000
_POLL_SECS = 0.05
# After the shell exits, how long background children may keep the output pipe open.
_DRAIN_GRACE_SECS = 0.5

_SHELL_KIND = "Windows cmd.exe" if IS_WINDOWS else "bash"


class ShellTool(Tool):
    name = SHELL_TOOL_NAME
    description = (
        f"Run a {_SHELL_KIND} command in the workspace; returns exit code and output. No terminal or "
        "stdin: use non-interactive flags. Each call is a fresh shell (cd, exports lost): chain with &&."
    )
    parameters = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "minLength": 1, "description": "Command line."},
            "timeout_secs": {
                "type": "number",
                "minimum": 1,
                "maximum": MAX_TIMEOUT_SECS,
                "description": f"Default {DEFAULT_TIMEOUT_SECS}.",
            },
        },
        "required": ["command"],
        "additionalProperties": False,
    }

    def __init__(self) -> None:
        self._egress = EgressLink()

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.cancel.raise_if_cancelled()
        default = ctx.settings.get("bash_timeout_secs", DEFAULT_TIMEOUT_SECS)
        timeout = min(max(float(args.get("timeout_secs") or default), 0.1), MAX_TIMEOUT_SECS)
        max_chars = int(ctx.settings.get("bash_output_max_chars", DEFAULT_OUTPUT_MAX_CHARS))
        root = workspace_root(ctx)
        argv, env = launch_spec(_shell_argv(args["command"]), root, ctx, self._egress)
        proc = start_process(argv, env, str(root))
        output = CappedOutput(max_chars)
        reader = OutputReader(proc, output)
        remove_callback = ctx.cancel.on_cancel(lambda: kill_process_group(proc))
        try:
            exited = _wait(proc, timeout, ctx)
        finally:
            remove_callback()
            if proc.poll() is None:
                kill_process_group(proc)
                proc.wait()
            lingering = reader.finish(_DRAIN_GRACE_SECS)
        if ctx.cancel.cancelled:
            raise TurnCancelled(ctx.cancel.reason or "stopped")
        if not exited:
            raise ToolError(
                f"Command timed out after {timeout:g} s; it and all its child processes were killed.\n"
                f"Output so far:\n{output.text() or '(no output)'}"
            )
        note = "\n[background processes still hold the output; the rest is not captured]" if lingering else ""
        return f"Exit code: {proc.returncode}\n{output.text() or '(no output)'}{note}"


def kill_process_group(proc: subprocess.Popen[bytes]) -> None:
    """Kill the process and everything in its group; quiet if already gone."""
    try:
        if IS_WINDOWS:
            subprocess.run(
                ["taskkill", "/F", "/T", "/PID", str(proc.pid)],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        else:
            os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _shell_argv(command: str) -> list[str]:
    return ["cmd.exe", "/d", "/s", "/c", command] if IS_WINDOWS else ["bash", "-c", command]


def launch_spec(argv: list[str], root: Path, ctx: ToolContext, egress: EgressLink, chdir: Path | None = None,
                overrides: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """argv and environment for a command run by a tool under `bash`'s rules: the allowlisted
    environment (plus `tools.bash.env`, then `overrides`), inside the sandbox when it is on."""
    bash = ctx.settings.get("bash")
    bash = bash if isinstance(bash, dict) else {}
    env = command_env(bash.get("env"), overrides=overrides)
    if IS_WINDOWS:
        return argv, env
    status = sandbox_status(str(bash.get("sandbox") or AUTO))
    try:
        require(status)
    except SandboxUnavailable as exc:
        raise ToolError(str(exc)) from None
    if not status.active or status.bwrap is None:
        return argv, env
    env = sandbox_env(env, root)
    extra: list[Path] = []
    socket_path = egress.socket_for(ctx.settings)
    if socket_path is not None:
        argv, extra = bridge_argv(socket_path, argv)
        env = proxy_env(env)
    return bwrap_argv(status.bwrap, root, homes=(picobot_home(),), command=argv, extra_ro=extra, chdir=chdir), env


def start_process(argv: list[str], env: dict[str, str], cwd: str) -> subprocess.Popen[bytes]:
    common: dict[str, Any] = {
        "cwd": cwd,
        "env": env,
        "stdin": subprocess.DEVNULL,
        "stdout": subprocess.PIPE,
        "stderr": subprocess.STDOUT,
    }
    try:
        if IS_WINDOWS:
            flags = getattr(subprocess, "CREATE_NEW_PROCESS_GROUP", 0)
            return subprocess.Popen(argv, creationflags=flags, **common)
        return subprocess.Popen(argv, start_new_session=True, **common)
    except OSError as exc:
        raise ToolError(f"Could not start {argv[0]}: {exc.strerror or exc}") from None


def _wait(proc: subprocess.Popen[bytes], timeout: float, ctx: ToolContext) -> bool:
    """Wait for the shell to exit; False on timeout. Returns early when ctx.cancel is set."""
    deadline = time.monotonic() + timeout
    while not ctx.cancel.cancelled:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return False
        try:
            proc.wait(timeout=min(_POLL_SECS, remaining))
            return True
        except subprocess.TimeoutExpired:
            continue
    return True


class CappedOutput:
    """Decoded output that keeps the head and the tail once it passes max_chars."""

    def __init__(self, max_chars: int) -> None:
        self._half = max(max_chars // 2, 1)
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._head = ""
        self._tail = ""
        self._total = 0
        self._lock = threading.Lock()

    def add(self, data: bytes, final: bool = False) -> None:
        text = self._decoder.decode(data, final)
        with self._lock:
            self._total += len(text)
            room = self._half - len(self._head)
            if room > 0:
                self._head += text[:room]
                text = text[room:]
            self._tail = (self._tail + text)[-self._half :]

    def text(self) -> str:
        with self._lock:
            omitted = self._total - len(self._head) - len(self._tail)
            if omitted <= 0:
                return self._head + self._tail
            return f"{self._head}\n\n[... {omitted} characters of output omitted ...]\n\n{self._tail}"


class OutputReader:
    """Drains the output pipe on a thread so the child never blocks on a full pipe."""

    def __init__(self, proc: subprocess.Popen[bytes], output: Any) -> None:  # anything with add(data, final)
        assert proc.stdout is not None
        self._pipe = proc.stdout
        self._output = output
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"shell-reader-{proc.pid}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        fd = self._pipe.fileno()
        try:
            while not self._stop.is_set():
                if not IS_WINDOWS and not _readable(fd):
                    continue
                chunk = os.read(fd, 65536)
                if not chunk:
                    break
                self._output.add(chunk)
        except OSError:
            pass
        self._output.add(b"", final=True)

    def finish(self, grace: float) -> bool:
        """Wait up to grace seconds for end of output; True if the pipe was still open."""
        self._thread.join(grace)
        lingering = self._thread.is_alive()
        self._stop.set()
        self._thread.join(0.5)
        if not self._thread.is_alive():
            self._pipe.close()
        return lingering


def _readable(fd: int) -> bool:
    # Windows has no select() on pipes; there the reader blocks until the pipe closes.
    ready, _, _ = select.select([fd], [], [], 0.1)
    return bool(ready)

