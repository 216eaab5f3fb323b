"""The process-wide Celery app: `celery -A worker.app worker|beat|flower`."""

import logging
from pathlib import Path

from picobot.config import apply_dotenv, load_config, picobot_home
from picobot.logs.setup import setup_logging
from worker.celery_app import make_celery

# Celery's two INFO lines per task ("Task … received", "… succeeded in"): two records per turn through the
# redacting filter and the handlers, ~3 % of a worker's CPU per turn (docs/BENCHMARKS.md). Shown at
# PICOBOT_LOG_LEVEL=DEBUG; a task's failure is logged at ERROR either way.
TASK_LINE_LOGGERS = ("celery.worker.strategy", "celery.app.trace")

apply_dotenv(picobot_home(), Path.cwd())
app = make_celery(load_config())
setup_logging(app.picobot_config)
if logging.getLogger().getEffectiveLevel() > logging.DEBUG:
    for _name in TASK_LINE_LOGGERS:
        logging.getLogger(_name).setLevel(logging.WARNING)
