"""The title task's body: one model call per dialog, in the background, after its first answer.

    read the first exchange (none yet: nothing happens, a later turn enqueues again)
    -> claim the dialog's one attempt in SQL (a titled dialog, or one tried before — a re-delivered
       task, a worker restarted mid-call — stops here: a failing call is never retried in a loop)
    -> one call to `titles.provider`/`titles.model` (default the dialog's agent's), no retries,
       cancelled after `titles.timeout_secs`
    -> the reply sanitised -> a conditional UPDATE (a /rename that came first wins)
    -> `session_updated` to the dialog's watchers, and the call reported as a model call of kind `title`.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from picobot.agent.stream import pump
from picobot.domain.cancel import CancelToken
from picobot.domain.messages import Usage, text_of
from picobot.errors import ConfigError, PicoBotError, ProviderUnavailable, TurnCancelled
from picobot.plugins.types import ModelCallView, StageContext
from picobot.providers import build_provider
from picobot.providers.base import ChatRequest, Completed
from picobot.storage import titles as sql
from picobot.threadpool import watchdog
from picobot.titles import prompt

if TYPE_CHECKING:
    from picobot.config.schema import Config, ModelConfig, ProviderConfig
    from picobot.runtime.ports import Ports

log = logging.getLogger("picobot.titles")


class _Call:
    """The outcome of the title call, for the report (`picobot_model_call`)."""

    def __init__(self, provider: str, model: str) -> None:
        self.provider, self.model, self.started, self.t0 = provider, model, time.time(), time.perf_counter()
        self.usage = Usage()
        self.finish_reason = ""
        self.error: str | None = None  # the error's type name when the call failed

    def view(self) -> ModelCallView:
        u = self.usage
        return ModelCallView(self.provider, self.model, self.started, time.perf_counter() - self.t0, None,
                             u.input_tokens or 0, u.output_tokens or 0, u.cached_input_tokens or 0,
                             "" if self.error else self.finish_reason, self.error, kind="title")


def write_title(rt: "Ports", session_id: str) -> str:
    """titled | renamed (a person's title came first) | failed | empty | skipped | no_exchange | disabled."""
    outcome = _write(rt, session_id)
    log.info("title of %s: %s", session_id, outcome)
    return outcome


def _write(rt: "Ports", session_id: str) -> str:
    if not rt.config.titles.enabled:
        return "disabled"
    with rt.db.connect() as conn:
        dialog, exchange = sql.dialog(conn, session_id), sql.first_exchange(conn, session_id)
    if dialog is None or exchange is None:
        return "no_exchange"
    with rt.db.begin() as conn:
        if not sql.claim_attempt(conn, session_id, time.time()):
            return "skipped"
    try:
        provider_key, provider_cfg, model = _model_of(rt.config, dialog.agent)
    except ConfigError as exc:
        log.warning("no title for %s: %s", session_id, exc)
        return "failed"
    call = _Call(provider_key, model.model_id)
    try:
        reply = _ask(provider_key, provider_cfg, model, prompt.request(*exchange, rt.config.titles.max_chars),
                     rt.config.titles.timeout_secs, call, rt.plugins)
    except PicoBotError as exc:  # the preview stays; this dialog is not tried again
        call.error = type(exc).__name__
        log.warning("no title for %s: %s", session_id, exc)
        return "failed"
    except Exception as exc:  # a bug, not a provider's failure: the task's log shows it; the attempt is spent
        call.error = type(exc).__name__
        raise
    finally:
        _report(rt, session_id, dialog, call)
    return _store(rt, session_id, prompt.sanitise(reply, rt.config.titles.max_chars))


def _model_of(config: "Config", agent: str) -> tuple[str, "ProviderConfig", "ModelConfig"]:
    resolved = config.agent(agent)
    key = config.titles.provider or resolved.provider_key
    return key, config.providers[key], config.models[config.titles.model or resolved.agent.model]


def _ask(key: str, cfg: "ProviderConfig", model: "ModelConfig", messages: list[Any], timeout: float,
         call: _Call, plugins: Any) -> str:
    """The reply's text; ProviderError when the call fails or takes longer than `timeout`."""
    # a provider of its own: no retries (one attempt per dialog) and the titles' timeout; a plugin's provider type
    # (picobot_providers) as for a turn
    provider = build_provider(key, cfg.model_copy(update={"max_retries": 0, "llm_timeout_secs": timeout}),
                              plugins.provider_adapters(), plugins.report)
    request = ChatRequest(model=model.model_id, messages=messages, temperature=model.temperature,
                          max_tokens=model.max_tokens, options=dict(model.options))
    cancel = CancelToken()
    disarm = watchdog().arm(timeout, lambda: cancel.cancel("timeout"))
    try:
        for event in pump(provider.stream(request), cancel, timeout):
            if isinstance(event, Completed):
                call.usage, call.finish_reason = event.usage, event.stop_reason
                return text_of(event.message.content)
    except TurnCancelled:
        raise ProviderUnavailable(f"the model did not answer within {timeout:g} s (titles.timeout_secs)") from None
    finally:
        disarm()
        getattr(provider, "close", lambda: None)()
    raise ProviderUnavailable("the model's answer ended without a complete message")


def _store(rt: "Ports", session_id: str, title: str) -> str:
    if not title:
        log.info("no title for %s: the model's reply had nothing usable", session_id)
        return "empty"
    with rt.db.begin() as conn:
        if not sql.write_auto(conn, session_id, title):
            return "renamed"
    rt.publisher.publish({"type": "session_updated", "session_id": session_id, "title": title,
                          "title_source": "auto"})
    return "titled"


def _report(rt: "Ports", session_id: str, dialog: Any, call: _Call) -> None:
    """The call as a model call of kind `title` (metrics, traces, and the usage ledger where one listens)."""
    if rt.plugins.has("picobot_model_call"):
        ctx = StageContext(session_id=session_id, channel=dialog.channel, chat_id=dialog.chat_id, sender_id="",
                           turn_id="", agent=dialog.agent)
        rt.plugins.call("picobot_model_call", ctx=ctx, call=call.view())
