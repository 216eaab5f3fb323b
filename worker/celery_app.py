"""The Celery app factory and its settings (the process-wide instance lives in worker/app.py)."""

from __future__ import annotations

import logging
import threading
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable

from celery import Celery, signals

from picobot.cli.processes import run_at_least_at, task_events, worker_nice
from picobot.config import Config
from picobot.config.home import DIRECT_REDIS_SCHEMES, REDIS_SCHEMES, url_scheme
from picobot.config.schema import MAX_TICK_SECS
from picobot.runtime.redis_url import resolve_broker_url, resolve_redis_url
from picobot.app import App as Runtime, build_plugins, build_runtime
from picobot.runtime.task_names import (
    QUEUE_MAINTENANCE, QUEUE_TURNS, SWEEP_TASK, TURN_TASK,
)
from worker import tasks
from worker.queue import CeleryTaskQueue

if TYPE_CHECKING:
    from picobot.plugins import PluginHost

log = logging.getLogger("picobot.worker")



class PicoCelery(Celery):
    """Celery app that owns one PicoBot Runtime per process, built on first use."""

    picobot_config: Config
    events_cls = "worker.task_events:Events"  # task events less task-started (worker/task_events.py)

    def __init__(self, config: Config):
        super().__init__("picobot")
        self.picobot_config = config
        self._runtime: Runtime | None = None
        self._runtime_lock = threading.Lock()
        self.turn_slots = 0  # the worker's concurrency when it takes turns (its host's load, placement)

    @property
    def runtime(self) -> Runtime:
        with self._runtime_lock:
            if self._runtime is None:
                self._runtime = build_runtime(self.picobot_config, CeleryTaskQueue(self), plugins=self.plugins)
            return self._runtime

    @cached_property
    def plugins(self) -> PluginHost:
        """The process's plugin host: built once, for the plugins' tasks and then the runtime."""
        return build_plugins(self.picobot_config)


def make_celery(config: Config) -> PicoCelery:
    app = PicoCelery(config)
    url = resolve_redis_url(config)
    broker = resolve_broker_url(config)  # CELERY_BROKER_URL (RabbitMQ) or the same Redis
    sweep_every = config.gateway.sweep_interval_secs
    app.conf.update(
        broker_url=broker,
        # kombu's Redis transport minus a client per publish (other schemes, e.g. sentinel:// or amqp://, keep kombu's)
        broker_transport="worker.broker:Transport" if url_scheme(broker) in DIRECT_REDIS_SCHEMES else None,
        broker_connection_retry_on_startup=True,
        broker_transport_options=_transport_options(broker),
        task_ignore_result=True,
        task_acks_late=False,  # recovery is the sweeper's job, from SQL, not the broker's
        task_default_queue=QUEUE_TURNS,
        # the kernel's tasks; a capability's or plugin's task is sent to its queue by name (worker/queue.py)
        task_routes={TURN_TASK: {"queue": QUEUE_TURNS}, SWEEP_TASK: {"queue": QUEUE_MAINTENANCE}},
        task_serializer="json", accept_content=["json"],
        worker_prefetch_multiplier=1,
        # task events on demand: Flower (or `celery control enable_events`) switches them on, and a turn
        # without a monitor spends no publishes on them; PICOBOT_TASK_EVENTS=1 sends them from the start
        worker_send_task_events=task_events(),
        task_send_sent_event=False,  # one broker publish per turn, not two; Flower still sees every task
        worker_hijack_root_logger=False,
        worker_redirect_stdouts=False,
        beat_scheduler="worker.beat.PicoBeatScheduler",
        redbeat_redis_url=url,
        redbeat_redis_options={},  # said explicitly: redbeat no longer borrows broker_transport_options
        # renewed every tick (at most MAX_TICK_SECS apart; the config checks it spans three)
        redbeat_lock_timeout=config.scheduler.beat_lock_secs,
        # a job fires within one tick of its due time (scheduler.tick_resolution_ms)
        beat_max_loop_interval=min(max(1, min(MAX_TICK_SECS, int(sweep_every))), config.scheduler.tick_resolution_ms / 1000),
        beat_schedule={
            SWEEP_TASK: {"task": SWEEP_TASK, "schedule": sweep_every, "options": {"queue": QUEUE_MAINTENANCE, "expires": sweep_every * 3}},
        },
        timezone=config.time.timezone,
    )
    tasks.register(app, lambda: app.runtime)
    # the plugins' own tasks, in worker processes only (a web or a CLI only sends them, by name)
    signals.worker_init.connect(lambda sender=None, **_kw: getattr(sender, "app", None) is app and
                                tasks.register_plugin_tasks(app, lambda: app.runtime), sender=None, weak=False)
    if config.tracing.enabled:  # carry the W3C trace context in task headers (worker/tracing.py)
        from worker.tracing import connect as connect_tracing

        connect_tracing(config)
    signals.celeryd_after_setup.connect(_take_host_queue, sender=None, weak=False)
    signals.worker_ready.connect(_on_worker_ready, sender=None, weak=False)
    # PICOBOT_WORKER_NICE (default 10): a worker yields the CPU to the web process on shared cores, however it
    # was started (`picobot up`, the Procfile, docker compose); a bad value fails here, with the variable named
    niceness = worker_nice()
    signals.worker_init.connect(lambda sender=None, **_kw: run_at_least_at(niceness), sender=None, weak=False)
    signals.beat_init.connect(_settle_heap, sender=None, weak=False)  # beat's schedule is set up by then
    return app


def _transport_options(url: str) -> dict:
    if url_scheme(url) not in REDIS_SCHEMES:
        return {}  # RabbitMQ: kombu's defaults (no visibility timeout; every queue consumed at once)
    # replies and platform events before new turns (worker/broker.py)
    return {"visibility_timeout": 3600, "queue_order_strategy": "worker.broker:OutboundFirstCycle"}


def _takes_turns(app: Celery) -> bool:
    """This worker consumes the turns queue and workspaces follow their chat (runtime/placement.py)."""
    from picobot.runtime import placement

    config = getattr(app, "picobot_config", None)
    return (config is not None and placement.enabled(config)
            and QUEUE_TURNS in app.amqp.queues.consume_from)


def _take_host_queue(sender: object = None, instance: object = None, **_kw: object) -> None:
    """A worker that takes turns also takes its host's queue: turns of the chats whose files are here.
    Either way it tells placement whether it serves its host: one that does not never pins a chat to it."""
    from picobot.runtime import placement

    app = getattr(instance, "app", None)
    if not isinstance(app, PicoCelery):
        return
    if _takes_turns(app):
        app.amqp.queues.select_add(placement.host_queue(placement.host_id()))
        app.turn_slots = int(getattr(instance, "concurrency", 0) or 0)
        placement.serve(placement.host_id())
    else:
        placement.serve(None)


def _beat(rt: Runtime, publish_mcp: Callable[..., None], host: str | None = None, slots: int = 0) -> None:
    """Each heartbeat: the host's liveness and this worker's load (placement), the MCP servers' states,
    then the plugins' (the worker's metric samples)."""
    try:
        if host is not None:
            from picobot.runtime import placement

            placement.beat(rt.redis, host, rt.worker_name, len(rt.active_turn_ids()), slots)
        publish_mcp(rt.redis, rt.worker_name, rt.mcp_statuses())
    finally:
        rt.plugins.call("picobot_heartbeat", ports=rt)


def _settle_heap(sender: object = None, **_kw: object) -> None:
    from picobot.heap import settle

    settle()  # the start-up heap out of full collections: no ~100 ms pause of every thread now and then


def _on_worker_ready(sender: Any = None, **_kw: object) -> None:
    from picobot.mcp.status import publish as publish_mcp
    from picobot.runtime.heartbeat import start_heartbeat
    from picobot.runtime.tool_safety import announce

    app = sender.app if sender is not None and isinstance(getattr(sender, "app", None), PicoCelery) else None
    if app is None:
        return
    rt = app.runtime
    rt.worker_name = getattr(sender, "hostname", None) or rt.worker_name
    sandbox = announce(rt.config)
    rt.tools()  # MCP servers start connecting now, in the background
    from picobot.runtime import placement

    host = placement.host_id() if _takes_turns(app) else None
    start_heartbeat(rt.redis, rt.worker_name, rt.active_turn_ids, {"sandbox": sandbox.as_check(), "host": host},
                    on_beat=lambda: _beat(rt, publish_mcp, host, app.turn_slots),
                    live_facts=lambda: {"plugins": rt.plugins.statuses()})
    app.send_task(SWEEP_TASK, queue=QUEUE_MAINTENANCE)  # recover what a previous run left behind
    _settle_heap()
    log.info("worker %s ready", rt.worker_name)


