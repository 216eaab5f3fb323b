"""One inbound webhook call, from raw request to a stored run: the logic behind `POST /hooks/<name>`.

    unknown or disabled hook -> 404     body over max_body_bytes -> 413
    signature or timestamp   -> 401     Idempotency-Key malformed -> 400
    body not a JSON object   -> 400     rendered prompt too long -> 413
    signed request re-sent   -> 409 (without an Idempotency-Key: a replay)
    a repeated Idempotency-Key -> the first run, nothing new stored

Nothing is stored and no model is called before every check passed. Then the run row and its
input (platform id `hook:<run_id>`, mode queue) are written in one transaction, and only after
that commit is the run acknowledged; the turn task is enqueued after it, and the sweeper wakes
the session if that enqueue is lost (a Redis flush, a broker outage).
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from picobot.domain.headers import RequestHeaders
from picobot.storage import inbound, sessions
from picobot.storage.models import MODE_QUEUE
from picobot.webhooks import runs
from picobot.webhooks.body import BodyError, parse_object
from picobot.webhooks.signature import SIGNATURE_HEADER, TIMESTAMP_HEADER, SignatureError, verify
from picobot.webhooks.template import Template, TemplateError, compile_template

if TYPE_CHECKING:
    from sqlalchemy import Connection

    from picobot.config.schema import HookConfig
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.webhooks")

IDEMPOTENCY_HEADER = "Idempotency-Key"
MAX_KEY_CHARS = 200
SILENT_CHANNEL = "webhook"  # silent runs: a dialog of their own, (webhook, <hook>:<run id>)
REPLAY_PREFIX = "picobot:hooks:seen:"  # + signature -> a signed request already taken (Redis, expires)


class HookError(Exception):
    """A refused call: the HTTP status, a stable code, and a message safe to send back."""

    def __init__(self, status: int, code: str, message: str):
        super().__init__(message)
        self.status, self.code, self.message = status, code, message


class _LostRace(Exception):
    pass


@dataclass(frozen=True)
class Accepted:
    run_id: str
    created: bool  # False: an Idempotency-Key repeat, answered with the first run


@lru_cache(maxsize=256)
def template_of(prompt: str) -> Template:
    return compile_template(prompt)


def hook_config(ports: "Ports", name: str) -> "HookConfig":
    hook = ports.config.hooks.get(name)
    if hook is None or not hook.enabled:
        raise HookError(404, "unknown_hook", f"No webhook named {name[:64]!r}.")
    return hook


def accept(ports: "Ports", name: str, headers: RequestHeaders, body: bytes,
           now: float | None = None) -> Accepted:
    hook = hook_config(ports, name)
    if len(body) > hook.max_body_bytes:
        raise HookError(413, "too_large", f"The body is over {hook.max_body_bytes} bytes.")
    signature = headers.get(SIGNATURE_HEADER)
    try:
        verify(hook.secret, headers.get(TIMESTAMP_HEADER), signature, body, now)
    except SignatureError as exc:
        raise HookError(401, "bad_signature", str(exc)) from None
    key = _idempotency_key(headers.get(IDEMPOTENCY_HEADER))
    prompt = _prompt(hook, body)
    if key is not None:
        with ports.db.connect() as conn:
            existing = runs.by_key(conn, name, key)
        if existing is not None:
            return Accepted(existing, False)
    elif not _first_sight(ports, str(signature)):
        raise HookError(409, "replayed", "This signed request was received already; sign a new one "
                                         f"(or send an {IDEMPOTENCY_HEADER} to make repeats safe).")
    return _store(ports, name, hook, prompt, key, now)


def _idempotency_key(raw: str | None) -> str | None:
    if raw is None:
        return None
    if not 1 <= len(raw) <= MAX_KEY_CHARS or not raw.isascii() or not raw.isprintable():
        raise HookError(400, "bad_idempotency_key",
                        f"{IDEMPOTENCY_HEADER} must be 1-{MAX_KEY_CHARS} printable ASCII characters.")
    return runs.key_hash(raw)


def _prompt(hook: "HookConfig", body: bytes) -> str:
    try:
        payload = parse_object(body)
    except BodyError as exc:
        raise HookError(400, "bad_body", str(exc)) from None
    try:
        prompt = template_of(hook.prompt).render(payload, hook.prompt_max_chars)
    except TemplateError as exc:
        raise HookError(413, "prompt_too_large", str(exc)) from None
    if not prompt.strip():
        raise HookError(400, "empty_prompt", "The hook's prompt renders empty for this body.")
    return prompt


def _first_sight(ports: "Ports", signature: str) -> bool:
    """True the first time a signature is seen within the tolerance window (a replay cache)."""
    from picobot.webhooks.signature import TOLERANCE_SECS

    try:
        return bool(ports.redis.set(REPLAY_PREFIX + signature, "1", nx=True, ex=2 * TOLERANCE_SECS + 60))
    except Exception as exc:  # Redis down: the signed timestamp still bounds a replay to its window
        log.warning("webhook replay cache unavailable (%s); accepting on the signature alone", type(exc).__name__)
        return True


def _store(ports: "Ports", name: str, hook: "HookConfig", prompt: str, key: str | None,
           now: float | None) -> Accepted:
    from picobot.runtime.task_names import QUEUE_SCHEDULED

    run_id = uuid.uuid4().hex
    if hook.mode == "agent_task":
        assert hook.deliver is not None  # the config says so
        channel, chat_id = hook.deliver.channel, hook.deliver.chat_id
    else:
        channel, chat_id = SILENT_CHANNEL, f"{name}:{run_id}"

    def store(conn: Connection) -> str:
        session_id = sessions.current_or_create_id(conn, channel, chat_id, hook.agent)
        values = {"id": run_id, "hook": name, "idempotency_key": key, "mode": hook.mode, "channel": channel,
                  "session_id": session_id, "created_at": time.time() if now is None else now}
        if not runs.insert_run(conn, values):
            raise _LostRace  # a concurrent repeat of the same key won: roll back, answer with its run
        inbound.enqueue(conn, session_id, channel, prompt, f"hook:{name}", MODE_QUEUE, runs.input_id(run_id))
        return session_id

    try:  # committed with the other inputs arriving at the same time (group commit), before the answer
        session_id = ports.db.grouped(store)
    except _LostRace:
        with ports.db.connect() as conn:
            return Accepted(str(runs.by_key(conn, name, str(key))), False)
    try:
        ports.queue.enqueue_turn(session_id, queue=QUEUE_SCHEDULED)
    except Exception as exc:  # stored: the sweeper wakes the session once the broker is back
        log.warning("hook %s run %s stored but not enqueued (%s); the sweeper will run it", name, run_id,
                    type(exc).__name__)
    return Accepted(run_id, True)
