"""The `picobot` command as a user runs it: up (embedded Redis), chat -m, config, health, bad config."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from picobot.cli.embedded_redis import free_port, redis_answers
from tests.stack import wait_for
from tests.http_client import HTTP


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "REDIS_URL", "DATABASE_URL", "PICOBOT_"))}
    env.update(PICOBOT_HOME=str(home), **extra)
    return env


def _picobot(env: dict[str, str], *args: str, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "picobot", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow
def test_up_with_embedded_redis_then_chat_gets_a_tool_answer(tmp_path: Path, llm) -> None:  # type: ignore[no-untyped-def]
    home = tmp_path / "home"
    home.mkdir()
    port = free_port()
    (home / "config.json").write_text(json.dumps({"gateway": {"port": port}}))
    # no provider in the file: the OPENAI_* variables make the default, as the README shows
    env = _env(home, OPENAI_BASE_URL=f"{llm.url}/v1", OPENAI_API_KEY="sk-demo-key-123456", OPENAI_MODEL="fake")
    log = open(tmp_path / "up.log", "wb")
    up = subprocess.Popen([sys.executable, "-m", "picobot", "up", "--embedded-redis"], env=env, cwd=tmp_path,
                          stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        def healthy() -> bool:
            try:
                h = HTTP.get(f"http://127.0.0.1:{port}/health", timeout=2).json()
                return h["checks"]["workers"]["ok"] and h["checks"]["redis"]["ok"]
            except Exception:
                return False
        wait_for(healthy, 60, "picobot up did not become healthy")
        out = (tmp_path / "up.log").read_text()
        assert "embedded Redis" in out and f"http://127.0.0.1:{port}/" in out
        redis_url = out.split("embedded Redis: ", 1)[1].split()[0]
        assert (home / "data" / "picobot.db").exists() and (home / "redis").is_dir()
        r = _picobot(env, "chat", "-m", "what is 17*3", cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        assert "51" in r.stdout
        r = _picobot(env, "chat", "-m", "and hello", cwd=tmp_path)
        assert r.returncode == 0 and "You said: and hello" in r.stdout
        info = json.loads(_picobot(env, "chat", "-m", "/info --json", cwd=tmp_path).stdout)
        assert info["messages"] >= 6  # both -m calls landed in one conversation
    finally:
        os.killpg(up.pid, signal.SIGINT)
        code = up.wait(timeout=30)
        log.close()
    assert code == 0
    assert not redis_answers(redis_url)  # the embedded Redis stopped with it
    time.sleep(0.5)
    with pytest.raises(httpx.HTTPError):
        HTTP.get(f"http://127.0.0.1:{port}/health", timeout=1)


def test_bad_config_stops_with_the_key_path(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text(json.dumps({"providers": {"default": {"llm_timeout_secs": "soon"}}}))
    r = _picobot(_env(home), "config", cwd=tmp_path)
    assert r.returncode == 2
    assert "providers.default.llm_timeout_secs" in r.stderr
    (home / "config.json").write_text('{"gateway": {"port": 1,}}')
    r = _picobot(_env(home), "up", cwd=tmp_path)
    assert r.returncode == 2 and "config.json" in r.stderr and "line 1" in r.stderr


def test_config_prints_effective_config_with_secrets_masked(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    r = _picobot(_env(home, OPENAI_API_KEY="sk-very-secret-value-1234", OPENAI_BASE_URL="http://127.0.0.1:9/v1"),
                 "config", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    cfg = json.loads(r.stdout)
    assert cfg["providers"]["default"]["type"] == "openai"
    assert "sk-very-secret-value-1234" not in r.stdout + r.stderr
    assert cfg["gateway"]["port"] == 19876


def test_migrate_creates_the_schema_once_and_is_idempotent(tmp_path: Path) -> None:
    """`picobot migrate` (the Procfile's release step) on a new home, then again on the migrated one."""
    import sqlalchemy

    from picobot.storage.db import SCHEMA_HEAD

    home = tmp_path / "home"
    home.mkdir()
    for _ in range(2):
        r = _picobot(_env(home), "migrate", cwd=tmp_path)
        assert r.returncode == 0 and r.stdout.strip() == "database schema is up to date", r.stderr
    engine = sqlalchemy.create_engine(f"sqlite:///{home / 'data' / 'picobot.db'}")
    try:
        with engine.connect() as conn:
            assert [row[0] for row in conn.exec_driver_sql("SELECT version_num FROM alembic_version")] == [SCHEMA_HEAD]
    finally:
        engine.dispose()


def test_health_command_reports_dependencies(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    r = _picobot(_env(home, REDIS_URL="redis://127.0.0.1:1/0"), "health", "--json", cwd=tmp_path)
    report = json.loads(r.stdout)
    assert r.returncode == 1 and report["status"] == "degraded"
    assert report["checks"]["database"]["ok"] is True
    assert report["checks"]["redis"]["ok"] is False
    assert report["checks"]["provider"]["configured"] is False


def test_up_refuses_a_busy_port_with_a_clear_error(tmp_path: Path) -> None:
    import socket

    home = tmp_path / "home"
    home.mkdir()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (home / "config.json").write_text(json.dumps({"gateway": {"port": port}}))
        r = _picobot(_env(home), "up", cwd=tmp_path, timeout=60)
    assert r.returncode == 1
    assert f"127.0.0.1:{port}" in r.stderr and "gateway.port" in r.stderr
