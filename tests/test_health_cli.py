"""`picobot health` run in-process leaves no Redis connection and no database file open behind it."""

from __future__ import annotations

import gc
import json
import os
from pathlib import Path

import pytest
import redis

from picobot.cli.main import main
from tests.stack import wait_for


def _redis_clients(observer: redis.Redis) -> int:
    """Connections the server holds, not counting the observer's own."""
    me = observer.client_id()
    return sum(1 for c in observer.client_list() if int(c["id"]) != me)


def _back_to(observer: redis.Redis, count: int) -> None:
    # the server notices a closed socket on its next loop: allow it a moment, never forever
    wait_for(lambda: _redis_clients(observer) == count, 5, f"Redis still holds more than {count} connections")


def _open_files_under(folder: Path) -> list[str]:
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:  # closed between listing and reading
            continue
        if target.startswith(str(folder)):
            found.append(target)
    return found


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="counts open files through /proc")
def test_health_closes_the_connections_it_opens(tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    home = tmp_path / "home"
    home.mkdir()
    for name in [k for k in os.environ if k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL", "PICOBOT_"))]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PICOBOT_HOME", str(home))
    monkeypatch.setenv("REDIS_URL", redis_url)
    monkeypatch.chdir(tmp_path)
    observer = redis.Redis.from_url(redis_url, decode_responses=True)
    gc.disable()  # what is closed must be closed by the command, not by a collector that happens to run
    try:
        before = _redis_clients(observer)
        assert _open_files_under(home) == []
        for _ in range(3):  # a leak would grow with every run
            assert main(["health", "--json"]) == 1  # no worker, no beat, no provider: degraded
            report = json.loads(capsys.readouterr().out)
            assert report["checks"]["redis"]["ok"] and report["checks"]["database"]["ok"]
        _back_to(observer, before)
        assert _open_files_under(home) == [], "the database was left open"
    finally:
        gc.enable()
        observer.close()


def test_closing_a_runtime_closes_its_redis_connections(tmp_path: Path, redis_url: str) -> None:
    from picobot.config import Config
    from picobot.runtime.health import check_health
    from picobot.app import build_runtime

    class NoQueue:
        def enqueue_turn(self, session_id: str) -> None:
            raise AssertionError("a health check enqueues nothing")

    observer = redis.Redis.from_url(redis_url, decode_responses=True)
    try:
        before = _redis_clients(observer)
        rt = build_runtime(Config(home=tmp_path / "home", redis_url=redis_url), NoQueue())
        assert check_health(rt)["checks"]["redis"]["ok"]
        assert _redis_clients(observer) > before
        rt.close()
        # counted while `rt` is still referenced: closed by close(), not by the client being dropped
        _back_to(observer, before)
    finally:
        observer.close()
