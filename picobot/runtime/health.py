"""Read-only dependency checks shared by GET /health, /health and `picobot health`."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from picobot.coord import keys

if TYPE_CHECKING:
    from picobot.runtime.services import Runtime

REDBEAT_LOCK_KEY = "redbeat::lock"


def _check(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    try:
        return fn()
    except Exception as exc:  # a failing dependency is a result here, not an error
        return {"ok": False, "detail": f"{type(exc).__name__}: {exc}"[:300]}


def check_health(rt: "Runtime") -> dict[str, Any]:
    checks = {
        "database": _check(lambda: _database(rt)),
        "redis": _check(lambda: _redis(rt)),
        "workers": _check(lambda: _workers(rt)),
        "beat": _check(lambda: _beat(rt)),
        "provider": _check(lambda: _provider(rt)),
        "provider_breakers": _check(lambda: _breakers(rt)),
        "sandbox": _check(lambda: _sandbox(rt)),
        "deliveries": _check(lambda: _deliveries(rt)),
    }
    for entries in rt.plugins.call("picobot_health", ports=rt):  # the capabilities' own (mcp)
        if isinstance(entries, dict):
            checks.update({str(k): v for k, v in entries.items() if isinstance(v, dict) and "ok" in v})
    checks["plugins"] = _check(lambda: _plugins(rt))
    processes = _check(lambda: _processes(rt) or {})
    if processes:
        checks["processes"] = processes
    ok = all(c["ok"] for c in checks.values())
    return {"status": "ok" if ok else "degraded", "checks": checks, "time": time.time()}


def _deliveries(rt: "Runtime") -> dict[str, Any]:
    """Outbox rows to external channels: pending and failed (failed ones need a look, not a restart)."""
    from picobot.storage import outbox

    with rt.db.connect() as conn:
        totals = outbox.totals(conn)
    return {"ok": True, "pending": totals["pending"], "failed": totals["failed"],
            "detail": f"{totals['pending']} pending, {totals['failed']} failed"}


def _database(rt: "Runtime") -> dict[str, Any]:
    rt.db.ping()
    kind = "sqlite" if rt.db.is_sqlite else rt.db.engine.dialect.name
    return {"ok": True, "detail": kind}


def _redis(rt: "Runtime") -> dict[str, Any]:
    started = time.perf_counter()
    rt.redis.ping()
    return {"ok": True, "detail": f"ping {1000 * (time.perf_counter() - started):.1f} ms"}


def _workers(rt: "Runtime") -> dict[str, Any]:
    names = sorted(k[len(keys.WORKER_PREFIX):] for k in rt.redis.scan_iter(match=keys.WORKER_PREFIX + "*", count=100))
    return {"ok": bool(names), "alive": names,
            "detail": f"{len(names)} alive" if names else "no worker is running (start `picobot worker`)"}


def _beat(rt: "Runtime") -> dict[str, Any]:
    lock = rt.redis.exists(REDBEAT_LOCK_KEY)
    last = rt.redis.get(keys.SWEEP_LAST)
    age = time.time() - float(last) if last else None
    fresh = age is not None and age < 3 * rt.config.gateway.sweep_interval_secs + 10
    detail = f"last sweep {age:.0f} s ago" if age is not None else "no sweep yet"
    return {"ok": bool(lock) or fresh, "detail": detail if (lock or fresh) else f"beat is not running ({detail})"}


def _provider(rt: "Runtime") -> dict[str, Any]:
    if not rt.config.provider_configured():
        return {"ok": False, "configured": False,
                "detail": "no LLM provider configured: set OPENAI_API_KEY/OPENAI_BASE_URL or ANTHROPIC_API_KEY"}
    resolved = rt.config.agent("default")
    return {"ok": True, "configured": True,
            "detail": f"{resolved.provider.type} model {resolved.model.model_id}"}


def _breakers(rt: "Runtime") -> dict[str, Any]:
    """Each provider's circuit breaker (closed / open / probing); an open one is skipped by fallback chains.

    Informational: a provider cooling down does not make the gateway unhealthy, its fallback answers.
    """
    from picobot.runtime.provider_chain import breakers

    b = breakers(rt)
    states = {key: b.state(key) for key in sorted(rt.config.providers)}
    detail = ", ".join(f"{k} {v['state']}" for k, v in states.items()) or "no providers"
    return {"ok": True, "providers": states, "detail": detail}


def _sandbox(rt: "Runtime") -> dict[str, Any]:
    from picobot.runtime.heartbeat import worker_facts
    from picobot.runtime.tool_safety import sandbox_check
    from picobot.security.sandbox import sandbox_status

    reports = worker_facts(rt.redis, "sandbox")
    # Probing here (once per process) only when no worker said what it runs with.
    return sandbox_check(reports, None if reports else sandbox_status(rt.config.tools.bash.sandbox))


def _processes(rt: "Runtime") -> dict[str, Any] | None:
    """The plugins' long-running processes (picobot/runtime/processes.py), when any runs."""
    from picobot.runtime.processes import health_entry

    return health_entry(rt.redis)


def _plugins(rt: "Runtime") -> dict[str, Any]:
    """The plugins of this process and of each live worker (from its heartbeat). A broken plugin is
    reported here, never a reason to pull the gateway: `ok` stays true."""
    from picobot.runtime.heartbeat import worker_facts

    plugins = rt.plugins.statuses()
    workers = {name: found for name, found in worker_facts(rt.redis, "plugins").items() if isinstance(found, list)}
    troubled = {p["name"]: p["error"] for p in plugins if p.get("error")}
    for found in workers.values():
        troubled.update({p["name"]: p["error"] for p in found if isinstance(p, dict) and p.get("error")})
    detail = f"{sum(p['state'] == 'active' for p in plugins)} active"
    if troubled:
        detail += "; with errors: " + ", ".join(f"{name} ({error})"[:200] for name, error in sorted(troubled.items()))
    return {"ok": True, "detail": detail, "plugins": plugins, "workers": workers}
