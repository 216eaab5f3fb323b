"""A newcomer's first minute: `picobot up` says how to set a model, offers a local Ollama, and
`picobot up --demo` answers with the built-in demo model, tool call included, with no key at all."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Iterator

import httpx
import pytest

from picobot.cli.embedded_redis import free_port
from picobot.cli.first_run import no_model_lines, ollama_models
from tests.stack import wait_for
from tests.http_client import HTTP


class _Ollama(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = json.dumps({"object": "list", "data": [{"id": "qwen3:4b", "object": "model"}]}).encode()
        self.send_response(200 if self.path == "/v1/models" else 404)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def ollama() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Ollama)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_a_local_ollama_is_found_and_offered(ollama: str) -> None:
    assert ollama_models(ollama) == ["qwen3:4b"]
    lines = "\n".join(no_model_lines(["qwen3:4b"]))
    assert "OPENAI_MODEL=qwen3:4b" in lines and "/v1" in lines


def test_no_ollama_means_no_offer_and_the_keys_are_explained() -> None:
    assert ollama_models(f"http://127.0.0.1:{free_port()}") is None
    lines = "\n".join(no_model_lines(None))
    assert "OPENAI_API_KEY" in lines and "ANTHROPIC_API_KEY" in lines and "picobot up --demo" in lines
    assert "Ollama" not in lines


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "REDIS_URL", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(home), PYTHONUNBUFFERED="1")
    return env


def test_up_demo_answers_with_a_tool_call_and_no_key(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"gateway": {"port": port}}))
    log = open(tmp_path / "up.log", "wb")
    proc = subprocess.Popen([sys.executable, "-m", "picobot", "up", "--demo", "--embedded-redis", "--workers", "2"],
                            env={**_env(home), "PICOBOT_WORKER_NICE": "5"},
                            cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def healthy() -> bool:
            try:
                checks = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=2).json()["checks"]
                return checks["provider"]["ok"] and len(checks["workers"].get("alive") or []) == 2
            except (httpx.HTTPError, ValueError, KeyError):
                return False

        wait_for(healthy, 60, "picobot up --demo did not become healthy")
        chat = subprocess.run([sys.executable, "-m", "picobot", "chat", "-m", "what is 2+3 ?", "--url",
                               f"ws://127.0.0.1:{port}/ws"], env=_env(home), cwd=tmp_path, capture_output=True,
                              text=True, timeout=60)
        assert chat.returncode == 0, chat.stderr
        assert "The tool calculator returned: 5" in chat.stdout
        banner = (tmp_path / "up.log").read_text(errors="replace")
        assert "model: the built-in demo model" in banner and "no model is configured" not in banner
        assert "worker processes: 2" in banner and "niceness +5" in banner
        # PICOBOT_WORKER_NICE: the workers at a lower priority than the web process
        nice = {_cmdline(pid): _niceness(pid) for pid in _group(proc.pid)}
        workers = [n for cmd, n in nice.items() if " worker " in f" {cmd} " and "celery" in cmd]
        webs = [n for cmd, n in nice.items() if "gunicorn" in cmd]
        assert len(workers) == 2 and all(n == 5 for n in workers), nice
        assert webs and all(n == 0 for n in webs), nice
        # and their scheduling groups (each child leads a session: an autogroup of its own on Linux)
        groups = {_cmdline(pid): _autogroup_nice(pid) for pid in _group(proc.pid)}
        if any(n is not None for n in groups.values()):
            assert sorted(n for cmd, n in groups.items() if "celery" in cmd and " worker " in f" {cmd} ") == [5, 5]
            assert all(n == 0 for cmd, n in groups.items() if "gunicorn" in cmd), groups
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=30)
        log.close()


def test_up_demo_refuses_a_home_whose_config_lists_providers(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"providers": {"default": {"api_key": "sk-x"}},
                                                  "models": {"default": {"model_id": "gpt-x"}}}))
    r = subprocess.run([sys.executable, "-m", "picobot", "up", "--demo"], env=_env(home), cwd=tmp_path,
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and "--demo runs the built-in demo model only when config.json lists no providers" in r.stderr


def _group(pgid_of: int) -> list[int]:
    """The processes `picobot up` started (each child leads a session of its own, whose parent is up)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pgid_of:  # ppid
                found.append(int(entry.name))
    return found


def _cmdline(pid: int) -> str:
    return (Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")).strip()


def _niceness(pid: int) -> int:
    return int((Path(f"/proc/{pid}/stat").read_text()).rsplit(")", 1)[1].split()[16])


def _autogroup_nice(pid: int) -> int | None:
    """The niceness of the process's autogroup ("/autogroup-42 nice 5"), or None without autogroups."""
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def test_the_worker_count_is_checked() -> None:
    from picobot.cli.processes import worker_count

    assert worker_count(3, {}) == 3
    assert worker_count(None, {"PICOBOT_WORKERS": "2"}) == 2
    assert 1 <= worker_count(None, {}) <= 8
    for bad in ("0", "-1", "two", "1e3", "65", "\udc80", "\u00b2", "\u0661", "9" * 5000, "0x2", "+2"):
        with pytest.raises(ValueError, match="PICOBOT_WORKERS"):
            worker_count(None, {"PICOBOT_WORKERS": bad})
    with pytest.raises(ValueError, match="--workers"):
        worker_count(0, {})


def test_the_worker_niceness_is_checked() -> None:
    from picobot.cli.processes import worker_nice

    assert worker_nice({}) == 10 and worker_nice({"PICOBOT_WORKER_NICE": ""}) == 10 and worker_nice({"PICOBOT_WORKER_NICE": "7"}) == 7
    for bad in ("-1", "20", "x", "1.5", "\udc80", "\u00b2", "\u0665", "1" * 5000):
        with pytest.raises(ValueError, match="PICOBOT_WORKER_NICE"):
            worker_nice({"PICOBOT_WORKER_NICE": bad})
