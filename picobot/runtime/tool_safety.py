"""Said once when a worker starts: where the tools work and whether `bash` is sandboxed."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from picobot.config.workspace import choose_workspace, warn_if_unsafe
from picobot.security.sandbox import SandboxStatus, sandbox_status

if TYPE_CHECKING:
    from picobot.config import Config

log = logging.getLogger("picobot.sandbox")


def announce(cfg: "Config") -> SandboxStatus:
    """Log the workspace warnings and the sandbox line; the status goes into the worker's heartbeat."""
    warn_if_unsafe(choose_workspace(cfg.home, cfg.tools.workspace), cfg.home)
    status = sandbox_status(cfg.tools.bash.sandbox)
    if not status.ok:
        log.error("bash sandbox (tools.bash.sandbox = %s): %s; bash calls will fail until this is fixed",
                  status.setting, status.detail)
    elif status.active:
        log.info("bash sandbox: %s", status.detail)
    else:
        log.warning("bash sandbox: %s", status.detail)
    return status


def sandbox_check(reports: dict[str, dict[str, Any]], local: SandboxStatus | None) -> dict[str, Any]:
    """The /health entry: what each live worker reported, or this process's own view if none did."""
    if local is not None and not reports:
        return {**local.as_check(), "detail": f"{local.detail} (no worker has reported; checked here)"}
    details = sorted({str(r.get("detail", "")) for r in reports.values()})
    ok = all(bool(r.get("ok")) for r in reports.values())
    active = all(bool(r.get("active")) for r in reports.values())
    if len(details) == 1:
        detail = details[0]
    else:
        detail = "; ".join(f"{name}: {r.get('detail', '')}" for name, r in sorted(reports.items()))
    return {"ok": ok, "active": active, "detail": detail}
