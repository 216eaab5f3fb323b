"""The parts of `picobot run` and `picobot jobs run` that need the task system.

Those commands check their input in picobot/cli, then replace themselves with
`python -m worker.commands …` (as `picobot worker` becomes `celery … worker`), so the core never
imports Celery:

    python -m worker.commands run PLUGIN:PROCESS:INSTANCE   a plugin's long-running process
    python -m worker.commands jobs run JOB_ID               queue a job's fire task now, as beat would

`picobot feishu|telegram|wechat` come here as `run channels:<feishu|telegram|wechat>:<channel key>`: the
platform connections are the built-in channels plugin's processes.
"""

from __future__ import annotations

import argparse
import sys

from typing import TYPE_CHECKING

from picobot.config import Config
from picobot.config.loader import load_config

if TYPE_CHECKING:
    from worker.queue import CeleryTaskQueue


def _queue(config: Config) -> "CeleryTaskQueue":
    from worker.celery_app import make_celery
    from worker.queue import CeleryTaskQueue

    return CeleryTaskQueue(make_celery(config))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m worker.commands")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("run").add_argument("target")
    from picobot.cli.jobs import add_parser as add_jobs_parser

    add_jobs_parser(sub)
    args = parser.parse_args(argv)
    config = load_config()
    if args.command == "run":
        from picobot.cli.plugin_parts import serve as serve_process

        return serve_process(config, args.target, _queue(config))
    from picobot.cli.jobs import run

    return run(config, args, queue=_queue(config))


if __name__ == "__main__":
    sys.exit(main())
