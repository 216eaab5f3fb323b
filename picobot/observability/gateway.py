"""The gateway's /metrics: its own samples, each live worker's (from Redis), and scrape-time gauges.

A custom prometheus_client Collector on a registry of its own. Families of the same name from
several processes are merged into one, each sample labelled with the `process` and `host` it
came from, as the text format wants one family per name.
"""

from __future__ import annotations

import socket
from typing import Any, Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import Metric
from prometheus_client.registry import Collector

from picobot.observability import publish, scrape
from picobot.observability.metrics import Metrics


class GatewayCollector(Collector):
    def __init__(self, own: Metrics, ports: Any, interval: float, sockets: Callable[[], int] | None,
                 process: str) -> None:
        self.own, self.ports, self.interval, self.sockets = own, ports, interval, sockets
        self.process, self.host = process, socket.gethostname()

    def collect(self) -> Iterator[Metric]:
        families: dict[str, Metric] = {}
        merge(families, publish.snapshot(self.own.registry), self.process, self.host)
        errors: dict[str, int] = {}
        workers = scrape.guarded("workers", lambda: [publish.read_all(self.ports.redis, self.interval)], errors)
        for samples in workers[0] if workers else ():
            merge(families, samples.families, samples.process, samples.host)
        yield from families.values()
        yield scrape.gauge("picobot_metrics_processes", "Worker processes whose samples this scrape includes",
                           len(workers[0]) if workers else 0)
        yield from scrape.guarded("queues", lambda: scrape.queue_depths(self.ports), errors)
        yield from scrape.guarded("deliveries", lambda: scrape.deliveries(self.ports.db), errors)
        yield from scrape.guarded("scheduler", lambda: scrape.scheduler_lag(self.ports.db), errors)
        if self.sockets is not None:
            yield scrape.gauge("picobot_websockets_open", "WebSocket connections open on this gateway",
                               self.sockets())
        failed = Metric("picobot_scrape_errors", "1 for each part this scrape could not read", "gauge")
        for part, bad in sorted(errors.items()):
            failed.add_sample("picobot_scrape_errors", {"part": part}, bad)
        yield failed


def merge(families: dict[str, Metric], found: Iterable[dict[str, Any]], process: str, host: str) -> None:
    """Add published families to `families`, every sample labelled with its process and host."""
    for f in found:
        family = families.get(f["name"])
        if family is None:
            family = families[f["name"]] = Metric(f["name"], str(f.get("help", "")), f["type"])
        elif family.type != f["type"]:
            continue  # a process of another version names it differently: keep the first
        for sample in f["samples"]:
            if _sample_ok(sample):
                name, labels, value = sample
                family.add_sample(name, {**{str(k): str(v) for k, v in labels.items()}, "process": process,
                                         "host": host}, float(value))


def _sample_ok(sample: Any) -> bool:
    return (isinstance(sample, list) and len(sample) == 3 and isinstance(sample[0], str)
            and isinstance(sample[1], dict) and isinstance(sample[2], (int, float)) and not isinstance(sample[2], bool))


def exposition(collector: GatewayCollector) -> bytes:
    """The Prometheus text format of one scrape."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return generate_latest(registry)
