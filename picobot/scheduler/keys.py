"""The scheduler capability's Redis keys."""

RUN_PREFIX = "picobot:scheduler:run:"  # + run id -> the worker running a non-agent run (liveness)
