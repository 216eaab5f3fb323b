"""The process-wide Celery app: `celery -A worker.app worker|beat|flower`."""

from pathlib import Path

from picobot.config import apply_dotenv, load_config, picobot_home
from picobot.logging_setup import setup_logging
from worker.celery_app import make_celery

apply_dotenv(picobot_home(), Path.cwd())
app = make_celery(load_config())
setup_logging(app.picobot_config)
