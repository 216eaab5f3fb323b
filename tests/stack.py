"""A real PicoBot stack for tests: its own redis-server, gunicorn web, Celery workers, beat.

Everything runs as separate processes, exactly as `picobot web|worker|beat` start them.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import httpx
import websocket

from picobot.cli.embedded_redis import free_port, start_embedded
from picobot.config.home import default_database_url
from picobot.storage.db import Database
from tests.http_client import HTTP

ROOT = Path(__file__).resolve().parent.parent
API_KEY = "sk-test-" + "S3CRETKEY" * 3  # must never show up in logs, frames or the database


def base_config(llm_url: str, port: int, **gateway: Any) -> dict[str, Any]:
    return {
        "providers": {"default": {"type": "openai", "base_url": f"{llm_url}/v1", "api_key": "${PICOBOT_TEST_KEY}",
                                  "llm_timeout_secs": 30, "max_retries": 2}},
        "models": {"default": {"model_id": "fake-model", "context_window_tokens": 32000}},
        "agents": {"default": {"provider": "default", "model": "default"}},
        "gateway": {"host": "127.0.0.1", "port": port, "turn_lease_secs": 6, "sweep_interval_secs": 1,
                    "snapshot_interval_ms": 20, **gateway},
        "time": {"timezone": "UTC"},
        # off: a background title call would take scripted responses and show in the request log of
        # tests about something else (tests/test_titles.py turns them on)
        "titles": {"enabled": False},
    }


_schema_template: list[Path] = []  # one migrated SQLite file per test process, copied into each stack's home


def migrated(database_url: str | None, home: Path) -> None:
    """The stack's database at the newest schema, as `picobot migrate` leaves it: PostgreSQL migrated in this
    process (no interpreter start per stack); SQLite a copy of a file migrated once per test process.
    The command itself still runs in the tests that start processes the way a deployment does."""
    if database_url:
        db = Database(database_url)
        try:
            db.migrate()
        finally:
            db.dispose()
        return
    if not _schema_template:
        template = Path(tempfile.mkdtemp(prefix="picobot-schema-")) / "picobot.db"
        db = Database(f"sqlite:///{template}")
        try:
            db.migrate()
        finally:
            db.dispose()
        _schema_template.append(template)
    target = Path(default_database_url(home).removeprefix("sqlite:///"))
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(_schema_template[0], target)


class Stack:
    live: "list[Stack]" = []  # running stacks, whose logs a failing test's report shows

    def __init__(self, tmp: Path, llm_url: str, database_url: str | None = None,
                 config: dict[str, Any] | None = None, gateway: dict[str, Any] | None = None):
        self.home = tmp / "home"
        self.home.mkdir(parents=True, exist_ok=True)
        self.logs = tmp / "logs"
        self.logs.mkdir(exist_ok=True)
        self.port = free_port()
        cfg = config or base_config(llm_url, self.port, **(gateway or {}))
        (self.home / "config.json").write_text(json.dumps(cfg, indent=2))
        self.redis_proc, self.redis_url = start_embedded(tmp / "redis")
        self.env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
        # workers at the web's priority (PICOBOT_WORKER_NICE's default is 10): the pytest workers sharing the
        # cores would otherwise starve a stack's worker; start_worker(nice=N) and the benchmarks set it
        self.env.update(PICOBOT_HOME=str(self.home), REDIS_URL=self.redis_url, PICOBOT_TEST_KEY=API_KEY,
                        PYTHONUNBUFFERED="1", PICOBOT_WORKER_NICE="0")
        if database_url:
            self.env["DATABASE_URL"] = database_url
        self.procs: dict[str, subprocess.Popen] = {}
        self._log_files: list[Any] = []
        migrated(database_url, self.home)
        self.cwd = tmp
        Stack.live.append(self)

    # --- processes ---------------------------------------------------------------------

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
        log = open(self.logs / f"{name}.log", "ab")
        self._log_files.append(log)
        proc = subprocess.Popen([sys.executable, "-m", "picobot", *argv], env={**self.env, **(env or {})}, cwd=self.cwd,
                                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        self.procs[name] = proc
        return proc

    def start_web(self, wait: bool = True) -> None:
        self._spawn("web", ["web", "--bind", f"127.0.0.1:{self.port}"])
        if wait:
            self.wait_web()

    def wait_web(self, timeout: float = 30) -> None:
        wait_for(lambda: self._http_ok("/health"), timeout, "web did not start")

    def start_worker(self, name: str = "w1", concurrency: int = 50, nice: int = 0,
                     env: dict[str, str] | None = None, wait: bool = True, timeout: float = 90) -> subprocess.Popen:
        """`nice`: PICOBOT_WORKER_NICE for this worker (tests default to 0, so that the pytest workers sharing the
        cores do not starve the stacks; the benchmarks pass the product's default, 10, to run them as deployed).
        `env`: overrides for this worker (another host: PICOBOT_HOST_ID and a home of its own).
        `wait=False`: return at once (processes started together start sooner); `wait_workers` then."""
        proc = self._spawn(name, ["worker", "-c", str(concurrency), "-n", f"{name}@%h"],
                           env={"PICOBOT_WORKER_NICE": str(nice), **(env or {})})
        if wait:
            self.wait_workers(name, timeout=timeout)
        return proc

    def wait_workers(self, *names: str, timeout: float | None = None) -> None:
        def up() -> bool:
            alive = self.workers_alive()
            return all(any(n.startswith(f"{name}@") for n in alive) for name in names)
        # generous: a worker starts in seconds, but a loaded CI machine (three pytest workers, their stacks and
        # Chromium on two cores) once took over 40 s to start one on PostgreSQL
        wait_for(up, timeout or 90, f"workers {', '.join(names)} did not start")

    def start_beat(self) -> None:
        self._spawn("beat", ["beat"])

    def start(self, workers: int = 1, beat: bool = True) -> "Stack":
        """Web, workers and beat started together (none needs another to start), then waited for."""
        self.start_web(wait=False)
        names = [f"w{i + 1}" for i in range(workers)]
        for name in names:
            self.start_worker(name, wait=False)
        if beat:
            self.start_beat()
        self.wait_web(timeout=60)
        if names:
            self.wait_workers(*names)
        return self

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        proc = self.procs.pop(name)
        os.killpg(proc.pid, sig)
        proc.wait(timeout=30)

    def stop(self) -> None:
        """Kill every process group at once. A graceful stop (a worker's warm shutdown takes about a second) is not
        what a stack's teardown tests; the tests of a graceful stop send SIGTERM themselves (`picobot up`, beat, honcho)."""
        for proc in self.procs.values():
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.procs.values():
            proc.wait()
        self.procs.clear()
        self.redis_proc.terminate()
        self.redis_proc.wait(timeout=10)
        for f in self._log_files:
            f.close()
        if self in Stack.live:
            Stack.live.remove(self)

    # --- probes ------------------------------------------------------------------------

    @property
    def http(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}/ws"

    def _http_ok(self, path: str) -> bool:
        try:
            return HTTP.get(self.http + path, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    def health(self) -> dict[str, Any]:
        return HTTP.get(self.http + "/health", timeout=10).json()

    def workers_alive(self) -> list[str]:
        try:
            return self.health()["checks"]["workers"].get("alive", [])
        except Exception:
            return []

    def redis(self):  # type: ignore[no-untyped-def]
        import redis

        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def log_tails(self, lines: int = 120) -> str:
        """The last lines of each process log, for a failing test's report."""
        parts = []
        for path in sorted(self.logs.glob("*.log")):
            tail = path.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"----- {path.name} (last {len(tail)} lines) -----\n" + "\n".join(tail))
        return "\n".join(parts)

    def all_logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in self.logs.glob("*.log"))

    @property
    def database_url(self) -> str:
        return self.env.get("DATABASE_URL") or f"sqlite:///{self.home / 'data' / 'picobot.db'}"

    @property
    def token(self) -> str:
        """A device token for this stack (issued once through the pairing core, on the stack's database)."""
        if getattr(self, "_token", None) is None:
            self._token = issue_token(self.database_url, "tests")
        return self._token

    def client(self, chat_id: str | None = None) -> "WsClient":
        return WsClient(self.ws_url, chat_id or "t-" + uuid.uuid4().hex[:10], token=self.token)

    def cli(self, *args: str, timeout: float = 120, stdin: str | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        """`picobot <args>` as a process on this stack (its environment unless `env` is given)."""
        return subprocess.run([sys.executable, "-m", "picobot", *args], env=env or self.env, cwd=self.cwd,
                              capture_output=True, text=True, timeout=timeout, input=stdin)


def command_here(stack: Stack, command: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    """`picobot <command> ...` run by the command's own code in this process (`picobot.cli.<command>.run`: its
    parser, the stack's config, its exit code and output): for checks, polls and bad-argument cases around the
    commands a test runs as subprocesses, where an interpreter per call would cost about a second of CPU."""
    from picobot.cli.main import build_parser
    from picobot.config.loader import load_config

    run = importlib.import_module(f"picobot.cli.{command}").run
    out, err = io.StringIO(), io.StringIO()
    saved = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BytesIO((stdin or "").encode()))
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = run(load_config(home=stack.home, environ=stack.env, cwd=stack.cwd),
                           build_parser().parse_args([command, *args]))
            except SystemExit as exc:  # argparse's own usage errors
                code = exc.code if isinstance(exc.code, int) else 2
    finally:
        sys.stdin = saved
    return subprocess.CompletedProcess(["picobot", command, *args], code, out.getvalue(), err.getvalue())


def issue_token(database_url: str, name: str, kind: str = "api") -> str:
    """A paired-device token straight from the database, as `picobot pair --new-token` does."""
    from picobot.auth.pairing import Pairing
    from picobot.storage.db import Database

    db = Database(database_url)
    try:
        return Pairing(db).issue_token(name, kind=kind).token
    finally:
        db.dispose()


class WsClient:
    def __init__(self, url: str, chat_id: str, channel: str = "cli_chat", token: str | None = None):
        self.chat_id = chat_id
        headers = [f"Authorization: Bearer {token}"] if token else []
        self.ws = websocket.create_connection(f"{url}?chat_id={chat_id}&channel={channel}", timeout=30,
                                              header=headers)
        self.frames: list[dict[str, Any]] = []
        self.ready = self.recv_until(lambda f: f["type"] == "ready")
        self.session_id = self.ready["session"]["session_id"]

    def send(self, frame: dict[str, Any] | str) -> None:
        self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    def recv(self, timeout: float = 30) -> dict[str, Any]:
        self.ws.settimeout(timeout)
        frame = json.loads(self.ws.recv())
        self.frames.append(frame)
        return frame

    def recv_until(self, pred: Callable[[dict[str, Any]], bool], timeout: float = 60) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no matching frame within {timeout} s; got {[f.get('type') for f in self.frames[-20:]]}")
            frame = self.recv(left)
            if pred(frame):
                return frame

    def say(self, text: str, mode: str = "steer", frame_id: str | None = None) -> dict[str, Any]:
        """Send a message; return its accepted/rejected frame."""
        frame_id = frame_id or uuid.uuid4().hex[:8]
        self.send({"type": "message", "content": text, "mode": mode, "id": frame_id})
        return self.recv_until(lambda f: f.get("id") == frame_id)

    def command(self, text: str) -> dict[str, Any]:
        frame_id = uuid.uuid4().hex[:8]
        self.send({"type": "command", "command": text, "id": frame_id})
        return self.recv_until(lambda f: f.get("id") == frame_id)

    def wait_completed(self, seq: int, timeout: float = 60, session_id: str | None = None) -> dict[str, Any]:
        """The turn_completed frame that answers `seq`, even if it arrived while waiting for another
        frame (a /stop's turn_completed can overtake the command's own reply). Seqs count per dialog:
        after /new, `session_id` tells this dialog's seq 1 from the last one's."""
        def answers(f: dict[str, Any]) -> bool:
            return (f["type"] == "turn_completed" and seq in f.get("inbound_seqs", [])
                    and (session_id is None or f.get("session_id") == session_id))

        for frame in self.frames:
            if answers(frame):
                return frame
        return self.recv_until(answers, timeout)

    def ask(self, text: str, timeout: float = 60) -> dict[str, Any]:
        acc = self.say(text)
        assert acc["type"] == "accepted", acc
        return self.wait_completed(acc["seq"], timeout, acc.get("session_id"))

    def close(self) -> None:
        self.ws.close()


def wait_for(pred: Callable[[], Any], timeout: float, what: str) -> Any:
    """pred()'s first true value; TimeoutError(what) after `timeout` s. Polls soon, then every 0.25 s: most
    waits end within a second, and the long ones (a fault's recovery) need not cost ten probes a second."""
    deadline = time.monotonic() + timeout
    pause = 0.05
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(pause)
        pause = min(pause * 1.5, 0.25)
    raise TimeoutError(what)


def all_at_once(n: int, fn: Callable[[int], Any]) -> list[Any]:
    """fn(0..n-1) in n threads released together; re-raises the first failure."""
    import threading
    from concurrent.futures import ThreadPoolExecutor

    gate = threading.Barrier(n)

    def run(i: int) -> Any:
        gate.wait()
        return fn(i)

    with ThreadPoolExecutor(n) as pool:
        return [f.result() for f in [pool.submit(run, i) for i in range(n)]]
