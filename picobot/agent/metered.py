"""A model call's watch for `picobot_model_call`, and `metered`: one call outside the AgentLoop (a
compaction's summary) through the same gate and hooks as the loop's calls, so budgets see it too."""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Any, Iterator

from picobot.domain.messages import Usage
from picobot.errors import ModelCallRefused
from picobot.plugins.types import ModelCallView, ModelRequestView, Refusal, StageContext
from picobot.providers.base import ChatRequest


class CallWatch:
    """The times, usage and outcome of one model call, for `picobot_model_call`."""

    __slots__ = ("model", "provider", "kind", "started", "t0", "first", "usage", "finish_reason", "error")

    def __init__(self, model: str, provider: str, kind: str = "") -> None:
        self.model, self.provider, self.kind = model, provider, kind
        self.started, self.t0 = time.time(), time.perf_counter()
        self.first: float | None = None
        self.usage = Usage()
        self.finish_reason = ""
        self.error: str | None = None

    def view(self) -> ModelCallView:
        u = self.usage
        return ModelCallView(self.provider, self.model, self.started, time.perf_counter() - self.t0,
                             None if self.first is None else self.first - self.t0, u.input_tokens or 0,
                             u.output_tokens or 0, u.cached_input_tokens or 0,
                             "" if self.error else self.finish_reason, self.error, self.kind)


@contextmanager
def metered(hooks: Any, stage: StageContext, provider_key: str, request: ChatRequest, kind: str) -> Iterator[CallWatch]:
    """Ask the gate (ModelCallRefused when refused), yield a watch whose `usage` the caller fills from the
    Completed event, then tell `picobot_model_call`, also when the call failed."""
    if hooks is not None and hooks.has("picobot_model_call_gate"):
        view = ModelRequestView(provider_key, request.model, tuple(request.messages), request.max_tokens, 0, kind)
        refusal = hooks.first("picobot_model_call_gate", ctx=stage, request=view)
        if isinstance(refusal, Refusal):
            raise ModelCallRefused(str(refusal.status)[:32], str(refusal.message)[:2000])
    watch = CallWatch(request.model, provider_key, kind)
    try:
        yield watch
    except BaseException as exc:
        watch.error = type(exc).__name__
        raise
    finally:
        if hooks is not None and hooks.has("picobot_model_call"):
            hooks.call("picobot_model_call", ctx=stage, call=watch.view())
