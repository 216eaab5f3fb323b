"""Names of PicoBot's Celery tasks and queues: stable strings that operators and Flower read.

They live in the core, free of Celery, so the Celery app and its routes, the task-queue seam,
the task functions and the `picobot` command all read them from one place.
"""

from __future__ import annotations

TURN_TASK = "picobot.turn"
SWEEP_TASK = "picobot.sweep"

QUEUE_TURNS = "turns"
QUEUE_MAINTENANCE = "maintenance"  # sweeps now; compression and memory upkeep later
ALL_QUEUES = (QUEUE_TURNS, QUEUE_MAINTENANCE)
WORKER_QUEUES = ",".join(ALL_QUEUES)  # `celery worker -Q` for a worker that takes every kind of work
