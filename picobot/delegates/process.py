"""One CLI run: its own process group, output teed to a log file and a capped buffer, stopped for good.

Stopping sends SIGTERM to the whole group, gives it GRACE_SECS to exit, then sends SIGKILL to the group
whatever happened: a CLI that forks and ignores SIGTERM still dies, children included.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import BinaryIO

from picobot.domain.cancel import CancelToken
from picobot.security.redact import redact
from picobot.tools.shell import IS_WINDOWS, CappedOutput, OutputReader, kill_process_group, start_process

GRACE_SECS = 2.0
MAX_LOG_BYTES = 20_000_000  # the saved log keeps this much; the rest is counted, not kept
_POLL_SECS = 0.05
_DRAIN_SECS = 0.5


class Tee:
    """Output to the capped buffer the model sees and to the raw log file (up to MAX_LOG_BYTES)."""

    def __init__(self, capped: CappedOutput, raw: BinaryIO) -> None:
        self.capped = capped
        self.raw = raw
        self.written = 0
        self.dropped = 0
        self._lock = threading.Lock()

    def add(self, data: bytes, final: bool = False) -> None:
        self.capped.add(data, final)
        with self._lock:
            room = max(MAX_LOG_BYTES - self.written, 0)
            self.raw.write(data[:room])
            self.written += min(len(data), room)
            self.dropped += max(len(data) - room, 0)


def stop_group(proc: subprocess.Popen[bytes], grace: float = GRACE_SECS) -> None:
    """SIGTERM to the process group, up to `grace` seconds for the leader, then SIGKILL to the group."""
    if IS_WINDOWS:
        kill_process_group(proc)
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except (ProcessLookupError, PermissionError):
        return
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    kill_process_group(proc)  # children that ignored SIGTERM, or outlived the leader


class Run:
    """Start argv in cwd, wait for it (timeout, cancel), and leave no process of its group behind."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: Path, tee: Tee) -> None:
        self.proc = start_process(argv, env, str(cwd))
        self.reader = OutputReader(self.proc, tee)
        self._stopping = threading.Lock()

    def wait(self, timeout: float, cancel: CancelToken) -> bool:
        """True when the CLI exited by itself; False on timeout or cancel (the group is stopped)."""
        deadline = time.monotonic() + timeout
        exited = False
        try:
            while not cancel.cancelled and (left := deadline - time.monotonic()) > 0:
                try:
                    self.proc.wait(timeout=min(_POLL_SECS, left))
                    exited = True
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            self.stop()
            self.reader.finish(_DRAIN_SECS)
        return exited and not cancel.cancelled

    def stop(self) -> None:
        with self._stopping:
            if self.proc.poll() is None:
                stop_group(self.proc)
            else:
                kill_process_group(self.proc)  # what the CLI left running in its group
            self.proc.wait()


def save_log(raw_path: Path, final_path: Path, secrets: frozenset[str], dropped: int) -> None:
    """The raw log, secrets redacted line by line, written to final_path; the raw file is removed."""
    try:
        fd = os.open(final_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)  # secrets of the task, not the world's
        with open(raw_path, "rb") as src, open(fd, "w", encoding="utf-8") as dst:
            for line in src:
                dst.write(redact(line.decode("utf-8", errors="replace"), secrets))
            if dropped:
                dst.write(f"\n[... {dropped} more bytes of output not kept ...]\n")
    finally:
        raw_path.unlink(missing_ok=True)
