"""Command lines of PicoBot's processes, and `picobot up`, which runs them all on one machine."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from picobot.config import Config
from picobot.runtime.task_names import WORKER_QUEUES


def web_argv(config: Config, bind: str | None = None, threads: int = 1100) -> list[str]:
    bind = bind or f"{config.gateway.host}:{config.gateway.port}"
    # one thread per open socket; connections beyond the threads are kept-alive HTTP clients (gunicorn
    # warns, and keeps none alive, unless worker_connections exceeds threads)
    return [sys.executable, "-m", "gunicorn", "-k", "gthread", "-w", "1", "--threads", str(threads),
            "--worker-connections", str(threads + 1000), "--timeout", "120", "--graceful-timeout", "10", "--no-control-socket", "-b", bind, "web.app:serve_app()"]


DEFAULT_WORKER_CONCURRENCY = 200
MAX_WORKER_CONCURRENCY = 2000
# Celery's worker and beat commands without its umbrella command, which imports every installed Celery CLI
# plugin (Flower and tornado) into each process (worker/celery_cli.py); the same arguments as `celery`
CELERY_CLI = "worker.celery_cli"


def worker_argv(concurrency: int | None = None, queues: str = WORKER_QUEUES, name: str | None = None) -> list[str]:
    """`concurrency`: threads (turns at once) of the worker; None: $PICOBOT_WORKER_CONCURRENCY, else 200."""
    threads = worker_concurrency() if concurrency is None else concurrency
    argv = [sys.executable, "-m", CELERY_CLI, "-A", "worker.app", "worker", "-P", "threads", "-c", str(threads),
            "-Q", queues, "--loglevel", "INFO", "--without-mingle", "--without-gossip"]
    if name:
        argv += ["-n", name]
    return argv


def beat_argv() -> list[str]:
    return [sys.executable, "-m", CELERY_CLI, "-A", "worker.app", "beat", "-S", "worker.beat.PicoBeatScheduler",
            "--loglevel", "INFO"]


def plugin_process_argv(target: str) -> list[str]:
    """A plugin's long-running process (`picobot run <plugin>:<process>:<instance>`), the built-in channels
    plugin's platform connections included."""
    return [sys.executable, "-m", "picobot", "run", target]


def flower_argv(port: int = 5555) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "worker.app", "flower", f"--port={port}", "--address=127.0.0.1"]


def lower_priority(increment: int) -> None:
    """Add `increment` to this process's niceness; run in a child started in a session of its own.

    Linux schedules each session as one group (autogroup, on by default), and niceness weighs only
    against the processes of the same group: a niced child in a new session still gets a full share
    against the web's session. So the child also lowers its group's weight (/proc/self/autogroup),
    which is what makes the niceness hold against the web. No autogroups (or not Linux): os.nice alone.
    """
    os.nice(increment)
    _lower_autogroup(increment)


def _lower_autogroup(niceness: int) -> None:
    try:
        with open("/proc/self/autogroup", "w") as group:
            group.write(str(min(19, niceness)))
    except OSError:
        pass


def run_at_least_at(niceness: int) -> None:
    """Every thread of this process at niceness `niceness` or lower priority (a thread inherits its creator's,
    so the threads started later follow), and its scheduling group too when the process leads its session
    (the group is then its own: `picobot up` and most process managers start each program so). A worker calls
    it as it starts (worker/celery_app.py), however it was started: `picobot up`, the Procfile, docker compose.
    Idempotent: what is already at least that nice is left as it is."""
    if niceness <= 0:
        return
    tids = [int(t) for t in os.listdir("/proc/self/task")] if os.path.isdir("/proc/self/task") else [0]
    for tid in tids:
        try:
            if os.getpriority(os.PRIO_PROCESS, tid) < niceness:
                os.setpriority(os.PRIO_PROCESS, tid, niceness)
        except OSError:  # a thread that ended meanwhile
            pass
    try:
        leads_session = os.getsid(0) == os.getpid()
    except OSError:
        leads_session = False
    if leads_session:
        _lower_autogroup(niceness)


@dataclass
class Child:
    name: str
    argv: list[str]
    proc: subprocess.Popen | None = None
    restarts: list[float] = field(default_factory=list)

    nice: int = 0  # added to the process's niceness (workers yield the CPU to the web process)

    def start(self, env: dict[str, str]) -> None:
        increment = self.nice
        preexec = (lambda: lower_priority(increment)) if increment > 0 else None
        self.proc = subprocess.Popen(self.argv, env=env, start_new_session=True, preexec_fn=preexec)

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                pass


class Supervisor:
    """Starts children, restarts one that dies (beat exits by design when it loses its lock)."""

    def __init__(self, children: list[Child], env: dict[str, str]):
        self.children = children
        self.env = env
        self._stopping = False
        self.failed = False

    def run(self) -> int:
        for child in self.children:
            child.start(self.env)
        signal.signal(signal.SIGINT, self._on_signal)
        signal.signal(signal.SIGTERM, self._on_signal)
        try:
            while not self._stopping:
                for child in self.children:
                    if child.proc is not None and child.proc.poll() is not None and not self._stopping:
                        code = child.proc.returncode
                        now = time.monotonic()
                        child.restarts = [t for t in child.restarts if now - t < 60] + [now]
                        if len(child.restarts) > 5:
                            print(f"picobot: {child.name} keeps exiting (code {code}); stopping.", file=sys.stderr)
                            self._stopping = True
                            self.failed = True
                            break
                        print(f"picobot: {child.name} exited with code {code}; restarting.", file=sys.stderr)
                        child.start(self.env)
                time.sleep(0.5)
        finally:
            self.shutdown()
        return 1 if self.failed else 0

    def _on_signal(self, signum: int, _frame: object) -> None:
        self._stopping = True

    def shutdown(self, grace: float = 10.0) -> None:
        # web first (stop taking input), then beat, then the worker finishes its turns
        for child in self.children:
            child.stop(signal.SIGTERM)
        deadline = time.monotonic() + grace
        for child in self.children:
            if child.proc is None:
                continue
            try:
                child.proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.stop(signal.SIGKILL)
                child.proc.wait()


MAX_AUTO_WORKERS = 8
DEFAULT_WORKER_NICE = 10


def worker_nice(environ: dict[str, str] | None = None) -> int:
    """$PICOBOT_WORKER_NICE (0-19, default 10): the niceness workers run at, so that the web process (and with
    it every webhook's acknowledgement and every socket) keeps priority over them on shared cores; 0: off.

    Measured (docs/BENCHMARKS.md, Feishu, 200 events/s with a worker answering them on the same two cores):
    ack p50 106 -> 10 ms and p99 905 -> 278 ms at 10, and the worker answered as many events per second."""
    env = os.environ if environ is None else environ
    raw = (env.get("PICOBOT_WORKER_NICE") or str(DEFAULT_WORKER_NICE)).strip()
    nice = _whole_number(raw, 0, 19)
    if nice is None:
        raise ValueError(f"PICOBOT_WORKER_NICE must be a whole number from 0 to 19 (got {raw[:40]!r})")
    return nice


def _whole_number(raw: str, low: int, high: int) -> int | None:
    """`raw` as an int from `low` to `high`; None for anything else ("²", "١", "1e3", 5,000 digits, " ")."""
    if not (raw.isascii() and raw.isdigit()) or len(raw) > 6:  # int() reads other scripts' digits; str.isdigit "²"
        return None
    value = int(raw)
    return value if low <= value <= high else None


TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("", "0", "false", "no", "off")


def task_events(environ: dict[str, str] | None = None) -> bool:
    """$PICOBOT_TASK_EVENTS: workers send Celery task events from their start (1/true/yes/on), or only once a
    monitor such as Flower asks (0/false/no/off, or unset). Anything else is refused: a typo must not leave
    events off without a word."""
    env = os.environ if environ is None else environ
    raw = (env.get("PICOBOT_TASK_EVENTS") or "").strip().lower()
    if raw in TRUE_WORDS:
        return True
    if raw in FALSE_WORDS:
        return False
    shown = raw[:40].encode("utf-8", "backslashreplace").decode("utf-8")
    raise ValueError(f"PICOBOT_TASK_EVENTS must be one of 1, true, yes, on, 0, false, no, off (got {shown!r})")


def worker_concurrency(environ: dict[str, str] | None = None) -> int:
    """$PICOBOT_WORKER_CONCURRENCY (1-2000, default 200): a worker's threads, i.e. turns it runs at once.

    A turn holds a thread while it waits for the model, so this is sized by concurrent conversations."""
    env = os.environ if environ is None else environ
    raw = (env.get("PICOBOT_WORKER_CONCURRENCY") or str(DEFAULT_WORKER_CONCURRENCY)).strip()
    threads = _whole_number(raw, 1, MAX_WORKER_CONCURRENCY)
    if threads is None:
        raise ValueError(f"PICOBOT_WORKER_CONCURRENCY must be a whole number from 1 to {MAX_WORKER_CONCURRENCY} "
                         f"(got {raw[:40]!r})")
    return threads


def concurrency_argument(text: str) -> int:
    """argparse type of `picobot worker -c`: a whole number of threads from 1 to 2000."""
    import argparse

    threads = _whole_number(text.strip(), 1, MAX_WORKER_CONCURRENCY)
    if threads is None:
        raise argparse.ArgumentTypeError(f"{text[:40]!r} is not a whole number from 1 to {MAX_WORKER_CONCURRENCY}")
    return threads


def worker_environment_problem(environ: dict[str, str] | None = None) -> str | None:
    """What is wrong with the worker settings of the environment (niceness, task events, threads), or None."""
    try:
        worker_nice(environ)
        task_events(environ)
        worker_concurrency(environ)
    except ValueError as exc:
        return str(exc)
    return None


def worker_count(requested: int | None = None, environ: dict[str, str] | None = None) -> int:
    """Worker processes `picobot up` runs: --workers, else $PICOBOT_WORKERS, else one per core (at most 8).

    Each process has its own GIL, so a busy machine's cores all run turns; a turn waiting on the model
    holds only a thread, so more processes than cores buy nothing."""
    env = os.environ if environ is None else environ
    if requested is None and env.get("PICOBOT_WORKERS"):
        raw = env["PICOBOT_WORKERS"].strip()
        requested = _whole_number(raw, 1, 64)
        if requested is None:
            raise ValueError(f"PICOBOT_WORKERS must be a whole number from 1 to 64 (got {raw[:40]!r})")
    if requested is not None:
        if not 1 <= requested <= 64:
            raise ValueError(f"--workers must be from 1 to 64 (got {requested})")
        return requested
    return max(1, min(MAX_AUTO_WORKERS, os.cpu_count() or 1))


def up(config: Config, with_flower: bool = False, embedded_redis: bool = False, demo_port: int | None = None,
       workers: int = 1, nice: int = 0) -> int:
    from picobot.cli.embedded_redis import choose_redis
    from picobot.storage.db import Database

    busy = _port_in_use(config.gateway.host, config.gateway.port)
    if busy:
        print(f"picobot: cannot listen on {config.gateway.host}:{config.gateway.port} ({busy}); "
              "is PicoBot already running? Change gateway.port to use another port.", file=sys.stderr)
        return 1
    try:
        redis_url, redis_proc = choose_redis(config.redis_url, config.home / "redis", force_embedded=embedded_redis)
    except RuntimeError as exc:
        print(f"picobot: {exc}", file=sys.stderr)
        return 1
    db = Database(config.database_url)
    db.migrate()
    pair_line = _pairing_line(config, db)
    env = dict(os.environ, REDIS_URL=redis_url, PICOBOT_HOME=str(config.home))
    if config.broker_url:  # RabbitMQ (or another Redis) for the task queues: every child uses it
        env["CELERY_BROKER_URL"] = config.broker_url
    names = ["worker"] if workers == 1 else [f"worker {i}" for i in range(1, workers + 1)]
    children = [Child("web", web_argv(config)),
                *(Child(label, worker_argv(name=None if workers == 1 else f"w{i}@%h"), nice=nice)
                  for i, label in enumerate(names, start=1)),
                Child("beat", beat_argv())]
    if demo_port is not None:  # first: the worker's first model call finds it listening
        children.insert(0, Child("demo model", [sys.executable, "-m", "picobot.demo.llm", "--port", str(demo_port)]))
    from picobot.cli.plugin_parts import planned

    children += [Child(label, plugin_process_argv(target)) for label, target in planned(config)]
    if with_flower:
        children.append(Child("flower", flower_argv()))
    host = "127.0.0.1" if config.gateway.host in ("0.0.0.0", "::") else config.gateway.host
    where = "embedded Redis" if redis_proc else "Redis"
    print(f"PicoBot is starting: http://{host}:{config.gateway.port}/  (WebSocket /ws, health /health)")
    broker = f"\n  task broker: {safe_url(config.broker_url)}" if config.broker_url else ""
    print(f"  {where}: {safe_url(redis_url)}{broker}\n  database: {safe_url(config.database_url)}\n"
          f"  worker processes: {workers} (--workers or PICOBOT_WORKERS to change)"
          f"{f'; niceness +{nice}' if nice else ''}\n"
          f"  chat from a terminal: picobot chat    stop: Ctrl-C", flush=True)
    if pair_line:
        print(pair_line, flush=True)
    for line in _model_lines(config, demo_port):
        print(line, flush=True)
    try:
        return Supervisor(children, env).run()
    finally:
        if redis_proc is not None:
            redis_proc.terminate()
            try:
                redis_proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                redis_proc.kill()


def _model_lines(config: Config, demo_port: int | None) -> list[str]:
    """What the banner says about the model: the demo's, or how to set one when none is configured."""
    if demo_port is not None:
        return ["  model: the built-in demo model (it streams, calls calculator for arithmetic and get_time "
                "for the time, and echoes the rest); set a real one with OPENAI_API_KEY or ANTHROPIC_API_KEY"]
    if config.providers:
        return []
    from picobot.cli.first_run import no_model_lines, ollama_models

    return no_model_lines(ollama_models())


def _pairing_line(config: Config, db: Any) -> str:
    """A ready-to-open pairing URL for this browser session (a fresh one-time code)."""
    if not config.gateway.pairing_required:
        return "  web UI: open to anyone who can reach it (gateway.pairing_required is false)"
    from picobot.auth.pairing import Pairing, pairing_url

    code = Pairing(db).new_code()
    return (f"  pair this browser (one-time code {code.display}, 10 minutes): {pairing_url(config, code.code)}\n"
            f"  another device later: picobot pair")


def _port_in_use(host: str, port: int) -> str | None:
    """Why host:port cannot be listened on, or None when it can."""
    import socket

    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except OSError as exc:
        return exc.strerror or str(exc)
    return None


def safe_url(url: str) -> str:
    """A Redis or database URL fit to print: the password (user info or `?password=`) masked."""
    from picobot.security.redact import MASK, mask_text

    scheme, sep, rest = url.partition("://")
    netloc, slash, tail = rest.partition("/")
    userinfo, at, host = netloc.rpartition("@")  # the last @: a password may hold an unescaped one
    if sep and at:
        user, colon, _ = userinfo.partition(":")
        netloc = f"{user}:{MASK}@{host}" if colon else f"{MASK}@{host}"
        url = f"{scheme}://{netloc}{slash}{tail}"
    return mask_text(url)


def exec_argv(argv: list[str], env: dict[str, str] | None = None) -> int:
    """Become argv: the process keeps its PID, so signals go straight to what runs.

    A `python -m module ...` line on this interpreter runs here, as `python -m` would run it (sys.argv[0] the
    module's file): no second interpreter start-up, and the imports this process has made are reused (about
    a second of CPU per `picobot web|worker|beat`). Anything else replaces the process (execve)."""
    if env is None and len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m":
        import runpy

        sys.argv = [argv[2], *argv[3:]]
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        return 0
    os.execve(argv[0], argv, env or dict(os.environ))
    return 0  # not reached
