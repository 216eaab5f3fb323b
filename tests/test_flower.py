"""Flower sees every task by its stable name (workers send task events)."""

from __future__ import annotations

import httpx
import pytest

from picobot.cli.embedded_redis import free_port
from tests.stack import Stack, wait_for

pytestmark = pytest.mark.slow


def test_flower_lists_turn_tasks_by_name(stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    stack.env["FLOWER_BASIC_AUTH"] = "ops:flower-test-pass"
    stack._spawn("flower", ["flower", "--port", str(port)])
    auth = ("ops", "flower-test-pass")

    def up() -> bool:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/workers", auth=auth, timeout=2).status_code == 200
        except httpx.HTTPError:
            return False

    wait_for(up, 30, "flower did not start")
    wait_for(lambda: httpx.get(f"http://127.0.0.1:{port}/api/workers", auth=auth).json(), 30, "flower sees no worker")
    assert stack.client().ask("flower check")["status"] == "completed"

    def seen() -> set[str]:
        tasks = httpx.get(f"http://127.0.0.1:{port}/api/tasks", auth=auth, timeout=5).json()
        return {t["name"] for t in tasks.values() if t.get("name")}

    names = wait_for(lambda: {"picobot.turn"} <= seen() and seen(), 30, "flower never saw picobot.turn")
    assert "picobot.turn" in names
    assert httpx.get(f"http://127.0.0.1:{port}/api/tasks", timeout=5).status_code == 401  # protected
