"""A scheduled job's definition: the `Job` value and `parse_job`, which checks job JSON (seed 000 §10).

Shape checks reuse the config models (`JobConfig`); on top come the checks that need the running
config or the clock: time zone, `at` in the past, seconds under the tick, agent, channel, id charset,
sizes. Any bad input, however hostile (deep nesting, lone surrogates, NaN, wrong types), ends as one
`JobError(field, message)`; nothing else escapes.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from pydantic_core import ErrorDetails

from picobot.config.schema import Config, JobConfig
from picobot.domain.scope import SOCKET_CHANNELS
from picobot.errors import ToolError
from picobot.scheduler.schedules import next_due, parse_at, parse_cron, zone

ID_RE = re.compile(r"[A-Za-z0-9._:-]{1,128}")
BUILTIN_CHANNELS = (*sorted(SOCKET_CHANNELS), "scheduler")
INTERNAL_EVENTS = ("memory_maintenance", "session_cleanup")
MAX_PAYLOAD_BYTES = 32 * 1024
MAX_JOB_BYTES = 2 * MAX_PAYLOAD_BYTES
MAX_DEPTH = 12
MAX_SECONDS = 10 * 366 * 86400  # ten years
STATES = ("active", "paused")
_PAYLOAD_TYPES = {"prompt": str, "text": str, "agent": str, "fresh_session": bool, "system_prompt": str,
                  "sender_id": str, "metadata": dict, "event": str}


class JobError(ToolError, ValueError):
    """Bad job input; `field` names the offending field ("schedule.expression", "timezone", …)."""

    def __init__(self, field: str, message: str):
        self.field = field
        self.message = message
        super().__init__(f"{field}: {message}")


@dataclass
class Job:
    id: str
    kind: str
    schedule: dict[str, Any]
    target: dict[str, Any] | None
    payload: dict[str, Any]
    timezone: str | None = None
    state: str = "active"
    source: str = "user"
    owner_scope: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)  # nothing yet; room for later keys

    def tz(self, config: Config) -> str:
        """The zone its cron and naive `at` are read in: its own, else time.timezone."""
        return self.timezone or config.time.timezone

    def row(self) -> dict[str, Any]:
        """Values for picobot.storage.jobs.upsert."""
        values = asdict(self)
        values.pop("extra")
        return values


def _check_json(value: Any, path: str, depth: int = 0) -> None:
    """Only JSON values: str (no lone surrogates), finite numbers, bool, None, lists, str-keyed dicts."""
    if depth > MAX_DEPTH:
        raise JobError(path or "job", f"nested deeper than {MAX_DEPTH} levels")
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise JobError(path or "job", "text is not valid Unicode (lone surrogate)") from None
    elif isinstance(value, bool) or value is None:
        return
    elif isinstance(value, int):
        if abs(value) > 2 ** 53:
            raise JobError(path or "job", "number too large")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise JobError(path or "job", "number must be finite (no NaN or Infinity)")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            _check_json(item, f"{path}[{i}]", depth + 1)
    elif isinstance(value, dict):
        for key, item in value.items():
            if not isinstance(key, str):
                raise JobError(path or "job", "object keys must be text")
            _check_json(key, path or "job", depth + 1)
            _check_json(item, _child(path, key), depth + 1)
    else:
        raise JobError(path or "job", f"{type(value).__name__} is not a JSON value")


def _child(path: str, key: str) -> str:
    """The field name of key under path: `a.b` for plain keys, `a["odd key"]` (shortened) otherwise."""
    if key.isidentifier() and len(key) <= 64:
        return f"{path}.{key}" if path else key
    shown = json.dumps(key if len(key) <= 64 else key[:61] + "...", ensure_ascii=True)
    return f"{path or 'job'}[{shown}]"


def _field_of(err: ErrorDetails) -> str:
    loc = [str(p) for p in err.get("loc", ())]
    if len(loc) >= 2 and loc[0] == "schedule" and loc[1] in ("delay", "interval", "at", "cron"):
        del loc[1]  # the discriminator's tag
    if not loc:
        msg = str(err.get("msg", ""))
        return "target" if "target" in msg else "payload.prompt" if "prompt" in msg else "job"
    return ".".join(loc)


def _pydantic(data: dict[str, Any]) -> JobConfig:
    try:
        return JobConfig.model_validate(data)
    except ValidationError as e:
        err = e.errors(include_url=False)[0]
        msg = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        raise JobError(_field_of(err), msg[:300]) from None


def parse_job(data: Any, config: Config, *, now: float, default_target: dict | None = None) -> Job:
    """Check job JSON and return the Job; JobError naming the field otherwise. Changes nothing."""
    try:
        return _parse(data, config, now, default_target)
    except JobError:
        raise
    except (RecursionError, MemoryError):
        raise JobError("job", "too deeply nested or too large") from None
    except Exception as e:  # the promise: bad input never raises anything but JobError
        raise JobError("job", f"not a valid job ({type(e).__name__})") from None


def _parse(data: Any, config: Config, now: float, default_target: dict | None) -> Job:
    if not isinstance(data, dict):
        raise JobError("job", "a job is a JSON object")
    _check_json(data, "")  # paths name the field: `payload.metadata.x`, `job[""]`
    size = len(json.dumps(data, ensure_ascii=False).encode("utf-8"))
    if size > MAX_JOB_BYTES:  # the payload's own cap (below) names the field in the usual case
        raise JobError("job", f"job JSON is {size} bytes; the limit is {MAX_JOB_BYTES}")
    data = dict(data)
    job_id = data.get("id")
    if not isinstance(job_id, str) or not ID_RE.fullmatch(job_id):
        raise JobError("id", "1-128 characters of A-Z a-z 0-9 . _ : -")
    tz_name = data.pop("timezone", None)
    if tz_name is not None:
        if not isinstance(tz_name, str) or not tz_name:
            raise JobError("timezone", "an IANA time zone name such as 'Asia/Shanghai'")
        try:
            zone(tz_name)
        except Exception:
            raise JobError("timezone", f"unknown time zone {tz_name[:64]!r}; use an IANA name "
                           "such as 'Asia/Shanghai' or 'UTC'") from None
    state = data.pop("state", "active")
    if state not in STATES:
        raise JobError("state", "active or paused")
    if data.get("target") is None and data.get("kind") != "internal_event" and default_target is not None:
        data["target"] = dict(default_target)
    cfg = _pydantic(data)
    if not cfg.enabled:
        state = "paused"
    tz = tz_name or config.time.timezone
    schedule = cfg.schedule.model_dump(mode="json")
    _check_schedule(schedule, cfg, config, tz, now)
    if cfg.schedule.type == "at":  # store the instant with its offset: later tz changes do not move it
        at = cfg.schedule.at
        instant = at.timestamp() if at.tzinfo else parse_at(at, tz)
        schedule["at"] = datetime.fromtimestamp(instant, zone(tz)).isoformat()
    target = cfg.target.model_dump(exclude_none=True) if cfg.target else None
    _check_target(target, cfg.kind, config)
    payload = dict(cfg.payload)
    _check_payload(payload, cfg.kind, config)
    return Job(id=job_id, kind=cfg.kind, schedule=schedule, target=target, payload=payload,
               timezone=tz_name, state=state)


def _check_schedule(schedule: dict, cfg: JobConfig, config: Config, tz: str, now: float) -> None:
    kind = schedule["type"]
    if kind in ("delay", "interval"):
        seconds = schedule["seconds"]
        tick = config.scheduler.tick_resolution_ms
        if seconds * 1000 < tick:
            raise JobError("schedule.seconds", f"{seconds} s is under the scheduler tick ({tick} ms)")
        if seconds > MAX_SECONDS:
            raise JobError("schedule.seconds", "at most ten years")
    elif cfg.schedule.type == "at":  # the same tag as `kind`, on the model: narrows its type
        at = cfg.schedule.at
        instant = at.timestamp() if at.tzinfo else parse_at(at, tz)
        if instant <= now:
            raise JobError("schedule.at", f"{schedule['at']} is in the past")
    elif kind == "cron":
        try:
            parse_cron(schedule["expression"])
        except (ValueError, KeyError) as e:
            raise JobError("schedule.expression", str(e)[:200]) from None
        if next_due(schedule, now, tz, now) is None:
            raise JobError("schedule.expression", "matches no day (e.g. 30 February): it would never run")


def _check_target(target: dict | None, kind: str, config: Config) -> None:
    if target is None:
        return
    channel = target["channel"]
    if channel not in BUILTIN_CHANNELS and channel not in config.channels:
        known = ", ".join(sorted({*BUILTIN_CHANNELS, *config.channels}))
        raise JobError("target.channel", f"unknown channel {channel[:64]!r} (known: {known})")
    for key in ("chat_id", "session_chat_id"):
        if key in target and len(target[key]) > 256:
            raise JobError(f"target.{key}", "at most 256 characters")


def _check_payload(payload: dict, kind: str, config: Config) -> None:
    for key, typ in _PAYLOAD_TYPES.items():
        if key in payload and payload[key] is not None and not isinstance(payload[key], typ):
            raise JobError(f"payload.{key}", f"must be {typ.__name__}")
    size = len(json.dumps(payload, ensure_ascii=False).encode("utf-8"))
    if size > MAX_PAYLOAD_BYTES:
        raise JobError("payload", f"{size} bytes; the limit is {MAX_PAYLOAD_BYTES}")
    limit = config.gateway.max_message_chars
    for key in ("prompt", "text", "system_prompt"):
        if isinstance(payload.get(key), str) and len(payload[key]) > limit:
            raise JobError(f"payload.{key}", f"{len(payload[key])} characters; the limit is {limit}")
    agent = payload.get("agent")
    if agent is not None and agent not in config.agent_names():
        raise JobError("payload.agent", f"unknown agent {agent[:64]!r} (known: {', '.join(sorted(config.agent_names()))})")
    if kind == "internal_event" and payload.get("event") not in INTERNAL_EVENTS:
        raise JobError("payload.event", f"one of {', '.join(INTERNAL_EVENTS)}")
    if kind == "outbound_message":
        text = payload.get("text") or payload.get("prompt")
        if not (isinstance(text, str) and text.strip()):
            raise JobError("payload.text", "an outbound_message needs payload.text (non-empty)")
