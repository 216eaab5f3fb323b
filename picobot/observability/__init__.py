"""Metrics, traces and JSON logs: a capability on the plugin SDK, like channels or memory.

    plugin.py       the plugins the composition root registers: MetricsPlugin, TracingPlugin
    metrics.py      the process's own Prometheus registry and what each hook records in it
    publish.py      a worker's samples to Redis (with its heartbeat) and back, for the gateway
    gateway.py      the gateway's /metrics collector: its own samples, each live worker's, scrape-time gauges
    scrape.py       the gauges read at scrape time: queue depths, deliveries, scheduler lag
    tracing.py      OpenTelemetry set-up (optional: the `picobot[otel]` extra) and the span helpers
    file_export.py  a span exporter writing one JSON span a line (tests, demos)
    propagation.py  W3C trace context in task headers, for the task system's edge (worker/tracing.py)
    logs.py         the JSON log formatter and the trace-id log filter

The core (runtime/, agent/, gateway/) never imports this package: it calls the observation hooks
(picobot/plugins/hookspecs.py), and calls them only when a plugin implements them.
"""
