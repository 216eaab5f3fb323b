"""Shared benchmark helpers: a fake LLM process, a real stack, /proc readings, turn timing, output.

The fake LLM runs in its own process (not in the benchmark's), so its CPU can be read from /proc
and it does not compete with the client for the benchmark process's GIL.
"""

from __future__ import annotations

import argparse
import json
import re
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import httpx

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:  # `tests.stack` lives at the repo root
    sys.path.insert(0, str(ROOT))

from picobot.cli.embedded_redis import free_port  # noqa: E402
from tests.stack import Stack, WsClient, base_config  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KB = os.sysconf("SC_PAGE_SIZE") // 1024

# The production defaults (tests.stack uses short test timings; benchmarks should not).
# Rate limits on but out of reach: one benchmark client sends far more than a person, from one device
# token, and the limits' cost (a Redis round trip per message) stays in what is measured.
_OUT_OF_REACH = 10_000_000
BENCH_GATEWAY = {"turn_lease_secs": 30, "sweep_interval_secs": 5.0, "snapshot_interval_ms": 50,
                 "rate_limits": {"messages_per_chat_per_minute": _OUT_OF_REACH,
                                 "messages_per_device_per_minute": _OUT_OF_REACH,
                                 "new_dialogs_per_chat_per_hour": _OUT_OF_REACH, "sockets_per_device": _OUT_OF_REACH}}


# --- the fake LLM, in its own process -------------------------------------------------------

class FakeLLMProcess:
    """`python -m scripts.fake_llm` on a free port, with the control API wrapped."""

    def __init__(self, log_path: Path | None = None):
        self.port = free_port()
        self._log = open(log_path, "ab") if log_path else subprocess.DEVNULL
        self.proc = subprocess.Popen([sys.executable, "-m", "scripts.fake_llm", "--host", "127.0.0.1",
                                      "--port", str(self.port)], cwd=ROOT, stdout=self._log,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        self.http = httpx.Client(base_url=self.url, timeout=30)
        deadline = time.monotonic() + 20
        while True:
            try:
                if self.http.get("/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the fake LLM did not start")
            time.sleep(0.05)

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def openai_url(self) -> str:
        return self.url + "/v1"

    def add_rule(self, match: str | None, *responses: dict[str, Any], repeat: bool = False) -> None:
        self.http.post("/_fake/rules", json={"match": match, "responses": list(responses),
                                             "repeat": repeat}).raise_for_status()

    def reset(self) -> None:
        self.http.delete("/_fake/rules").raise_for_status()

    def requests(self) -> list[dict[str, Any]]:
        return self.http.get("/_fake/requests").json()["requests"]

    def stop(self) -> None:
        self.http.close()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        if self._log is not subprocess.DEVNULL:
            self._log.close()


# --- a running stack -------------------------------------------------------------------------

@dataclass
class Bench:
    stack: Stack
    llm: FakeLLMProcess
    tmp: Path

    @property
    def web_pid(self) -> int:
        return self.stack.procs["web"].pid  # `picobot web` runs gunicorn in its own process: this is the master

    @property
    def worker_pid(self) -> int:
        return self.stack.procs["w1"].pid  # `picobot worker` runs celery in its own process (threads pool: one process)

    def web_pids(self) -> list[int]:
        return process_tree(self.web_pid)

    def worker_pids(self) -> list[int]:
        """Every worker process's tree (w1, w2, ... when the stack runs several)."""
        return [pid for name, proc in self.stack.procs.items() if re.fullmatch(r"w\d+", name)
                for pid in process_tree(proc.pid)]

    def client(self, chat_id: str | None = None) -> WsClient:
        return self.stack.client(chat_id or "bench-" + uuid.uuid4().hex[:10])


PG_URL = os.environ.get("PICOBOT_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


@contextmanager
def pg_schema() -> Iterator[str]:
    """A fresh PostgreSQL schema (dropped afterwards); yields a database URL that uses it."""
    import sqlalchemy

    schema = "bench_" + uuid.uuid4().hex[:12]
    eng = sqlalchemy.create_engine(PG_URL)
    with eng.begin() as c:
        c.exec_driver_sql(f"CREATE SCHEMA {schema}")
    sep = "&" if "?" in PG_URL else "?"
    try:
        yield f"{PG_URL}{sep}options=-csearch_path%3D{schema}"
    finally:
        with eng.begin() as c:
            c.exec_driver_sql(f"DROP SCHEMA {schema} CASCADE")
        eng.dispose()


# Set by main() from --db; benchmarks pass it on through running_stack().
DB_CHOICE = {"db": "sqlite"}
KEEP = {"keep": False}  # --keep, for the benchmarks that make their own temp dir


@contextmanager
def running_stack(name: str, worker_concurrency: int = 200, beat: bool = True, keep: bool = False,
                  gateway: dict[str, Any] | None = None, db: str | None = None,
                  trace_dir: Path | None = None, workers: int = 1) -> Iterator[Bench]:
    """A fake LLM process plus web + `workers` worker processes (w1, w2, ... on one host, as `picobot up`
    runs them) (+ beat), with production gateway timings.

    With trace_dir, web and worker run under `python -m scripts.bench.common trace ...`, which wraps
    the turn path's functions with timers (see TRACE_POINTS) and writes events there.
    """
    db = db or DB_CHOICE["db"]
    if db == "postgres":
        with pg_schema() as url:
            with _running_stack(name, worker_concurrency, beat, keep, gateway, url, trace_dir, workers) as bench:
                yield bench
    else:
        with _running_stack(name, worker_concurrency, beat, keep, gateway, None, trace_dir, workers) as bench:
            yield bench


def _spawn_traced(stack: Stack, name: str, role: str, argv: list[str], trace_dir: Path) -> None:
    log_file = open(stack.logs / f"{name}.log", "ab")
    stack._log_files.append(log_file)
    env = dict(stack.env, PICOBOT_BENCH_TRACE_DIR=str(trace_dir),
               PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), stack.env.get("PYTHONPATH")])))
    stack.procs[name] = subprocess.Popen([sys.executable, "-m", "scripts.bench.common", "trace", role, *argv],
                                         env=env, cwd=stack.cwd, stdout=log_file, stderr=subprocess.STDOUT,
                                         start_new_session=True)


def _start_traced(stack: Stack, worker_concurrency: int, trace_dir: Path, workers: int = 1) -> None:
    from picobot.cli.processes import web_argv, worker_argv
    from tests.stack import wait_for

    trace_dir.mkdir(parents=True, exist_ok=True)
    web = web_argv(None, bind=f"127.0.0.1:{stack.port}")  # type: ignore[arg-type]  # config unused with bind
    _spawn_traced(stack, "web", "web", web[3:], trace_dir)  # drop "python -m gunicorn"
    wait_for(lambda: stack._http_ok("/health"), 30, "web did not start")
    for i in range(1, workers + 1):
        worker = worker_argv(concurrency=worker_concurrency, name=f"w{i}@%h")
        _spawn_traced(stack, f"w{i}", "worker", worker[3:], trace_dir)  # drop "python -m worker.celery_cli"
        wait_for(lambda: any(n.startswith(f"w{i}@") for n in stack.workers_alive()), 40, f"worker w{i} did not start")


@contextmanager
def _running_stack(name: str, worker_concurrency: int, beat: bool, keep: bool, gateway: dict[str, Any] | None,
                   database_url: str | None, trace_dir: Path | None, workers: int = 1) -> Iterator[Bench]:
    tmp = Path(tempfile.mkdtemp(prefix=f"picobot-bench-{name}-"))
    llm = FakeLLMProcess(tmp / "fake_llm.log")
    stack: Stack | None = None
    failed = False
    try:
        stack = Stack(tmp, llm.url, database_url=database_url, gateway={**BENCH_GATEWAY, **(gateway or {})})
        if trace_dir is not None:
            _start_traced(stack, worker_concurrency, trace_dir, workers)
        else:
            stack.start_web()
            for i in range(1, workers + 1):
                stack.start_worker(f"w{i}", concurrency=worker_concurrency)
        if beat:
            stack.start_beat()
        yield Bench(stack, llm, tmp)
    except BaseException:
        failed = True
        raise
    finally:
        if stack is not None:
            stack.stop()
        llm.stop()
        if keep or failed:
            print(f"[bench] logs kept in {tmp}", file=sys.stderr)
        else:
            shutil.rmtree(tmp, ignore_errors=True)


# --- /proc -------------------------------------------------------------------------------------

def children(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{task}/children") as f:
                    out += [int(x) for x in f.read().split()]
            except OSError:
                pass
    except OSError:
        pass
    return out


def process_tree(pid: int) -> list[int]:
    """pid and all its live descendants."""
    seen: list[int] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        if p in seen or not os.path.exists(f"/proc/{p}"):
            continue
        seen.append(p)
        todo += children(p)
    return seen


def cpu_seconds(pids: list[int]) -> float:
    """utime + stime of the processes (all their threads, live and exited), in seconds."""
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime (fields 14, 15 of stat(5))
    return total / CLK_TCK


def rss_mb(pids: list[int]) -> float:
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/statm") as f:
                total_kb += int(f.read().split()[1]) * PAGE_KB
        except OSError:
            continue
    return total_kb / 1024


def pss_mb(pids: list[int]) -> float | None:
    total_kb = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                for line in f:
                    if line.startswith("Pss:"):
                        total_kb += int(line.split()[1])
                        break
        except OSError:
            return None
    return total_kb / 1024


def thread_count(pids: list[int]) -> int:
    n = 0
    for pid in pids:
        try:
            n += len(os.listdir(f"/proc/{pid}/task"))
        except OSError:
            pass
    return n


def self_cpu_seconds() -> float:
    return time.process_time()


def _machine_jiffies() -> tuple[int, int]:
    """(busy, steal) jiffies of the whole machine, from /proc/stat."""
    with open("/proc/stat") as f:
        v = [int(x) for x in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (v + [0] * 8)[:8]
    return user + nice + system + irq + softirq, steal


def _own_jiffies() -> int:
    """This process and its waited-for children (utime, stime, cutime, cstime)."""
    with open("/proc/self/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15])


class CpuSampler:
    """Cumulative CPU of named groups of processes and the machine's busy time, read from /proc every
    `interval` seconds in a thread, so the CPU each group spent between two instants (wall clock, as the
    fake LLM stamps its requests) can be read afterwards. /proc counts in ticks of 1/CLK_TCK s (10 ms),
    so a group's figure over a window is good to about one tick; the sampler itself costs ~1 % of a core."""

    def __init__(self, groups: dict[str, list[int]], interval: float = 0.01):
        self.groups = groups
        self.interval = interval
        self.samples: list[tuple[float, dict[str, float], int]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def __enter__(self) -> "CpuSampler":
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    def _sample(self) -> None:
        cpu = {name: cpu_seconds(pids) for name, pids in self.groups.items()}
        self.samples.append((time.time(), cpu, _machine_jiffies()[0]))

    def between(self, t0: float, t1: float) -> tuple[dict[str, float], float]:
        """(CPU seconds per group, the machine's busy CPU seconds in all) from the last sample at or
        before t0 to the first at or after t1."""
        if not self.samples:
            return {name: 0.0 for name in self.groups}, 0.0
        before = [s for s in self.samples if s[0] <= t0] or self.samples[:1]
        after = [s for s in self.samples if s[0] >= t1] or self.samples[-1:]
        a, b = before[-1], after[0]
        return {name: b[1][name] - a[1][name] for name in self.groups}, (b[2] - a[2]) / CLK_TCK


class MachineLoad:
    """How much CPU the rest of the machine used while a benchmark ran (its stacks are our children,
    stopped and waited for by the end, so their CPU is counted as ours)."""

    def __init__(self) -> None:
        self.t0 = time.monotonic()
        self.busy0, self.steal0 = _machine_jiffies()
        self.own0 = _own_jiffies()

    def other_share(self) -> tuple[float, float]:
        """(share of the machine's CPU used by other processes, share stolen by the hypervisor)."""
        busy, steal = _machine_jiffies()
        capacity = (time.monotonic() - self.t0) * CLK_TCK * (os.cpu_count() or 1)
        other = (busy - self.busy0) - (_own_jiffies() - self.own0)
        return max(0.0, other / capacity), (steal - self.steal0) / capacity


# --- turns over /ws --------------------------------------------------------------------------

@dataclass
class TurnTiming:
    sent: float  # time.time() when the message frame went out
    accepted: float
    completed: float
    frame: dict[str, Any]
    updates: int  # turn_updated frames seen

    @property
    def total_ms(self) -> float:
        return (self.completed - self.sent) * 1000


def timed_turn(client: WsClient, text: str, timeout: float = 60) -> TurnTiming:
    """Send a message; wait for its accepted frame and the turn_completed that lists its seq.

    Uses time.time() (not perf_counter) so the stamps line up with the fake LLM's request log.
    """
    frame_id = uuid.uuid4().hex[:8]
    payload = json.dumps({"type": "message", "content": text, "id": frame_id})
    ws = client.ws
    seq: int | None = None
    accepted = 0.0
    completed_for: list[tuple[float, dict[str, Any]]] = []
    updates = 0
    deadline = time.monotonic() + timeout
    sent = time.time()
    ws.send(payload)
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"turn for {text[:40]!r} did not complete within {timeout} s")
        ws.settimeout(left)
        raw = ws.recv()
        now = time.time()
        frame = json.loads(raw)
        kind = frame.get("type")
        if frame.get("id") == frame_id:
            if kind != "accepted":
                raise RuntimeError(f"message not accepted: {frame}")
            seq, accepted = frame["seq"], now
        elif kind == "turn_updated":
            updates += 1
        elif kind == "turn_completed":
            completed_for.append((now, frame))
        if seq is not None:
            for at, done in completed_for:
                if seq in done.get("inbound_seqs", []):
                    return TurnTiming(sent, accepted, at, done, updates)


# --- tracing: timers around the turn path, inside the web and worker processes ----------------------

# (module, attribute, label). Missing attributes are skipped (the code under test moves on).
TRACE_POINTS: dict[str, list[tuple[str, str, str]]] = {
    "web": [
        ("web.ws", "Connection.handle", "web: frame handled (ws.Connection.handle)"),
        ("picobot.gateway.intake", "Gateway.accept", "web:   Gateway.accept"),
        ("picobot.storage.sessions", "current_or_create_id", "web:     sessions.current_or_create_id"),
        ("picobot.storage.inbound", "intake_state", "web:     inbound.intake_state"),
        ("picobot.storage.inbound", "enqueue", "web:     inbound.enqueue"),
        ("worker.queue", "CeleryTaskQueue.enqueue_turn", "web:     Celery send_task"),
        ("web.hub", "EventHub._dispatch", "web: hub dispatch (pub/sub -> outbox)"),
        ("web.hub", "Outbox.drain", "web: socket send (Outbox.drain)"),
    ],
    "worker": [
        ("picobot.runtime.turn_runner", "drain_session", "worker: drain_session (the Celery task)"),
        ("picobot.runtime.turn_runner", "_claim", "worker:   claim (SQL)"),
        ("picobot.storage.messages", "load", "worker:     messages.load (history cache miss)"),
        ("picobot.runtime.turn_runner", "_execute", "worker:   execute (agent loop)"),
        ("picobot.runtime.turn_runner", "_drain_steer", "worker:     steer check (SQL)"),
        ("picobot.agent.loop", "AgentLoop._stream_once", "worker:     model call"),
        ("picobot.providers.openai_provider", "OpenAIProvider._open", "worker:       SDK create() until headers"),
        ("openai._base_client", "SyncAPIClient.request", "worker:         SDK HTTP request"),
        ("picobot.agent.loop", "AgentLoop._run_tools", "worker:     tools"),
        ("picobot.runtime.turn_runner", "_commit", "worker:   commit (SQL)"),
        ("picobot.runtime.publisher", "EventPublisher.publish", "worker: publish event (Redis)"),
    ],
}
_trace_buf: list[dict[str, Any]] = []
_trace_lock = __import__("threading").Lock()


def _trace_flush() -> None:
    out = os.environ.get("PICOBOT_BENCH_TRACE_DIR")
    with _trace_lock:
        if not out or not _trace_buf:
            return
        lines = "".join(json.dumps(e) + "\n" for e in _trace_buf)
        _trace_buf.clear()
    with open(Path(out) / f"trace-{os.getpid()}.jsonl", "a") as f:
        f.write(lines)


def _trace_flusher() -> None:
    import threading

    def loop() -> None:
        while True:
            time.sleep(0.5)
            _trace_flush()

    threading.Thread(target=loop, name="bench-trace-flush", daemon=True).start()


def _traced(fn: Callable[..., Any], label: str) -> Callable[..., Any]:
    import functools

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0, c0 = time.time(), time.thread_time()
        try:
            return fn(*args, **kwargs)
        finally:
            event = {"n": label, "t0": t0, "t1": time.time(), "cpu": time.thread_time() - c0}
            with _trace_lock:
                _trace_buf.append(event)

    return wrapper


def install_trace(role: str) -> list[str]:
    """Wrap the role's TRACE_POINTS (and SQL BEGIN, whose time is lock wait on SQLite); returns the
    labels that could not be found."""
    import atexit
    import importlib

    missing = []
    for module_name, attr, label in TRACE_POINTS[role]:
        try:
            owner: Any = importlib.import_module(module_name)
            *path, name = attr.split(".")
            for part in path:
                owner = getattr(owner, part)
            setattr(owner, name, _traced(getattr(owner, name), label))
        except (ImportError, AttributeError):
            missing.append(label)
    from sqlalchemy.engine.base import Connection

    begin_label = f"{role}: SQL BEGIN (waits for the write lock on SQLite)"
    exec_driver_sql = Connection.exec_driver_sql

    def traced_exec(self: Any, statement: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(statement, str) and statement.startswith("BEGIN"):
            return _traced(exec_driver_sql, begin_label)(self, statement, *args, **kwargs)
        return exec_driver_sql(self, statement, *args, **kwargs)

    Connection.exec_driver_sql = traced_exec  # type: ignore[method-assign]
    atexit.register(_trace_flush)
    _trace_flusher()
    os.register_at_fork(after_in_child=_trace_flusher)  # gunicorn forks its worker after this
    return missing


def read_trace(trace_dir: Path) -> list[dict[str, Any]]:
    events = []
    for f in trace_dir.glob("trace-*.jsonl"):
        for line in f.read_text().splitlines():
            if line.strip():
                events.append(json.loads(line))
    return sorted(events, key=lambda e: e["t0"])


def trace_timeline(events: list[dict[str, Any]], turns: list[tuple[float, float, list[tuple[str, float]]]]) -> str:
    """Median timeline of the turns: each event's start (ms after the client sent the message), wall
    duration and CPU of its thread. turns: (sent, completed, [(marker label, time), ...])."""
    import statistics

    rows: dict[str, dict[str, list[float]]] = {}
    for sent, done, markers in turns:
        seen: dict[str, int] = {}
        mine = [e for e in events if sent <= e["t0"] <= done]
        mine += [{"n": label, "t0": t, "t1": t, "cpu": None} for label, t in markers]
        for e in sorted(mine, key=lambda e: e["t0"]):
            seen[e["n"]] = seen.get(e["n"], 0) + 1
            key = e["n"] if seen[e["n"]] == 1 else f"{e['n']} #{seen[e['n']]}"
            r = rows.setdefault(key, {"start": [], "dur": [], "cpu": []})
            r["start"].append((e["t0"] - sent) * 1000)
            r["dur"].append((e["t1"] - e["t0"]) * 1000)
            if e["cpu"] is not None:
                r["cpu"].append(e["cpu"] * 1000)
    n = len(turns)
    out = []
    for key, r in sorted(rows.items(), key=lambda kv: statistics.median(kv[1]["start"])):
        if len(r["start"]) < n / 2:
            continue  # happens in fewer than half the turns
        cpu = f"{statistics.median(r['cpu']):7.2f}" if r["cpu"] else "      -"
        dur = f"{statistics.median(r['dur']):7.2f}" if r["cpu"] else "      -"
        out.append([f"{statistics.median(r['start']):7.2f}", dur, cpu, key])
    return table(out, ["at (ms)", "wall ms", "cpu ms", "step (medians over the turns)"])


def trace_summary(events: list[dict[str, Any]], windows: list[tuple[float, float]]) -> str:
    """Per step: how often it ran inside the windows, wall time (median, p90, sum) and CPU sum."""
    rows: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        if any(a <= e["t0"] <= b for a, b in windows):
            rows.setdefault(e["n"], []).append(e)
    out = []
    for name, evs in sorted(rows.items(), key=lambda kv: -sum(e["cpu"] for e in kv[1])):
        wall = [(e["t1"] - e["t0"]) * 1000 for e in evs]
        out.append([name, str(len(evs)), f"{percentile(wall, 50):.2f}", f"{percentile(wall, 90):.2f}",
                    f"{sum(wall):.0f}", f"{sum(e['cpu'] for e in evs) * 1000:.0f}"])
    return table(out, ["step", "calls", "wall p50 ms", "wall p90 ms", "wall sum ms", "cpu sum ms"])


# --- statistics ------------------------------------------------------------------------------

def percentile(values: list[float], p: float) -> float:
    """Linear-interpolated percentile (p in 0..100)."""
    if not values:
        return float("nan")
    xs = sorted(values)
    k = (len(xs) - 1) * p / 100
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def p50_p99(values: list[float]) -> tuple[float, float]:
    return percentile(values, 50), percentile(values, 99)


# --- results ---------------------------------------------------------------------------------

@dataclass
class Metric:
    name: str
    value: float
    unit: str
    target: str = ""  # e.g. "<= 15"
    ok: bool | None = None  # None: informational
    baseline: str = ""  # what it is compared with, and that figure
    ratio: str = ""  # e.g. "4.1x direct SDK"


@dataclass
class Result:
    bench: str
    metrics: list[Metric] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    raw: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    details: str = ""  # printed after the notes (e.g. a trace timeline)

    def add(self, *args: Any, **kwargs: Any) -> Metric:
        m = Metric(*args, **kwargs)
        self.metrics.append(m)
        return m

    def to_json(self) -> dict[str, Any]:
        return {"bench": self.bench, "metrics": [asdict(m) for m in self.metrics], "notes": self.notes,
                "raw": self.raw, "seconds": self.seconds, "details": self.details}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        return cls(data["bench"], [Metric(**m) for m in data["metrics"]], data.get("notes", []),
                   data.get("raw", {}), data.get("seconds", 0.0), data.get("details", ""))


def verdict(ok: bool | None) -> str:
    return "-" if ok is None else ("PASS" if ok else "MISS")


def fmt(value: float, unit: str) -> str:
    if unit == "x":
        return f"{value:.2f}x"
    if unit in ("ms", "MB", "turns/s", "ms/turn", "ms/call", "calls/s"):
        return f"{value:.1f} {unit}"
    return f"{value:g} {unit}".strip()


def table(rows: list[list[str]], header: list[str]) -> str:
    widths = [max(len(str(r[i])) for r in [header, *rows]) for i in range(len(header))]
    line = lambda r: "  ".join(str(c).ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, rows)])


def metric_rows(result: Result) -> list[list[str]]:
    return [[m.name, fmt(m.value, m.unit), m.target and (f"{m.target}x" if m.unit == "x" else f"{m.target} {m.unit}") or "",
             m.baseline, m.ratio, verdict(m.ok)] for m in result.metrics]


HEADER = ["metric", "measured", "target", "baseline (same run)", "ratio", "result"]


def print_result(result: Result) -> None:
    print(f"\n== {result.bench} ({result.seconds:.0f} s) ==")
    print(table(metric_rows(result), HEADER))
    for note in result.notes:
        print(f"  note: {note}")
    if result.details:
        print(result.details)
    sys.stdout.flush()


def log(msg: str) -> None:
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def main(name: str, run: Callable[[argparse.Namespace], Result],
         add_args: Callable[[argparse.ArgumentParser], None] | None = None, doc: str | None = None) -> int:
    parser = argparse.ArgumentParser(prog=f"python -m scripts.bench.{name}", description=doc,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--json", metavar="PATH", help="also write the result as JSON here")
    parser.add_argument("--keep", action="store_true", help="keep the stack's temp dir and logs")
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite",
                        help="the stack's database (default sqlite, as `picobot up`; postgres: "
                             "PICOBOT_TEST_PG_URL, a fresh schema)")
    if add_args:
        add_args(parser)
    args = parser.parse_args()
    DB_CHOICE["db"] = args.db
    KEEP["keep"] = bool(args.keep)
    started = time.monotonic()
    load = MachineLoad()
    result = run(args)
    result.seconds = time.monotonic() - started
    other, steal = load.other_share()
    result.raw["db"] = args.db
    result.raw["machine"] = {"other_cpu_share": other, "steal_share": steal, "cpus": os.cpu_count(),
                             "loadavg_end": open("/proc/loadavg").read().split()[:3]}
    result.notes.append(f"machine: other processes used {other:.0%} of its CPU during the run, the hypervisor "
                        f"stole {steal:.0%}" + ("  ** the figures are disturbed: rerun on a quiet machine **"
                                                if other > 0.05 else ""))
    if args.db != "sqlite":
        result.notes.append(f"database: {args.db}")
    print_result(result)
    if args.json:
        Path(args.json).write_text(json.dumps(result.to_json(), indent=2))
    return 0


def _trace_main(argv: list[str]) -> int:
    """python -m scripts.bench.common trace web|worker <gunicorn or celery arguments>"""
    role, rest = argv[0], argv[1:]
    from scripts.bench.common import install_trace as install  # the package module, not __main__

    missing = install(role)
    if missing:
        print(f"[bench trace] not found, not traced: {missing}", file=sys.stderr, flush=True)
    if role == "web":
        from gunicorn.app.wsgiapp import run as gunicorn_run

        sys.argv = ["gunicorn", *rest]
        gunicorn_run()
        return 0
    from worker.celery_cli import main as celery_main  # what `picobot worker` runs

    return celery_main(rest)


if __name__ == "__main__" and len(sys.argv) > 2 and sys.argv[1] == "trace":
    raise SystemExit(_trace_main(sys.argv[2:]))


__all__ = ["Bench", "CpuSampler", "FakeLLMProcess", "MachineLoad", "Metric", "Result", "Stack", "WsClient", "base_config",
           "cpu_seconds", "install_trace", "log", "main", "p50_p99", "percentile", "pg_schema", "process_tree",
           "pss_mb", "read_trace", "rss_mb", "running_stack", "self_cpu_seconds", "thread_count", "timed_turn",
           "trace_summary", "trace_timeline"]
