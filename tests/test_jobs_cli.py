"""`picobot jobs …` as a subprocess against a real stack: add from a file and from stdin, list (table and
--json), show, pause, resume, run (the worker records the run), rm; bad input exits 2 with one line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.stack import Stack, command_here, wait_for

pytestmark = pytest.mark.slow


def job(job_id: str, **more: Any) -> dict[str, Any]:
    return {"id": job_id, "kind": "outbound_message", "schedule": {"type": "cron", "expression": "15 7 * * 1-5"},
            "payload": {"text": f"from {job_id}"}, **more}


def jobs(stack: Stack, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return stack.cli("jobs", *args, stdin=stdin)


def listed(stack: Stack) -> dict[str, dict[str, Any]]:
    """Every job by id, read by the command's own code in this process (`jobs list --json` as a subprocess is
    checked in test_add_list_show_pause_resume_rm)."""
    r = command_here(stack, "jobs", "list", "--json")
    assert r.returncode == 0, r.stderr
    return {j["id"]: j for j in json.loads(r.stdout)}


def test_add_list_show_pause_resume_rm(stack: Stack, tmp_path: Path) -> None:
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job("cli.one")))
    r = jobs(stack, "add", str(path))
    assert r.returncode == 0 and "cli.one saved" in r.stdout, r.stderr
    r = jobs(stack, "list", "--json")
    assert r.returncode == 0, r.stderr
    one = {j["id"]: j for j in json.loads(r.stdout)}["cli.one"]
    assert one["target"]["channel"] == "cli_chat" and one["target"]["chat_id"].startswith("cli-")  # this terminal's chat
    r = jobs(stack, "add", "-", stdin=json.dumps(job("cli.two", schedule={"type": "interval", "seconds": 600})))
    assert r.returncode == 0, r.stderr

    table = jobs(stack, "list").stdout.splitlines()
    assert table[0].split()[:3] == ["ID", "KIND", "STATE"]
    row = next(line for line in table if line.startswith("cli.one "))
    assert "outbound_message" in row and "active" in row and one["schedule_text"] in row
    assert any(line.startswith("cli.two ") for line in table)

    shown = jobs(stack, "show", "cli.one")
    assert shown.returncode == 0 and one["schedule_text"] in shown.stdout and "none yet" in shown.stdout
    assert jobs(stack, "pause", "cli.one").returncode == 0
    assert listed(stack)["cli.one"]["state"] == "paused"
    assert jobs(stack, "resume", "cli.one").returncode == 0
    assert listed(stack)["cli.one"]["state"] == "active"
    for job_id in ("cli.one", "cli.two"):
        r = jobs(stack, "rm", job_id)
        assert r.returncode == 0 and "deleted" in r.stdout
    assert not {"cli.one", "cli.two"} & set(listed(stack))


def test_run_hands_the_job_to_the_workers(stack: Stack) -> None:
    assert jobs(stack, "add", "-", stdin=json.dumps(job("cli.run"))).returncode == 0
    r = jobs(stack, "run", "cli.run")
    assert r.returncode == 0 and "queued" in r.stdout, r.stderr

    def done() -> list[dict[str, Any]]:
        out = command_here(stack, "jobs", "show", "cli.run", "--json")
        return [x for x in json.loads(out.stdout)["runs"] if x["outcome"] != "running"]

    [run] = wait_for(done, 60, "the run never finished")
    assert run["outcome"] == "ok", run
    assert jobs(stack, "rm", "cli.run").returncode == 0


def test_bad_input_exits_2_with_one_line_and_changes_nothing(stack: Stack, tmp_path: Path) -> None:
    before = set(listed(stack))
    (tmp_path / "array.json").write_text("[1]")
    (tmp_path / "broken.json").write_text("{")
    (tmp_path / "cron.json").write_text(json.dumps(job("cli.bad", schedule={"type": "cron", "expression": "* * *"})))
    cases = [
        (("add", str(tmp_path / "missing.json")), None, "cannot read"),
        (("add", str(tmp_path / "array.json")), None, "one JSON object"),
        (("add", str(tmp_path / "broken.json")), None, "not valid UTF-8 JSON"),
        (("add", str(tmp_path / "cron.json")), None, "schedule.expression"),
        (("add", "-"), '{"id": "cli.tz", "kind": "outbound_message", "timezone": "Nowhere/Land", '
                       '"schedule": {"type": "delay", "seconds": 60}, "payload": {"text": "x"}}', "timezone"),
        (("show", "cli.ghost"), None, "cli.ghost"),
        (("pause", "cli.ghost"), None, "cli.ghost"),
        (("rm", "cli.ghost"), None, "cli.ghost"),
        (("run", "cli.ghost"), None, "cli.ghost"),
    ]
    # as a subprocess: a file error (before the runtime), an unknown job (the runtime) and `run` (which continues
    # as `python -m worker.commands`); the rest through the command's own code in this process (command_here)
    in_process = {("add", str(tmp_path / "array.json")), ("add", str(tmp_path / "broken.json")),
                  ("add", str(tmp_path / "cron.json")), ("add", "-"), ("pause", "cli.ghost"), ("rm", "cli.ghost")}
    for args, stdin, expected in cases:
        r = (command_here(stack, "jobs", *args, stdin=stdin) if args in in_process else jobs(stack, *args, stdin=stdin))
        assert r.returncode == 2, (args, r.returncode, r.stderr)
        lines = r.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (args, r.stderr)
        assert r.stdout == ""
    assert jobs(stack, "frobnicate").returncode == 2  # argparse's own usage error
    assert set(listed(stack)) == before


def test_beat_schedules_the_entries_the_capabilities_register(stack: Stack) -> None:
    """The scheduler's sync comes through `picobot_beat` (the scheduler plugin), added as beat starts; the
    kernel's sweep beside it. Both are redbeat entries in Redis once beat runs."""
    r = stack.redis()
    try:
        wait_for(lambda: r.exists("redbeat:picobot.scheduler.sync") and r.exists("redbeat:picobot.sweep"), 60,
                 "beat's entries for the scheduler's sync and the sweep")
    finally:
        r.close()
