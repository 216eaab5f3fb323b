"""Start-up: CPU a process spends from its start until it is idle and ready, per `picobot web|worker|beat`,
and what `picobot feishu` spends importing lark-oapi.

Baselines in the same run: the same process started by its framework's own command line (the Procfile's
`python -m gunicorn ... web.app:create_app()` and `python -m celery -A worker.app worker|beat ...`; PicoBot
runs the same Celery commands through `worker/celery_cli.py`, without the plugins `celery` imports), and a
full `import lark_oapi` (what `picobot feishu` imported before it loaded the ws client alone). Runs alternate (CLI, baseline, CLI, ...); the medians are printed.

A process is idle when its tree used under 3 % of a core over the last second; the test suite starts a few
hundred of these processes, so their start-up is most of its CPU.
"""

from __future__ import annotations

import argparse
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from scripts.bench.common import ROOT, Result, cpu_seconds, log, main, process_tree
from tests.stack import Stack

NAME = "startup"


def add_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--rounds", type=int, default=3, help="starts of each command line (default 3)")


def cpu_until_idle(proc: subprocess.Popen, timeout: float = 60) -> float:
    """CPU seconds of proc's tree when it first stays under 3 % of a core for a second."""
    deadline = time.monotonic() + timeout
    last = cpu_seconds(process_tree(proc.pid))
    while time.monotonic() < deadline:
        time.sleep(1.0)
        now = cpu_seconds(process_tree(proc.pid))
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        if now - last < 0.03 and now > 0.2:
            return now
        last = now
    raise RuntimeError(f"{proc.args} did not settle within {timeout} s")


def stop(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def python_cpu(code: str) -> float:
    """CPU seconds (user + system) of `python -c code`."""
    before = os.times()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)
    after = os.times()
    return (after.children_user - before.children_user) + (after.children_system - before.children_system)


def _as_celery(argv: list[str]) -> list[str]:
    """The same worker or beat line run by `python -m celery`."""
    assert argv[1] == "-m"
    return [argv[0], "-m", "celery", *argv[3:]]


def run(args: argparse.Namespace) -> Result:
    from picobot.cli.processes import beat_argv, web_argv, worker_argv
    from picobot.config.loader import load_config
    from scripts.bench.common import FakeLLMProcess

    result = Result(NAME)
    llm = FakeLLMProcess()
    tmp = Path(tempfile.mkdtemp(prefix="picobot-bench-startup-"))
    stack = Stack(tmp, llm.url)
    config = load_config(environ=stack.env)
    lines = {
        "web": (["web", "--bind", f"127.0.0.1:{stack.port}"], web_argv(config, bind=f"127.0.0.1:{stack.port}")),
        # the framework's own command line: `python -m celery` (PicoBot runs the same commands through
        # worker/celery_cli.py, without the plugins Celery's umbrella command imports)
        "worker": (["worker", "-c", "50"], _as_celery(worker_argv(concurrency=50))),
        "beat": (["beat"], _as_celery(beat_argv())),
    }
    try:
        for role, (cli, direct) in lines.items():
            ours, theirs = [], []
            for i in range(args.rounds):
                for kind, samples in (("cli", ours), ("direct", theirs)):
                    if kind == "cli":
                        proc = stack._spawn(f"{role}-{i}", cli)
                    else:
                        proc = subprocess.Popen(direct, env=stack.env, cwd=tmp, stdout=subprocess.DEVNULL,
                                                stderr=subprocess.STDOUT, start_new_session=True)
                    try:
                        samples.append(cpu_until_idle(proc))
                    finally:
                        stack.procs.pop(f"{role}-{i}", None)
                        stop(proc)
                log(f"{role} round {i + 1}: picobot {role} {ours[-1]:.2f} s, framework's own {theirs[-1]:.2f} s")
            mine, base = statistics.median(ours), statistics.median(theirs)
            result.add(f"`picobot {role}` CPU to idle", mine * 1000, "ms",
                       baseline=f"{' '.join(direct[1:3])} alone {base * 1000:.0f} ms", ratio=f"{mine / base:.2f}x")
        full = statistics.median(python_cpu("import lark_oapi") for _ in range(args.rounds))
        ws = statistics.median(python_cpu("from picobot.channels.feishu.ws_sdk import load_sdk; load_sdk()")
                               for _ in range(args.rounds))
        result.add("`picobot feishu`: loading the ws client", ws * 1000, "ms",
                   baseline=f"import lark_oapi {full * 1000:.0f} ms", ratio=f"{ws / full:.2f}x")
    finally:
        stack.stop()
        llm.stop()
    return result


if __name__ == "__main__":
    sys.exit(main(NAME, run, add_args, __doc__))
