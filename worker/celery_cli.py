"""`celery worker` and `celery beat` without the rest of Celery's command line.

`python -m celery` loads every installed `celery.commands` plugin as it is imported, before it parses
anything (click-plugins loads them eagerly). Flower is installed for the Flower page, so every worker and
beat process imported Flower, tornado and their dependencies: ~300 modules, ~14 MB of memory and ~0.12 s
of CPU at each start, none of it used. This runs Celery's own `worker` and `beat` commands
(`celery.bin.worker`, `celery.bin.beat`) with the context Celery's umbrella command gives them, from the
same arguments:

    python -m worker.celery_cli -A worker.app worker -P threads -c 200 ...
    python -m worker.celery_cli -A worker.app beat -S worker.beat.PicoBeatScheduler ...

Any other command line (another global option, `flower`, `inspect`, ...) goes to `celery` itself.
`picobot worker`, `picobot beat` and `picobot up` start their processes through this module.
"""

from __future__ import annotations

import os
import sys

COMMANDS = ("worker", "beat")
_TRUE = ("1", "true", "t", "yes", "y", "on")  # what click reads as a set flag from an environment variable


def split(args: list[str]) -> tuple[str, str, list[str]] | None:
    """(app, command, the command's arguments) for `-A APP worker|beat ...`; None for any other line."""
    app: str | None = None
    i = 0
    while i < len(args):
        arg = args[i]
        if arg in ("-A", "--app") and i + 1 < len(args):
            app, i = args[i + 1], i + 2
        elif arg.startswith("--app="):
            app, i = arg.split("=", 1)[1], i + 1
        else:
            break
    if app and i < len(args) and args[i] in COMMANDS:
        return app, args[i], args[i + 1:]
    return None


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    parts = split(args)
    if parts is None:
        return _celery(args)
    app_name, name, rest = parts
    import celery

    celery.maybe_patch_concurrency(["celery", *args])  # an eventlet or gevent pool patches before other imports
    from celery.app.utils import find_app
    from celery.bin.base import CLIContext

    from picobot.errors import ConfigError

    try:
        app = find_app(app_name)  # worker.app loads and checks the configuration as it is imported
    except ConfigError as exc:  # one line and exit 2, as `picobot worker` says it, not a traceback
        print(f"picobot: {exc}", file=sys.stderr)
        return 2
    if app.user_options.get("preload"):  # options of the umbrella command itself: only it parses them
        return _celery(args)
    if name == "worker":
        from celery.bin.worker import worker as command
    else:
        from celery.bin.beat import beat as command
    command.params.extend(app.user_options.get(name, []))  # as the umbrella command adds them
    no_color = os.environ.get("NO_COLOR", "").strip().lower() in _TRUE
    obj = CLIContext(app=app, no_color=no_color, workdir=None, quiet=False)
    # the environment variables Celery reads for this command's options (CELERY_WORKER_CONCURRENCY, ...): the
    # umbrella runs with the prefix CELERY, and click adds the command's name for a subcommand
    command.main(args=rest, prog_name=f"celery {name}", obj=obj, auto_envvar_prefix=f"CELERY_{name.upper()}")
    return 0  # not reached: click exits with the command's code


def _celery(args: list[str]) -> int:
    from celery.__main__ import main as celery_main

    sys.argv = ["celery", *args]
    celery_main()
    return 0  # not reached: celery exits


if __name__ == "__main__":
    raise SystemExit(main())
