"""Names of PicoBot's Celery tasks and queues: stable strings that operators and Flower read.

They live in the core, free of Celery, so the Celery app and its routes, the task-queue seam,
the task functions and the `picobot` command all read them from one place.
"""

from __future__ import annotations

TURN_TASK = "picobot.turn"
SWEEP_TASK = "picobot.sweep"
COMPACT_TASK = "picobot.compact"  # context compaction of one session, on the maintenance queue
SUBAGENT_TASK = "picobot.subagent"  # one background sub-agent run, on the subagents queue
JOB_FIRE_TASK = "picobot.scheduler.fire"  # one due time of one scheduled job, on the scheduled queue
JOB_FIRE_BATCH_TASK = "picobot.scheduler.fire_batch"  # due times of many jobs at once (beat's burst path), on scheduled
JOB_SYNC_TASK = "picobot.scheduler.sync"  # rebuild/repair the redbeat job entries from SQL, every 30 s
DELIVER_TASK = "picobot.deliver"  # deliver one (channel, chat) lane of the outbox, on the outbound queue
CHANNEL_EVENT_TASK = "picobot.channel_event"  # process one recorded platform event, on the outbound queue
HOOK_CALLBACK_TASK = "picobot.hook_callback"  # one attempt at an inbound webhook run's result callback, on outbound
MEMORY_MAINTENANCE_TASK = "picobot.memory_maintenance"  # tidy the user scopes' memories, on the maintenance queue
# The beat entry that runs it every 4 hours (the seed's job id; a plain beat entry, not a scheduler job).
MEMORY_MAINTENANCE_JOB = "builtin.memory_maintenance_daily"
MEMORY_MAINTENANCE_CRON = "0 */4 * * *"

QUEUE_TURNS = "turns"
QUEUE_MAINTENANCE = "maintenance"  # sweeps, context compaction, memory maintenance
QUEUE_SUBAGENTS = "subagents"  # background sub-agent runs: long, so kept off the turns queue
QUEUE_SCHEDULED = "scheduled"  # scheduled jobs: their fires, syncs and agent turns (never the turns queue's slots)
QUEUE_OUTBOUND = "outbound"  # channel traffic: deliveries to platforms and their inbound events (short, I/O)
ALL_QUEUES = (QUEUE_TURNS, QUEUE_MAINTENANCE, QUEUE_SUBAGENTS, QUEUE_SCHEDULED, QUEUE_OUTBOUND)
WORKER_QUEUES = ",".join(ALL_QUEUES)  # `celery worker -Q` for a worker that takes every kind of work
