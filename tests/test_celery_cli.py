"""worker/celery_cli.py: Celery's worker and beat commands without the umbrella command's plugins."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from picobot.cli.processes import beat_argv, worker_argv
from picobot.logstream.process import process_label
from worker.celery_cli import split

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("args, parts", [
    (["-A", "worker.app", "worker", "-c", "4"], ("worker.app", "worker", ["-c", "4"])),
    (["--app", "worker.app", "beat"], ("worker.app", "beat", [])),
    (["--app=worker.app", "worker", "-A", "x"], ("worker.app", "worker", ["-A", "x"])),
    (["-A", "worker.app", "flower", "--port=1"], None),  # Flower is the plugin: celery runs it
    (["-A", "worker.app", "--quiet", "worker"], None),  # a global option only the umbrella knows
    (["worker", "-c", "4"], None),  # no app named: the umbrella reads $APP
    (["-A"], None),
    ([], None),
])
def test_split_takes_only_the_lines_it_runs_as_celery_would(args: list[str], parts: object) -> None:
    assert split(args) == parts


def test_picobot_starts_worker_and_beat_through_it() -> None:
    for argv in (worker_argv(concurrency=4), beat_argv()):
        assert argv[1:5] == ["-m", "worker.celery_cli", "-A", "worker.app"]
        assert split(argv[3:]) is not None


def test_a_worker_through_it_is_still_named_a_worker_in_the_logs() -> None:
    label = process_label([str(ROOT / "worker" / "celery_cli.py"), *worker_argv(name="w2@%h")[3:]], {}, host="h1")
    assert (label.role, label.name) == ("worker", "w2@h1")
    assert process_label([str(ROOT / "worker" / "celery_cli.py"), *beat_argv()[3:]], {}, host="h1").role == "beat"


PROBE = """
import json, sys
sys.argv = ["celery", *json.loads(sys.argv[1])]
try:
    if sys.argv[1:2] == ["umbrella"]:
        sys.argv.pop(1)
        from celery.__main__ import main
        main()
    else:
        from worker.celery_cli import main
        main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "flower": "flower" in sys.modules, "tornado": "tornado" in sys.modules}))
"""


def _probe(args: list[str], tmp_path: Path) -> tuple[dict, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "REDIS_URL", "DATABASE_URL", "PICOBOT_"))}
    env.update(PICOBOT_HOME=str(tmp_path / "home"), REDIS_URL="redis://127.0.0.1:1/0")
    r = subprocess.run([sys.executable, "-c", PROBE, json.dumps(args)], cwd=ROOT, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    *out, last = r.stdout.strip().splitlines()
    return json.loads(last), "\n".join(out)


@pytest.mark.parametrize("command, option", [("worker", "--concurrency"), ("beat", "--scheduler")])
def test_the_command_parses_as_celerys_and_loads_no_flower(command: str, option: str, tmp_path: Path) -> None:
    ours, text = _probe(["-A", "worker.app", command, "--help"], tmp_path)
    assert ours["code"] == 0 and option in text and "Usage: celery " + command in text
    assert not ours["flower"] and not ours["tornado"]
    # what it saves: Celery's own command line imports Flower (its installed plugin) before it parses anything
    theirs, text = _probe(["umbrella", "-A", "worker.app", command, "--help"], tmp_path)
    assert theirs["code"] == 0 and option in text
    assert theirs["flower"] and theirs["tornado"]


def test_a_bad_option_is_refused_with_celerys_usage_error(tmp_path: Path) -> None:
    ours, _ = _probe(["-A", "worker.app", "worker", "--no-such-option"], tmp_path)
    assert ours["code"] == 2  # click's usage error, as `celery worker --no-such-option`


def test_a_bad_config_is_one_line_and_exit_2(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / "config.json").write_text('{"gateway": {"port": "nope"}}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PICOBOT_", "REDIS_URL", "DATABASE_URL"))}
    env.update(PICOBOT_HOME=str(home), REDIS_URL="redis://127.0.0.1:1/0")
    for command in ("worker", "beat"):
        r = subprocess.run([sys.executable, "-m", "worker.celery_cli", "-A", "worker.app", command], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 2, r.stderr[-2000:]
        assert r.stderr.strip().splitlines() == [
            f"picobot: config error at gateway.port: Input should be a valid integer, unable to parse string as an "
            f"integer (in {home / 'config.json'})"]
