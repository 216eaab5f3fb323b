"""The package's own tests: its folder on sys.path (run from the PicoBot checkout's venv, where
`picobot.plugins` is importable), a real Redis for the relay, and a stand-in for the SDK's ports."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path
from typing import Any, Iterator

import pytest

PACKAGE = Path(__file__).resolve().parent.parent
for folder in (PACKAGE, PACKAGE / "tests"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

from qq_fakes import Ports  # noqa: E402


@pytest.fixture
def redis_client() -> Iterator[Any]:
    import redis

    r = redis.Redis(host="127.0.0.1", port=6379, decode_responses=True)
    try:
        r.ping()
    except redis.ConnectionError:
        pytest.skip("no Redis at 127.0.0.1:6379")
    yield r
    r.close()


@pytest.fixture
def channel_key(redis_client: Any) -> Iterator[str]:
    key = "t" + uuid.uuid4().hex[:10]
    yield key
    for found in redis_client.scan_iter(match=f"qq:{key}:*"):
        redis_client.delete(found)


@pytest.fixture
def ports(redis_client: Any, channel_key: str, tmp_path: Path) -> Ports:
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    channels = {channel_key: {"type": "qq", "enabled": True, "ws_url": "ws://127.0.0.1:1", "access_token": "tok",
                              "allow_from": ["20002", "20003"]}}
    return Ports(redis_client, channels, tmp_path / "home", workspace)
