"""MCP server states across processes: workers publish them to Redis, the web process reads them.

Each worker keeps a small hash `picobot:mcp:<worker>` (server key -> JSON state), rewritten with
every heartbeat and expiring with it, so a dead worker's view disappears on its own. `summary`
merges those views with the config, so a server no worker has reported yet is still listed.
"""

from __future__ import annotations

import json
import time
from typing import Any

import redis

from picobot.config.schema import Config
from picobot.mcp import keys
from picobot.runtime.heartbeat import TTL_SECS

UNKNOWN = "unknown"  # configured and active, but no live worker has reported it


def publish(r: redis.Redis, worker: str, statuses: list[dict[str, Any]]) -> None:
    if not statuses:
        return  # a worker without MCP servers writes nothing
    key = keys.STATUS_PREFIX + worker
    pipe = r.pipeline(transaction=True)
    pipe.delete(key)
    pipe.hset(key, mapping={s["key"]: json.dumps(s) for s in statuses})
    pipe.expire(key, TTL_SECS)
    pipe.execute()


def read(r: redis.Redis) -> dict[str, dict[str, dict[str, Any]]]:
    """{worker: {server key: state}} of every live worker that has MCP servers."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for redis_key in r.scan_iter(match=keys.STATUS_PREFIX + "*", count=100):
        worker = str(redis_key)[len(keys.STATUS_PREFIX):]
        states: dict[str, dict[str, Any]] = {}
        for server, raw in r.hgetall(redis_key).items():
            try:
                value = json.loads(raw)
            except ValueError:
                continue
            if isinstance(value, dict):
                states[str(server)] = value
        found[worker] = states
    return found


def summary(config: Config, by_worker: dict[str, dict[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    """One entry per configured server: its overall state, tool count, last error, and each worker's view."""
    out = []
    for key, cfg in config.mcp_servers.items():
        views = {w: states[key] for w, states in sorted(by_worker.items()) if key in states}
        out.append({"key": key, "name": cfg.name or key, "transport": cfg.type, "active": cfg.is_active,
                    **_merge(cfg.is_active, list(views.values())),
                    "workers": {w: _worker_view(v) for w, v in views.items()}})
    return out


def _merge(active: bool, views: list[dict[str, Any]]) -> dict[str, Any]:
    if not active:
        return {"state": "disabled", "tools": 0, "tool_names": [], "failed_tools": {}, "last_error": None}
    if not views:
        return {"state": UNKNOWN, "tools": 0, "tool_names": [], "failed_tools": {},
                "last_error": "no running worker has reported this server yet"}
    states = [v.get("state") for v in views]
    state = states[0] if len(set(states)) == 1 else next(
        (s for s in ("failed", "disconnected", "connecting") if s in states), "mixed")
    best = max(views, key=lambda v: v.get("tools") or 0)
    error = next((v.get("last_error") for v in views if v.get("last_error")), None)
    return {"state": state, "tools": best.get("tools") or 0, "tool_names": best.get("tool_names") or [],
            "failed_tools": best.get("failed_tools") or {}, "last_error": error}


def _worker_view(view: dict[str, Any]) -> dict[str, Any]:
    retry = view.get("retry_at")
    return {"state": view.get("state"), "tools": view.get("tools") or 0, "last_error": view.get("last_error"),
            "since": view.get("since"), "retry_in": max(0.0, retry - time.time()) if retry else None}


def text(servers: list[dict[str, Any]]) -> str:
    """What `/mcp` shows."""
    if not servers:
        return "No MCP servers are configured (add them under `mcpServers` in config.json)."
    lines = ["MCP servers:"]
    for s in servers:
        workers = s["workers"]
        where = f" on {len(workers)} worker(s)" if len(workers) > 1 else ""
        lines.append(f"- {s['key']} ({s['transport']}): {s['state']}{where}, {s['tools']} tool(s)")
        if s["failed_tools"]:
            lines.append(f"  failed tools: {', '.join(f'{k} ({v})' for k, v in s['failed_tools'].items())}")
        if s["last_error"] and s["state"] != "connected":
            lines.append(f"  last error: {s['last_error']}")
    return "\n".join(lines)


def health(config: Config, r: redis.Redis) -> dict[str, Any]:
    """The /health entry. Always ok: a broken MCP server costs its tools, not the service."""
    servers = summary(config, read(r))
    active = [s for s in servers if s["active"]]
    if not active:
        return {"ok": True, "detail": "no MCP servers configured" if not servers else "all MCP servers are disabled",
                "servers": servers}
    up = sum(1 for s in active if s["state"] == "connected")
    bad = [f"{s['key']} {s['state']}" for s in active if s["state"] != "connected"]
    detail = f"{up} of {len(active)} connected" + (f"; {', '.join(bad)}" if bad else "")
    return {"ok": True, "detail": detail, "servers": servers}
