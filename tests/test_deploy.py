"""Deployment files: the Procfile runs under honcho end to end; docker-compose.yml agrees with it."""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Iterator

import httpx
import pytest
import yaml

from picobot.cli import processes
from picobot.cli.embedded_redis import start_embedded
from scripts.fake_llm import FakeLLM
from tests.stack import ROOT, free_port, wait_for
from tests.http_client import HTTP

PROCFILE = ROOT / "Procfile"
COMPOSE = ROOT / "docker-compose.yml"


def procfile() -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in PROCFILE.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            name, _, cmd = line.partition(":")
            entries[name.strip()] = cmd.strip()
    return entries


def procfile_argv(name: str, port: str) -> list[str]:
    """A Procfile line as the shell would split it, with $PORT (and its default) expanded."""
    cmd = re.sub(r"\$\{PORT(:-[0-9]+)?\}|\$PORT\b", port, procfile()[name])
    return shlex.split(cmd)


def option(argv: list[str], *names: str) -> str | None:
    """The value of an option given as `-x value`, `--x value` or `--x=value`."""
    for i, arg in enumerate(argv):
        for name in names:
            if arg == name and i + 1 < len(argv):
                return argv[i + 1]
            if arg.startswith(name + "="):
                return arg.split("=", 1)[1]
    return None


# --- the files agree with each other and with `picobot web|worker|beat|flower` -----------------


def test_procfile_has_every_process_and_matches_the_cli() -> None:
    entries = procfile()
    assert set(entries) >= {"release", "web", "worker", "beat", "flower"}
    assert shlex.split(entries["release"]) == ["picobot", "migrate"]

    web = procfile_argv("web", "8000")
    cli_web = processes.web_argv(_config(), bind="0.0.0.0:8000")
    assert web[0] == "gunicorn" and web[-1] == "web.app:serve_app()" == cli_web[-1]
    for opt in ("-k", "-w", "--threads", "--worker-connections", "--timeout", "-b"):
        assert option(web, opt) == option(cli_web, opt), opt
    assert "--no-control-socket" in web

    worker = procfile_argv("worker", "8000")
    cli_worker = processes.worker_argv()
    # Celery's worker command without the plugins `celery` imports (worker/celery_cli.py), as `picobot worker`
    assert worker[:6] == ["python", "-m", "worker.celery_cli", "-A", "worker.app", "worker"]
    assert worker[1:6] == cli_worker[1:6]
    for opt in ("-P", "-c", "-Q"):
        assert option(worker, opt) == option(cli_worker, opt), opt
    assert {"--without-mingle", "--without-gossip"} <= set(worker)
    assert "-E" not in worker and "-E" not in cli_worker  # task events on demand (Flower switches them on)

    beat = procfile_argv("beat", "8000")
    assert beat[:6] == ["python", "-m", "worker.celery_cli", "-A", "worker.app", "beat"]
    assert beat[1:6] == processes.beat_argv()[1:6]
    assert option(beat, "-S") == option(processes.beat_argv(), "-S")

    flower = procfile_argv("flower", "5555")
    assert flower[:4] == ["celery", "-A", "worker.app", "flower"]
    assert option(flower, "--port") == "5555" and option(flower, "--address") == "127.0.0.1"
    # with no PORT set the lines fall back to the usual ports
    assert "${PORT:-19876}" in entries["web"] and "${PORT:-5555}" in entries["flower"]


def test_compose_parses_and_runs_the_procfile_commands() -> None:
    compose = yaml.safe_load(COMPOSE.read_text())
    services = compose["services"]
    assert set(services) >= {"redis", "postgres", "migrate", "web", "worker", "beat", "flower"}
    for dep in ("redis", "postgres"):
        assert services[dep]["healthcheck"]["test"], dep

    def env(service: str) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for item in services[service].get("environment", []):
            key, sep, value = item.partition("=")
            out[key] = value if sep else None  # None: passed through from the host
        return out

    assert services["migrate"]["command"] == procfile_argv("release", "0")
    assert services["migrate"]["restart"] == "no"
    assert services["web"]["command"] == procfile_argv("web", "19876")
    assert services["worker"]["command"] == procfile_argv("worker", "0")
    assert services["beat"]["command"] == procfile_argv("beat", "0")
    flower = services["flower"]["command"]
    expected = procfile_argv("flower", "5555")
    assert [a for a in flower if not a.startswith("--address")] == [a for a in expected if not a.startswith("--address")]
    assert "FLOWER_BASIC_AUTH" in env("flower")

    for name in ("migrate", "web", "worker", "beat"):
        e = env(name)
        assert (e["DATABASE_URL"] or "").startswith("postgresql+psycopg://"), name
        assert e["REDIS_URL"] == "redis://redis:6379/0", name
        assert e["PICOBOT_HOME"] == "/data", name
        assert {"OPENAI_API_KEY", "OPENAI_BASE_URL", "OPENAI_MODEL", "ANTHROPIC_API_KEY"} <= set(e), name
    for name in ("web", "worker", "beat"):
        deps = services[name]["depends_on"]
        assert deps["redis"]["condition"] == deps["postgres"]["condition"] == "service_healthy", name
        assert deps["migrate"]["condition"] == "service_completed_successfully", name
    assert services["web"]["ports"] == ["127.0.0.1:19876:19876"]
    assert services["flower"]["ports"] == ["127.0.0.1:5555:5555"]


def test_dockerfile_basics() -> None:
    text = (ROOT / "Dockerfile").read_text()
    assert re.search(r"^FROM python:3\.11-slim\b", text, re.M)
    assert "PICOBOT_HOME=/data" in text
    assert re.search(r"^USER (?!root)\S+", text, re.M), "the image runs as a non-root user"
    for path in ("pyproject.toml", "picobot", "web", "worker"):
        assert re.search(rf"^COPY .*\b{re.escape(path)}\b", text, re.M), path


def _config():  # type: ignore[no-untyped-def]
    from picobot.config.schema import Config

    return Config()


# --- the Procfile, brought up with honcho, answers a chat turn ---------------------------------


def _processes_with_marker(marker: str) -> list[int]:
    """Pids of live processes whose environment carries this test's marker (ours only)."""
    needle = f"PICOBOT_DEPLOY_TEST={marker}".encode()
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes().split(b"\0"):
                pids.append(int(entry.name))
        except OSError:
            continue
    return pids


def _kill_marked(marker: str) -> None:
    for pid in _processes_with_marker(marker):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


@pytest.fixture
def deploy_env(tmp_path: Path) -> Iterator[dict[str, str]]:
    llm = FakeLLM(host="127.0.0.1", port=0).start()
    redis_proc, redis_url = start_embedded(tmp_path / "redis")
    marker = uuid.uuid4().hex
    port = free_port()
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({
        "providers": {"default": {"type": "openai", "base_url": f"{llm.url}/v1", "api_key": "sk-x"}},
        "models": {"default": {"model_id": "fake"}},
        "gateway": {"port": port},
    }))
    bin_dir = str(Path(sys.executable).parent)
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL", "FLOWER_", "PICOBOT_"))}
    env.update(PICOBOT_HOME=str(home), REDIS_URL=redis_url, PORT=str(port), PYTHONUNBUFFERED="1",
               PATH=bin_dir + os.pathsep + env.get("PATH", ""), PICOBOT_DEPLOY_TEST=marker)
    try:
        yield env
    finally:
        _kill_marked(marker)
        redis_proc.terminate()
        try:
            redis_proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            redis_proc.kill()
        llm.stop()


@pytest.mark.slow
def test_procfile_under_honcho_answers_a_chat_turn(deploy_env: dict[str, str], tmp_path: Path) -> None:
    env = deploy_env
    port = env["PORT"]

    release = subprocess.run(procfile()["release"], shell=True, env=env, cwd=tmp_path,
                             capture_output=True, text=True, timeout=120)
    assert release.returncode == 0, release.stderr
    assert (Path(env["PICOBOT_HOME"]) / "data" / "picobot.db").exists()

    log_path = tmp_path / "honcho.log"
    with open(log_path, "wb") as log:
        honcho = subprocess.Popen(
            [sys.executable, "-m", "honcho", "start", "--no-colour", "-f", str(PROCFILE),
             "-e", str(tmp_path / "no.env"), "web", "worker", "beat"],
            env=env, cwd=tmp_path, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
        )
    try:
        def worker_alive() -> bool:
            assert honcho.poll() is None, f"honcho exited early:\n{log_path.read_text()[-4000:]}"
            try:
                health = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
            except (httpx.HTTPError, ValueError):
                return False
            return bool(health["checks"]["workers"].get("alive"))

        try:
            wait_for(worker_alive, 90, "the worker did not report alive in /health")
        except TimeoutError:
            pytest.fail(f"no worker in /health within 90 s:\n{log_path.read_text()[-4000:]}")

        chat = subprocess.run(["picobot", "chat", "-m", "what is 6*7", "--url", f"ws://127.0.0.1:{port}/ws"],
                              env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert chat.returncode == 0, f"{chat.stdout}\n{chat.stderr}\n{log_path.read_text()[-4000:]}"
        assert "42" in chat.stdout

        os.killpg(honcho.pid, signal.SIGTERM)
        honcho.wait(timeout=30)  # honcho stops its processes, SIGKILLs stragglers after 5 s
        try:
            wait_for(lambda: not _processes_with_marker(env["PICOBOT_DEPLOY_TEST"]), 15,
                     "processes outlived honcho")
        except TimeoutError:
            pytest.fail(f"processes outlived honcho:\n{log_path.read_text()[-4000:]}")
        text = log_path.read_text()
        assert "SIGTERM received" in text
    finally:
        if honcho.poll() is None:
            try:
                os.killpg(honcho.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            honcho.wait(timeout=10)
