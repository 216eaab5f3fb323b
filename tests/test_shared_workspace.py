"""`tools.workspace_storage`: two worker hosts that share only that folder (tests/two_hosts.py otherwise
keeps their homes and workspaces apart). A file the agent wrote on one host is read on the other after the
first was killed with kill -9; no chat is pinned and no "files not reachable" note is written. A host where
the folder is missing (its mount failed) never creates it: `picobot worker` refuses to start there, and a
running worker that loses it fails the turn with a message instead of writing to its own disk.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.runtime.turn_runner import SHARED_WORKSPACE_MISSING
from tests.conftest import add_rule
from tests.two_hosts import HOSTS, OTHER, WORKER, TwoHosts

pytestmark = pytest.mark.slow


def _share(hosts: TwoHosts, shared: Path) -> None:
    for home in [*hosts.homes.values(), hosts.home]:
        cfg = json.loads((home / "config.json").read_text())
        cfg["tools"] = {"workspace_storage": str(shared)}
        (home / "config.json").write_text(json.dumps(cfg))


@pytest.fixture(scope="module")
def shared_hosts(tmp_path_factory: pytest.TempPathFactory, fake_llm: Any) -> Iterator[tuple[TwoHosts, Path]]:
    tmp = tmp_path_factory.mktemp("shared-ws")
    shared = tmp / "shared-storage"
    shared.mkdir()
    hosts = TwoHosts(tmp, fake_llm.url)
    _share(hosts, shared)
    try:
        hosts.start_web(wait=False)
        for host in HOSTS:
            hosts.start_host(host, wait=False)
        hosts.start_beat()
        hosts.wait_web(60)
        hosts.wait_workers(*WORKER.values())  # no host beats into the placement set: placement is off
        yield hosts, shared
    finally:
        hosts.stop()


def _tool_results(llm: Any, marker: str) -> list[str]:
    found = []
    for request in llm.requests():
        messages = request["body"].get("messages", [])
        if any(marker in json.dumps(m) for m in messages if m.get("role") == "user"):
            found += [str(m.get("content")) for m in messages if m.get("role") == "tool"]
    return found


def test_a_file_written_on_one_host_is_read_on_the_other_after_a_kill_9(shared_hosts: tuple[TwoHosts, Path],
                                                                       llm: Any) -> None:
    hosts, shared = shared_hosts
    add_rule(llm, "<write it>", {"tool_calls": [{"name": "write", "arguments": {"path": "notes/plan.txt",
                                                                                "content": "kept across hosts"}}]},
             {"content": "written"})
    add_rule(llm, "<read it>", {"tool_calls": [{"name": "read", "arguments": {"path": "notes/plan.txt"}}]},
             {"content": "read back"})
    c = hosts.client("shared-1")
    try:
        assert c.ask("<write it>", timeout=90)["final_text"] == "written"
        [first] = hosts.turns_of(c.session_id)
        writer = next(h for h in HOSTS if first["worker"].startswith(WORKER[h] + "@"))
        assert [p.read_text() for p in shared.rglob("plan.txt")] == ["kept across hosts"]  # in the shared folder
        assert all(not any(hosts.workspace(h).rglob("plan.txt")) for h in HOSTS)  # on no host's own disk
        assert hosts.host_of("shared-1") is None  # placement is off: nothing to pin

        hosts.kill_host(writer)  # kill -9: the next turn can only run on the other host
        done = c.ask("<read it>", timeout=90)
        assert done["status"] == "completed" and done["final_text"] == "read back", done
        second = hosts.turns_of(c.session_id)[-1]
        assert second["worker"].startswith(WORKER[OTHER[writer]] + "@")
        assert any("kept across hosts" in result for result in _tool_results(llm, "<read it>"))
        told = [m for r in llm.requests() for m in r["body"].get("messages", [])
                if m.get("role") == "system" and "not reachable" in str(m.get("content"))]
        assert told == []  # nothing was lost, so the agent is told nothing
    finally:
        c.close()


def test_a_worker_that_lost_the_shared_folder_fails_the_turn_and_creates_nothing(
        shared_hosts: tuple[TwoHosts, Path], llm: Any) -> None:
    hosts, shared = shared_hosts
    add_rule(llm, "<while unmounted>", {"content": "must not be answered"})
    add_rule(llm, "<mounted again>", {"content": "answered again"})
    gone = shared.with_name("shared-storage-unmounted")
    c = hosts.client("shared-2")
    shared.rename(gone)  # as a network mount that went away under the running workers
    try:
        done = c.ask("<while unmounted>", timeout=90)
        assert done["status"] == "failed" and SHARED_WORKSPACE_MISSING in done["error"], done
        assert not shared.exists()  # not created on this host's disk
        assert not any("<while unmounted>" in json.dumps(r["body"].get("messages", [])) for r in llm.requests())
    finally:
        gone.rename(shared)
    try:
        assert c.ask("<mounted again>", timeout=90)["final_text"] == "answered again"
    finally:
        c.close()


def test_picobot_worker_refuses_to_start_without_the_shared_folder(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    missing = tmp_path / "not-mounted" / "picobot"
    (home / "config.json").write_text(json.dumps({"tools": {"workspace_storage": str(missing)}}))
    env = {"PATH": "/usr/bin:/bin", "PICOBOT_HOME": str(home), "REDIS_URL": "redis://127.0.0.1:1/0"}
    for argv in (["worker"], ["up", "--embedded-redis"]):
        r = subprocess.run([sys.executable, "-m", "picobot", *argv], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, (argv, r.stdout[-500:], r.stderr[-2000:])
        assert "tools.workspace_storage" in r.stderr and "not a folder on this host" in r.stderr, r.stderr
        assert "Traceback" not in r.stderr and not missing.exists() and not missing.parent.exists()
    shutil.rmtree(home)
