"""Workers yield the CPU to the web process: PICOBOT_WORKER_NICE (default 10) on every thread of a worker,
however it was started, and the worker settings of the environment checked with a clear error."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import FakeLLM
from tests.stack import Stack, wait_for


def _thread_niceness(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            found.append(int((task / "stat").read_text().rsplit(")", 1)[1].split()[16]))
        except (OSError, ValueError, IndexError):  # a thread that ended meanwhile
            pass
    return found


def _autogroup_nice(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split()[-1])
    except (OSError, ValueError, IndexError):
        return None


def test_a_worker_runs_every_thread_at_the_configured_niceness(tmp_path: Path, fake_llm: FakeLLM) -> None:
    stack = Stack(tmp_path, fake_llm.url)
    try:
        # unset: the product's default, as the Procfile and docker compose start a worker (no `picobot up`)
        default = stack.start_worker("wd", concurrency=4, env={"PICOBOT_WORKER_NICE": ""}, wait=False)
        chosen = stack.start_worker("w3", concurrency=4, nice=3, wait=False)
        off = stack.start_worker("w0", concurrency=4, nice=0, wait=False)
        # no web here to ask /health: each worker says it is ready in its log
        wait_for(lambda: all("ready." in (stack.logs / f"{n}.log").read_text(errors="replace")
                             for n in ("wd", "w3", "w0")), 60, "workers did not start")
        for proc, expected in ((default, 10), (chosen, 3), (off, 0)):
            threads = _thread_niceness(proc.pid)
            assert len(threads) >= 2 and set(threads) == {expected}, (expected, threads)
            group = _autogroup_nice(proc.pid)  # each leads a session of its own: its scheduling group follows
            assert group is None or group == expected, (expected, group)
        assert os.getpriority(os.PRIO_PROCESS, 0) == 0  # nothing of it reached the test process
    finally:
        stack.stop()


@pytest.mark.parametrize("name,value", [("PICOBOT_TASK_EVENTS", "maybe"), ("PICOBOT_TASK_EVENTS", "2"),
                                        ("PICOBOT_WORKER_NICE", "20"), ("PICOBOT_WORKER_NICE", "-5"),
                                        ("PICOBOT_WORKER_NICE", "ten"), ("PICOBOT_WORKER_CONCURRENCY", "abc"),
                                        ("PICOBOT_WORKER_CONCURRENCY", "0")])
def test_bad_worker_settings_stop_the_worker_with_the_variable_named(tmp_path: Path, name: str, value: str) -> None:
    home = tmp_path / "home"
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(home), REDIS_URL="redis://127.0.0.1:1/0", **{name: value})
    for argv in (["worker"], ["up", "--embedded-redis"]):
        r = subprocess.run([sys.executable, "-m", "picobot", *argv], env=env, cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 2, (argv, r.stdout[-500:], r.stderr[-2000:])
        assert name in r.stderr and "Traceback" not in r.stderr, r.stderr


def test_task_events_words() -> None:
    from picobot.cli.processes import task_events, worker_environment_problem

    for word in ("1", "true", "YES", " on "):
        assert task_events({"PICOBOT_TASK_EVENTS": word}) is True
    for word in ("", "0", "false", "No", "off"):
        assert task_events({"PICOBOT_TASK_EVENTS": word}) is False
    assert task_events({}) is False
    for bad in ("maybe", "nan", "2", "-1", "\udc80", "x" * 10_000, "t\x00rue"):
        with pytest.raises(ValueError, match="PICOBOT_TASK_EVENTS") as caught:
            task_events({"PICOBOT_TASK_EVENTS": bad})
        str(caught.value).encode("utf-8")  # the message stays printable: no lone surrogate in it
        assert len(str(caught.value)) < 200
    assert worker_environment_problem({}) is None
    assert "PICOBOT_WORKER_NICE" in (worker_environment_problem({"PICOBOT_WORKER_NICE": "99"}) or "")


def test_worker_threads_come_from_the_flag_or_the_environment() -> None:
    from picobot.cli.processes import concurrency_argument, worker_argv, worker_concurrency

    assert worker_concurrency({}) == 200 and worker_concurrency({"PICOBOT_WORKER_CONCURRENCY": " 64 "}) == 64
    for bad in ("0", "-4", "abc", "2001", "1e3", "\u00b2", "\udc80", "9" * 5000, "nan"):
        with pytest.raises(ValueError, match="PICOBOT_WORKER_CONCURRENCY"):
            worker_concurrency({"PICOBOT_WORKER_CONCURRENCY": bad})
        with pytest.raises(argparse.ArgumentTypeError, match="whole number"):
            concurrency_argument(bad)
    assert concurrency_argument("8") == 8
    argv = worker_argv(concurrency=12)
    assert argv[argv.index("-c") + 1] == "12"


@pytest.mark.parametrize("argv", [["worker", "-c", "0"], ["worker", "-c", "lots"], ["jobs", "list"], ["--help"]])
def test_a_bad_thread_count_is_one_line_and_other_commands_still_run(tmp_path: Path, argv: list[str]) -> None:
    """-c is checked by its parser; a bad $PICOBOT_WORKER_CONCURRENCY concerns workers only (it used to crash every
    command while the parser was built)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "ANTHROPIC_", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(tmp_path / "home"), REDIS_URL="redis://127.0.0.1:1/0", PICOBOT_WORKER_CONCURRENCY="x")
    (tmp_path / "home").mkdir()
    r = subprocess.run([sys.executable, "-m", "picobot", *argv], env=env, cwd=tmp_path, capture_output=True, text=True,
                       timeout=60)
    assert "Traceback" not in r.stderr, r.stderr
    if argv[0] == "worker":
        assert r.returncode == 2 and "-c" in r.stderr and "whole number" in r.stderr, r.stderr
    else:
        assert "PICOBOT_WORKER_CONCURRENCY" not in r.stderr, r.stderr


def test_a_worker_that_does_not_lead_its_session_leaves_the_sessions_group_alone(tmp_path: Path) -> None:
    """Started in the web's own shell session (no session of its own), a worker must not lower the
    scheduling group it shares with the web: only its own threads get the niceness."""
    probe = ("import os, sys; from picobot.cli.processes import run_at_least_at; run_at_least_at(7); "
             "print(os.getpriority(os.PRIO_PROCESS, 0), os.getsid(0) == os.getpid())")

    def group_of_this_session() -> int | None:
        return _autogroup_nice(os.getpid())

    before = group_of_this_session()
    r = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["7", "False"]
    assert group_of_this_session() == before
    # in a session of its own, its group follows
    r = subprocess.run([sys.executable, "-c", probe + "; print(open('/proc/self/autogroup').read().split()[-1])"
                        if Path("/proc/self/autogroup").exists() else probe],
                       capture_output=True, text=True, timeout=60, cwd=tmp_path, start_new_session=True,
                       env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert r.returncode == 0, r.stderr
    assert r.stdout.split()[:2] == ["7", "True"]
    if Path("/proc/self/autogroup").exists():
        assert r.stdout.split()[2] == "7"
