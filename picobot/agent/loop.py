"""AgentLoop: call the model, run the tools it asks for, repeat until it answers.

Stateless across turns: it gets the prepared history and returns the new messages.
Steering input is drained at safe boundaries (after a complete tool batch, and at a
final answer) and injected as real user messages.
"""

from __future__ import annotations

import base64
import json
import logging
import os
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Callable

from picobot.agent.metered import CallWatch as _CallWatch
from picobot.agent.schema_size import tools_chars
from picobot.agent.snapshot import TurnController
from picobot.agent.tool_batch import ToolBatch, ordering
from picobot.agent.stream import pump
from picobot.domain.messages import ChatMessage, ToolCall, Usage, text_of
from picobot.errors import ContextLengthExceeded, ModelCallRefused, ProviderError, TurnCancelled
from picobot.plugins.types import (Deny, ModelRequestView, ModelResponse, Refusal, StageContext,
                                   ToolCallRecord, ToolCallView)
from picobot.security.redact import replace_secrets
from picobot.providers.base import (ChatRequest, Completed, Provider, ReasoningDelta, StreamRestarted, TextDelta,
                                    ToolCallDelta)
from picobot.tools.base import RunningAgent, ToolContext, ToolResult
from picobot.tools.registry import ToolRegistry

if TYPE_CHECKING:
    from picobot.plugins.manager import PluginHost

log = logging.getLogger("picobot.agent")

CANCELLED_TOOL_TEXT = "[cancelled] The user stopped the turn before this tool finished."
# After a cancel, how long to wait for running tools (cancellation cuts them short) before
# the turn is committed without them; and for a file write under way to land before that.
TOOL_SETTLE_SECS = 2.0
GATE_SEAL_SECS = 1.0

SteerSource = Callable[[], list[ChatMessage]]
# Given the provider's overflow error text, compact the stored history and return the history to
# use instead (the messages before this turn's own), or None when nothing could be folded.
OverflowHandler = Callable[[str], "list[ChatMessage] | None"]


@dataclass
class LoopSettings:
    model: str
    temperature: float | None = None
    max_tokens: int | None = None
    options: dict = field(default_factory=dict)
    max_tool_iterations: int = 100
    tool_result_max_chars: int = 20000
    context_tool_result_trim_chars: int = 2000
    idle_timeout_secs: float = 120.0
    max_parallel_tools: int = 8


@dataclass
class LoopResult:
    messages: list[ChatMessage]  # new messages of this turn, in true order
    usage: Usage
    last_input_tokens: int = 0
    status: str = "completed"  # completed | cancelled | failed
    error: str | None = None
    partial_text: str = ""  # a stopped turn: what the interrupted model call had streamed
    answered_by: str = ""  # "<provider>:<model>" of the last answer, when a fallback chain is in use
    images: list[str] = field(default_factory=list)  # image files tools returned (ToolOutput), for the final reply
    # completed | cancelled | failed, or a plugin's refusal status (a budget: budget_exceeded)

    @property
    def final_text(self) -> str:
        for m in reversed(self.messages):
            if m.role == "assistant" and not m.tool_calls:
                return text_of(m.content)
        return ""


class AgentLoop:
    def __init__(self, provider: Provider, tools: ToolRegistry, settings: LoopSettings,
                 hooks: PluginHost | None = None):
        self.provider = provider
        self.tools = tools
        self.settings = settings
        self.hooks = hooks  # the plugins' stage hooks (pre/post_action, before/after_toolcall)
        self._on_overflow: OverflowHandler | None = None
        self._stage: StageContext | None = None
        self._tools_chars: int | None = None

    def run(self, history: list[ChatMessage], new: list[ChatMessage], ctx: ToolContext,
            controller: TurnController, steer: SteerSource, on_overflow: OverflowHandler | None = None,
            stage: StageContext | None = None) -> LoopResult:
        """`stage`: who the hooks see this run as (the turn's inputs, a sub-agent's run id); built from `ctx` if None."""
        self._on_overflow = on_overflow  # used once per turn: a second overflow goes to the trim
        self._stage = replace(  # the hooks see this run's /stop (an approval's wait ends on it)
            stage or StageContext(ctx.session_id, ctx.channel, ctx.chat_id, ctx.sender_id, ctx.turn_id), cancel=ctx.cancel)
        ctx.agent = RunningAgent(self.provider, self.tools, self.settings, controller, self.hooks,  # for sub-agents
                                 self._stage)
        result = LoopResult(messages=new, usage=Usage())
        try:
            self._loop(history, result, ctx, controller, steer)
        except _CancelledWithResults as exc:
            result.messages.extend(exc.results)
            result.status = "cancelled"
        except TurnCancelled:
            result.status = "cancelled"
            result.partial_text = controller.partial_text()
        except ModelCallRefused as exc:  # a plugin (a budget) refused the next call: it was never sent
            result.status = exc.status
            result.error = str(exc)
            log.info("turn %s: model call refused (%s)", controller.turn_id, exc.status)
        except ProviderError as exc:
            result.status = "failed"
            result.error = _provider_error_text(exc)
            log.warning("turn %s failed: %s", controller.turn_id, result.error)
        finally:
            # whatever a tool thread does from now on, it changes no file: the turn is over
            if not ctx.gate.seal(GATE_SEAL_SECS):
                log.warning("turn %s ended with a file write still under way", controller.turn_id)
        return result

    def _loop(self, history: list[ChatMessage], result: LoopResult, ctx: ToolContext,
              controller: TurnController, steer: SteerSource) -> None:
        s = self.settings
        for _round in range(s.max_tool_iterations + 1):
            ctx.cancel.raise_if_cancelled()
            if _round:  # the claim that started the turn already took the steer input waiting then
                result.messages.extend(steer())
            assistant = self._call_model(history, result, ctx, controller)
            result.messages.append(assistant)
            if not assistant.tool_calls:
                late = steer()  # input that arrived while the model answered gets its own reply
                if not late:
                    result.messages[-1] = with_attachments(assistant, result.images)
                    return
                result.messages.extend(late)
                continue
            if _round == s.max_tool_iterations:
                break
            result.messages.extend(self._run_tools(assistant.tool_calls, ctx, controller, result.images))
        note = f"I stopped after {s.max_tool_iterations} rounds of tool calls without reaching a final answer."
        # the last assistant message asked for tools we did not run: answer them so the chain stays whole
        for call in result.messages[-1].tool_calls:
            result.messages.append(ChatMessage(role="tool", content="[not run] tool round limit reached",
                                               tool_call_id=call.id, name=call.name, is_error=True))
        result.messages.append(ChatMessage(role="assistant", content=note))
        controller.text(note)

    def _call_model(self, history: list[ChatMessage], result: LoopResult, ctx: ToolContext,
                    controller: TurnController) -> ChatMessage:
        messages = history + result.messages
        try:
            return self._stream_once(messages, result, ctx, controller)
        except ContextLengthExceeded as exc:
            if self._compacted(history, str(exc)):
                messages = history + result.messages
                try:
                    return self._stream_once(messages, result, ctx, controller)
                except ContextLengthExceeded:
                    pass
            trimmed = trim_tool_results(messages, self.settings.context_tool_result_trim_chars)
            if trimmed == messages:
                raise
            log.info("context too long; retrying with tool results trimmed")
            return self._stream_once(trimmed, result, ctx, controller)

    def _compacted(self, history: list[ChatMessage], error: str) -> bool:
        """Compact the stored history against the provider's limit; `history` becomes the result."""
        handler, self._on_overflow = self._on_overflow, None
        if handler is None:
            return False
        replacement = handler(error)
        if replacement is None:
            return False
        log.info("context too long; retrying with the history compacted")
        history[:] = replacement  # later rounds of this turn send the compacted history too
        return True

    def _stream_once(self, messages: list[ChatMessage], result: LoopResult, ctx: ToolContext,
                     controller: TurnController) -> ChatMessage:
        s = self.settings
        if self.hooks is not None and self.hooks.has("pre_action"):
            notes = self.hooks.pre_action(self._stage, messages)
            if notes:
                messages = messages + [ChatMessage(role="system", content=n) for n in notes]
        request = ChatRequest(model=s.model, messages=messages, tools=self.tools.specs(),
                              temperature=s.temperature, max_tokens=s.max_tokens, options=dict(s.options))
        controller.model_call_started()
        if self.hooks is not None and self.hooks.has("picobot_model_call_gate"):
            self._gate(request)
        if self.hooks is None or not self.hooks.has("picobot_model_call"):
            return self._consume(request, result, ctx, controller, None)
        watch = _CallWatch(s.model, self.provider.key)
        try:
            return self._consume(request, result, ctx, controller, watch)
        except BaseException as exc:
            watch.error = type(exc).__name__
            raise
        finally:
            self.hooks.call("picobot_model_call", ctx=self._stage, call=watch.view())

    def _gate(self, request: ChatRequest) -> None:
        """Ask the plugins whether this call may be sent; a Refusal ends the run (ModelCallRefused)."""
        assert self.hooks is not None and self._stage is not None
        if self._tools_chars is None:  # the same tools every call of this loop
            self._tools_chars = tools_chars(request.tools)
        view = ModelRequestView(self.provider.key, request.model, tuple(request.messages), request.max_tokens,
                                self._tools_chars, "subagent" if self._stage.run_id else "turn")
        refusal = self.hooks.first("picobot_model_call_gate", ctx=self._stage, request=view)
        if isinstance(refusal, Refusal):
            raise ModelCallRefused(str(refusal.status)[:32], str(refusal.message)[:2000])

    def _consume(self, request: ChatRequest, result: LoopResult, ctx: ToolContext, controller: TurnController,
                 watch: "_CallWatch | None") -> ChatMessage:
        stream = self.provider.stream(request)
        for event in pump(stream, ctx.cancel, self.settings.idle_timeout_secs):
            if watch is not None and watch.first is None:
                watch.first = time.perf_counter()
            if isinstance(event, TextDelta):
                controller.text(event.text)
            elif isinstance(event, ReasoningDelta):
                controller.reasoning(event.text)
            elif isinstance(event, ToolCallDelta):
                controller.tool_call_streaming(event.index, event.id, event.name, event.arguments)
            elif isinstance(event, StreamRestarted):
                controller.restart_call()  # the next provider answers from the start: one answer, not two halves
            elif isinstance(event, Completed):
                if event.answered_by:
                    result.answered_by = event.answered_by
                    controller.answered(event.answered_by)
                result.usage = result.usage + event.usage
                result.last_input_tokens = event.usage.input_tokens or result.last_input_tokens
                if watch is not None:
                    watch.usage, watch.finish_reason = event.usage, event.stop_reason
                    # a fallback chain: metrics and traces name the provider and model that answered
                    watch.provider, watch.model = getattr(stream, "answered", None) or (watch.provider, watch.model)
                message = masked_message(event.message, ctx.secrets)
                if event.answered_by:  # stored with the message: which chain entry answered it
                    message = replace(message, provider_state={**(message.provider_state or {}),
                                                               "answered_by": event.answered_by})
                if self.hooks is not None and self.hooks.has("post_action"):
                    self.hooks.post_action(self._stage, _response_view(message, event.usage))
                return message
        raise ProviderError("the model's stream ended without a complete message")

    def _run_tools(self, calls: list[ToolCall], ctx: ToolContext, controller: TurnController,
                   images: list[str] | None = None) -> list[ChatMessage]:
        """Run one batch (see tool_batch); results come back in the order of the calls."""
        for call in calls:
            controller.tool_waiting(call)
        after = ordering([self.tools.footprint(c, ctx) for c in calls],
                         [self.tools.is_read_only(c.name) for c in calls])
        batch = ToolBatch(calls, after, lambda call: self._execute(call, ctx), controller,
                          self.settings.max_parallel_tools)
        results = batch.run(ctx.cancel, TOOL_SETTLE_SECS)
        out = []
        for call, res in zip(calls, results):
            if res is None:  # never started, or still running when the wait for it ended
                res = ToolResult(CANCELLED_TOOL_TEXT, is_error=True)
                controller.tool_finished(call, res.content, res.is_error)
            out.append(ChatMessage(role="tool", content=_tool_content(res), tool_call_id=call.id,
                                   name=call.name, is_error=res.is_error))
            if images is not None:
                images.extend(res.images)
        if ctx.cancel.cancelled:
            # keep the chain whole in what we store, then stop
            raise _CancelledWithResults(out)
        return out

    def _execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        if self.hooks is None or not self.hooks.has("picobot_tool_call"):
            return self._execute_hooked(call, ctx)
        started, t0 = time.time(), time.perf_counter()
        result = ToolResult(CANCELLED_TOOL_TEXT, is_error=True)  # what a raise leaves behind
        try:
            result = self._execute_hooked(call, ctx)
            return result
        finally:
            record = ToolCallRecord(call.id, call.name, _outcome(result), started, time.perf_counter() - t0)
            self.hooks.call("picobot_tool_call", ctx=self._stage, call=record)

    def _execute_hooked(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        hooks = self.hooks
        if hooks is None or not (hooks.has("before_toolcall") or hooks.has("after_toolcall")):
            return self._run_tool(call, ctx)
        view = ToolCallView(call.id, call.name, _arguments(call.arguments))
        verdict = hooks.before_toolcall(self._stage, view)
        if isinstance(verdict, Deny):
            return ToolResult(f"[denied] {verdict.reason}", is_error=True)
        if isinstance(verdict, dict):  # replaced arguments: validated again by the registry
            call = ToolCall(call.id, call.name, json.dumps(verdict, ensure_ascii=False))
            view = ToolCallView(call.id, call.name, verdict)
        result = self._run_tool(call, ctx)
        text = hooks.after_toolcall(self._stage, view, result.content)
        return result if text == result.content else ToolResult(text, result.is_error, result.images)

    def _run_tool(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        try:
            return self.tools.execute(call, ctx, self.settings.tool_result_max_chars)
        except TurnCancelled:
            return ToolResult(CANCELLED_TOOL_TEXT, is_error=True)
        except Exception as exc:  # the registry already turns tool failures into results
            log.exception("tool %s crashed", call.name)
            return ToolResult(f"Tool {call.name} failed: {type(exc).__name__}", is_error=True)


# Images a tool returned (ToolOutput) reach the model as `media` blocks of its result (providers read the
# file), and the final reply carries the last few as image blocks the web UI shows. The history holds them
# as data URLs, so each is bounded like an upload (about 1 MiB once base64-encoded).
MAX_REPLY_IMAGES = 3
MAX_REPLY_IMAGE_BYTES = 768 * 1024


def _tool_content(res: ToolResult) -> str | list[dict]:
    if not res.images:
        return res.content
    return [{"type": "text", "text": res.content}] + [{"type": "media", "path": p, "mime": _mime(p)}
                                                       for p in res.images]


def _mime(path: str) -> str:
    return "image/jpeg" if path.lower().endswith((".jpg", ".jpeg")) else "image/png"


def with_attachments(message: ChatMessage, images: list[str]) -> ChatMessage:
    """The final answer with the turn's tool images attached (data URLs: the history holds them as uploads)."""
    blocks = []
    for path in images[-MAX_REPLY_IMAGES:]:
        try:
            if os.path.getsize(path) > MAX_REPLY_IMAGE_BYTES:
                continue
            with open(path, "rb") as f:
                data = base64.b64encode(f.read()).decode("ascii")
        except OSError:  # the file is gone: the text answer stands alone
            continue
        # `path`: the workspace file (a channel that sends files, WeChat, sends it from there)
        blocks.append({"type": "image_url", "url": f"data:{_mime(path)};base64,{data}", "path": path})
    if not blocks:
        return message
    return replace(message, content=[{"type": "text", "text": text_of(message.content)}] + blocks)


def _outcome(result: ToolResult) -> str:
    """ok | error | denied | timeout | cancelled, read from the result the model gets."""
    if not result.is_error:
        return "ok"
    head = result.content[:300]
    if head.startswith("[denied]"):
        return "denied"
    if head == CANCELLED_TOOL_TEXT[:300]:
        return "cancelled"
    return "timeout" if "timed out after" in head else "error"


class _CancelledWithResults(TurnCancelled):
    def __init__(self, results: list[ChatMessage]):
        super().__init__("stopped")
        self.results = results


def _arguments(raw: str) -> dict:
    """A call's arguments as a dict for the hooks ({} when they are not a JSON object)."""
    try:
        value = json.loads(raw or "{}")
    except (ValueError, RecursionError):
        return {}
    return value if isinstance(value, dict) else {}


def _response_view(message: ChatMessage, usage: Usage) -> ModelResponse:
    calls = tuple(ToolCallView(c.id, c.name, _arguments(c.arguments)) for c in message.tool_calls)
    return ModelResponse(text_of(message.content), calls, usage.input_tokens or 0, usage.output_tokens or 0)


def trim_tool_results(messages: list[ChatMessage], limit: int) -> list[ChatMessage]:
    out = []
    for m in messages:
        if m.role == "tool" and isinstance(m.content, str) and len(m.content) > limit:
            cut = len(m.content) - limit
            m = ChatMessage(**{**m.__dict__, "content": m.content[:limit] + f"\n[... {cut} characters trimmed]"})
        out.append(m)
    return out


def _provider_error_text(exc: ProviderError) -> str:
    if isinstance(exc, ContextLengthExceeded):
        return "The conversation no longer fits the model's context window. Start a new dialog with /new."
    return f"The model provider failed: {exc}"


def masked_message(message: ChatMessage, secrets: frozenset[str]) -> ChatMessage:
    """The model's message with configured secret values masked, in its text and its tool arguments.

    A prompt-injected model may write a key it was shown into a tool call; masked here, the key is
    never stored, published or handed to the tool.
    """
    if not secrets:
        return message
    content = message.content
    if isinstance(content, str):
        content = replace_secrets(content, secrets)
    calls = [ToolCall(c.id, c.name, replace_secrets(c.arguments, secrets)) for c in message.tool_calls]
    return replace(message, content=content, tool_calls=calls)
