"""Where a process's CPU goes: py-spy (`--gil`: only the thread holding the GIL) attached to the
stack's web and worker while a benchmark runs, and a summary of its samples.

Used by `cpu --profile DIR`. py-spy is in the `test` extras (pyproject.toml); it needs ptrace
rights on the processes (root, or `kernel.yama.ptrace_scope` 0).

The summary charges each sample to one phase: the deepest frame of its stack that belongs to one of
PHASES, else to one of LIBS, else "other"; so the percentages add up to 100 per process; it also lists the
functions with the most samples anywhere in their stack (inclusive) and on top of it (self).
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

# (label, substring of a collapsed frame "function (file:line)"). A sample is charged to the phase of
# the deepest frame that matches one of these, so a later, more specific one wins over an outer one.
PHASES: list[tuple[str, str]] = [
    ("worker: Celery consumer loop (BRPOP, message receipt)", "celery/worker/"),
    ("worker: Celery task wrapper (tracer, request)", "celery/app/trace.py"),
    ("worker: Celery task events (publish)", "celery/events/"),
    ("turn: drain loop (elsewhere)", "drain_session (picobot/runtime/turn_runner.py"),
    ("logging (records, redacting filter, handlers)", "logging/__init__.py"),
    ("logging (records, redacting filter, handlers)", "picobot/logs/setup.py"),
    ("logging (records, redacting filter, handlers)", "picobot/logstream/"),
    ("turn: placement route (SQL)", "route (picobot/runtime/placement.py"),
    ("turn: lease (Redis)", "picobot/coord/lease.py"),
    ("turn: claim (SQL)", "_claim (picobot/runtime/turn_runner.py"),
    ("turn: has_pending / steer checks (SQL)", "has_pending (picobot/storage/inbound.py"),
    ("turn: commit (SQL)", "_commit (picobot/runtime/turn_runner.py"),
    ("turn: agent loop (prompt, tools list, views)", "picobot/agent/"),
    ("turn: budget gate + usage ledger row", "picobot/budgets/"),
    ("turn: other plugins' hooks (metrics, titles, channels)", "picobot/plugins/manager.py"),
    ("turn: provider (request body, stream parsing)", "picobot/providers/"),
    ("turn: openai SDK (request building, httpx, SSE)", "openai/"),
    ("turn: openai SDK (request building, httpx, SSE)", "httpx/"),
    ("turn: openai SDK (request building, httpx, SSE)", "httpcore/"),
    ("turn: snapshots and events (publisher)", "picobot/runtime/publisher.py"),
    ("turn: snapshots and events (publisher)", "picobot/agent/snapshot.py"),
    ("worker: supervisor / heartbeat threads", "picobot/runtime/control.py"),
    ("worker: supervisor / heartbeat threads", "picobot/runtime/heartbeat.py"),
    ("web: intake's rate limits (Redis)", "picobot/gateway/limits.py"),
    ("web: intake (Gateway.submit/accept: SQL)", "picobot/gateway/"),
    ("web: enqueue (Celery send_task / publish)", "send_task (celery/app/base.py"),
    ("web: enqueue (Celery send_task / publish)", "enqueue_turn (worker/queue.py"),
    ("web: enqueue (Celery send_task / publish)", "picobot/runtime/turn_queue.py"),
    ("web: socket frames (flask-sock, simple-websocket, wsproto)", "simple_websocket/"),
    ("web: socket frames (flask-sock, simple-websocket, wsproto)", "wsproto/"),
    ("web: relay of events (pub/sub → sockets)", "web/hub.py"),
    ("web: /ws handler", "web/ws.py"),
    ("web: gunicorn", "gunicorn/"),
]

# Libraries, for samples that pass through none of the phases above.
LIBS: list[tuple[str, str]] = [
    ("kombu (elsewhere)", "kombu/"),
    ("SQLAlchemy + sqlite3 (elsewhere)", "sqlalchemy/"),
    ("redis-py (elsewhere)", "redis/"),
    ("json", "json/"),
    ("threads: start, hand-off, queue waits", "threading.py"),
    ("threads: start, hand-off, queue waits", "picobot/threadpool.py"),
]


def available() -> str | None:
    """The py-spy executable, or None."""
    here = Path(sys.executable).with_name("py-spy")
    return str(here) if here.exists() else shutil.which("py-spy")


class Recorder:
    """py-spy recording one process (with its subprocesses) until stop()."""

    def __init__(self, exe: str, pid: int, out: Path, rate: int = 250):
        self.out = out
        self.proc = subprocess.Popen(
            [exe, "record", "--pid", str(pid), "--gil", "--nonblocking", "--subprocesses", "--rate", str(rate),
             "--format", "raw", "--function", "-o", str(out)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


def load(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's raw (collapsed) output: [(frames root first, samples)]."""
    stacks = []
    for line in path.read_text(errors="replace").splitlines():
        head, _, count = line.rpartition(" ")
        if head and count.isdigit():
            stacks.append((head.split(";"), int(count)))
    return stacks


def phase_of(frames: list[str]) -> str:
    for table in (PHASES, LIBS):
        found = None
        for frame in frames:
            for label, needle in table:
                if needle in frame:
                    found = label
                    break
        if found is not None:
            return found
    return "other"


def _short(frame: str) -> str:
    name, _, where = frame.partition(" (")
    where = where.rstrip(")")
    for cut in ("site-packages/", "lib/python3"):
        if cut in where:
            where = where.split(cut, 1)[1]
    return f"{name} ({where})"


def summary(path: Path, top: int = 15) -> str:
    stacks = load(path)
    total = sum(n for _, n in stacks)
    if not total:
        return f"{path.name}: no samples"
    phases: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    own: Counter[str] = Counter()
    for frames, n in stacks:
        phases[phase_of(frames)] += n
        for frame in set(frames):
            inclusive[_short(frame)] += n
        own[_short(frames[-1])] += n
    lines = [f"{path.stem}: {total} GIL-holding samples"]
    lines += [f"  {n / total:6.1%}  {label}" for label, n in phases.most_common()]
    lines.append("  functions, inclusive:")
    lines += [f"  {n / total:6.1%}  {f}" for f, n in inclusive.most_common(top)]
    lines.append("  functions, self:")
    lines += [f"  {n / total:6.1%}  {f}" for f, n in own.most_common(top)]
    return "\n".join(lines)


if __name__ == "__main__":  # python -m scripts.bench.profile FILE... : summarize recorded files again
    for arg in sys.argv[1:]:
        print(summary(Path(arg), top=40))
