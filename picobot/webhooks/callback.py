"""The result callback: the finished run POSTed as signed JSON to the hook's `callback_url`.

At least once: the run is leased in SQL before each attempt (one sender at a time), a 5xx, 408,
429 or a network error is retried with exponential backoff up to `callback_max_attempts`, and the
sweeper re-enqueues a due callback whose task was lost. Receivers deduplicate on `run_id`.
The URL goes through the same network guard as the agent's URL tools: loopback, private and
metadata addresses are refused (no retry) unless `tools.network.allow` opens them.
"""

from __future__ import annotations

import json
import logging
import time
from typing import TYPE_CHECKING, Any

import httpx

from picobot.errors import NetworkRefused
from picobot.security.netguard import NetworkPolicy, guarded_client
from picobot.webhooks import runs
from picobot.webhooks.signature import signed_headers

if TYPE_CHECKING:
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.webhooks")

LEASE_SECS = 60.0  # an attempt's hold on the run; a lost task's callback is due again after it
TIMEOUT_SECS = 10.0
BACKOFF_BASE_SECS = 2.0
BACKOFF_MAX_SECS = 300.0
RETRY_STATUSES = frozenset({408, 425, 429})
RUN_ID_HEADER = "X-PicoBot-Run-Id"


def backoff(attempts: int) -> float:
    """Seconds before the next attempt after `attempts` failed ones: 2, 4, 8, … capped at 5 minutes."""
    return min(BACKOFF_MAX_SECS, BACKOFF_BASE_SECS * 2 ** max(0, attempts - 1))


def result_document(row: dict[str, Any]) -> dict[str, Any]:
    return {"run_id": row["id"], "hook": row["hook"], "status": row["status"], "result": row["result"],
            "error": row["error"], "created_at": row["created_at"], "ended_at": row["ended_at"]}


def send(ports: "Ports", run_id: str) -> str:
    """One attempt at a run's callback; returns what happened (for the task's result and logs)."""
    with ports.db.begin() as conn:
        row = runs.claim_callback(conn, run_id, LEASE_SECS)
    if row is None:
        return "not_due"
    hook = ports.config.hooks.get(row["hook"])
    attempts = int(row["callback_attempts"]) + 1
    if hook is None or not hook.callback_url:
        return _end(ports, run_id, runs.CB_FAILED, attempts, "the hook or its callback_url is no longer configured")
    body = json.dumps(result_document(row), ensure_ascii=False).encode("utf-8")
    headers = {"Content-Type": "application/json", RUN_ID_HEADER: run_id, **signed_headers(hook.secret, body)}
    try:
        status = _post(ports, hook.callback_url, body, headers)
    except NetworkRefused as exc:
        return _end(ports, run_id, runs.CB_REFUSED, attempts, str(exc))
    except httpx.HTTPError as exc:
        return _retry(ports, run_id, attempts, hook.callback_max_attempts, f"{type(exc).__name__}")
    if 200 <= status < 300:
        return _end(ports, run_id, runs.CB_DELIVERED, attempts, row["callback_error"])  # kept: why it was retried
    if status >= 500 or status in RETRY_STATUSES:
        return _retry(ports, run_id, attempts, hook.callback_max_attempts, f"HTTP {status}")
    return _end(ports, run_id, runs.CB_FAILED, attempts, f"HTTP {status} (not retried)")


def _post(ports: "Ports", url: str, body: bytes, headers: dict[str, str]) -> int:
    policy = NetworkPolicy.from_allow(ports.config.tools.network.allow)
    # no redirects: a POST redirected elsewhere is not what the operator configured
    with guarded_client(policy, timeout=TIMEOUT_SECS, follow_redirects=False) as client:
        return client.post(url, content=body, headers=headers).status_code


def _end(ports: "Ports", run_id: str, status: str, attempts: int, error: str | None) -> str:
    with ports.db.begin() as conn:
        runs.callback_outcome(conn, run_id, status, attempts, None, error)
    if status != runs.CB_DELIVERED:
        log.warning("hook run %s: callback %s after %d attempt(s): %s", run_id, status, attempts, error)
    return status


def _retry(ports: "Ports", run_id: str, attempts: int, max_attempts: int, error: str) -> str:
    if attempts >= max_attempts:
        return _end(ports, run_id, runs.CB_FAILED, attempts, f"{error}; gave up after {attempts} attempts")
    wait = backoff(attempts)
    with ports.db.begin() as conn:
        runs.callback_outcome(conn, run_id, runs.CB_PENDING, attempts, time.time() + wait, error)
    log.info("hook run %s: callback attempt %d failed (%s); next in %.0f s", run_id, attempts, error, wait)
    enqueue(ports, run_id, countdown=wait)
    return "retrying"


def enqueue(ports: "Ports", run_id: str, countdown: float = 0) -> None:
    """Ask a worker for the attempt; a lost enqueue is found by the sweeper once the run is due."""
    try:
        ports.queue.enqueue_hook_callback(run_id, countdown=countdown)
    except Exception as exc:
        log.warning("hook run %s: callback not enqueued (%s); the sweeper will send it", run_id, type(exc).__name__)
