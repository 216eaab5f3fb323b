"""The hooks PicoBot calls. A plugin implements any of them with `@hookimpl`.

pluggy passes arguments by name: an implementation may take any subset of a hook's arguments,
and hooks may gain arguments later without breaking a plugin.

Stage hooks (one turn, in order): on_input, pre_action, post_action, before_toolcall,
after_toolcall, before_output, after_output. Contribution hooks: picobot_tools,
picobot_commands, picobot_channels. Lifecycle hooks: what the core tells the capabilities
instead of importing them (a turn committed, a turn finished, a sweep, health, start and close).
"""

from __future__ import annotations

from typing import Any

import pluggy

hookspec = pluggy.HookspecMarker("picobot")

# ---------------------------------------------------------------- stage hooks


@hookspec
def on_input(ctx, message) -> str | None:
    """A turn's input arrived (`message.text`). Return a string to end the turn with it as the
    answer: no model call; it is stored and delivered like any answer."""


@hookspec
def pre_action(ctx, messages) -> str | list[str] | None:
    """Before each model call (`messages`: what will be sent). Return extra system notes
    (sent with this call only, never stored)."""


@hookspec
def post_action(ctx, response) -> None:
    """After each model response (`response.text`, `response.tool_calls`)."""


@hookspec
def before_toolcall(ctx, call) -> Any:
    """Before a tool runs (`call.name`, `call.arguments`). Return `Deny("why")` to refuse it (the
    model gets the reason as the result), a dict to replace the arguments (validated again), or
    None. An exception or a timeout here denies the call: security plugins live here."""


@hookspec
def after_toolcall(ctx, call, result) -> str | None:
    """After a tool ran (`result`: its text). Return a string to replace the result."""


@hookspec
def before_output(ctx, text) -> str | None:
    """The final answer before it is stored and delivered. Return a string to replace it."""


@hookspec
def after_output(ctx, turn) -> None:
    """After the turn was committed (`turn.session_id`, `turn.status`, `turn.final_text`)."""


# ---------------------------------------------------------------- contributions


@hookspec
def picobot_tools(config, ports) -> list[Any] | None:
    """Tools to offer the model: `Tool` objects or `@tool`-decorated functions."""


@hookspec
def picobot_commands(config, ports) -> list[Any] | None:
    """Slash commands: `picobot.plugins.Command` objects."""


@hookspec
def picobot_channels(config) -> dict[str, Any] | None:
    """Channel adapter types by their `type` name (see picobot/channels/base.py)."""


@hookspec
def picobot_config_check(config) -> list[tuple[str, str]] | None:
    """Problems in the config this plugin owns, as (key path, why) pairs; start fails on any."""


# ---------------------------------------------------------------- contributions by `register`
# Each takes a `register` callback and returns nothing; what it registers is checked by
# picobot/plugins/contributions.py, and a refused item is recorded against the plugin.


@hookspec
def picobot_routes(register, config) -> None:
    """HTTP and WebSocket routes: `register(method, path, handler, websocket=False, max_body_bytes=1 MiB)`.
    HTTP: `handler(request: HttpRequest, ports) -> HttpResponse | (status, headers, body)`; WebSocket:
    `handler(socket, request, ports)`, the socket's `receive(timeout)`, `send(data)`, `close()`. Routes are
    outside the pairing guard: a platform proves itself with its own token or signature. `config` (take it
    only if needed): the process's Config, for paths an operator configures; called once per web process."""


@hookspec
def picobot_tasks(register) -> None:
    """Celery tasks: `register(name, function, queue="maintenance")`, `function(ports, *args)`; sent with
    `ports.send_task(name, *args)`. Names are namespaced (`<plugin>.<what>`)."""


@hookspec
def picobot_processes(register) -> None:
    """Long-running parts: `register(name, run, instances=None)`. `run(ctx)` until `ctx.stopping` is set;
    `instances(config)`: the names to run it for (None: one, "main"). Run by `picobot up`, the Procfile or
    `picobot run <plugin>:<name>[:<instance>]`, restarted with backoff when they end or raise."""


@hookspec
def picobot_beat(register, config) -> None:
    """Periodic tasks for beat: `register(name, task, every=secs | cron="m h dom mon dow", queue="maintenance",
    expires=None, args=())`, run by the one beat process (in `time.timezone`)."""


@hookspec
def picobot_pages(register) -> None:
    """Web UI pages: `register(page_id, title, script, icon="tool", group="manage")`. `script`: the path of an ES
    module file exporting `createPage(ctx)` -> {el, show(), hide()}; served to paired browsers, linked in the
    navigation (group "main" above the dialogs, "manage" in the management section)."""


@hookspec
def picobot_cli(register) -> None:
    """CLI commands: `register(name, command)`, a click command or group, or `fn(argv) -> exit code`;
    run as `picobot <name> ...`."""


@hookspec
def picobot_settings(register) -> None:
    """Settings: `register(key, model)`, a pydantic model for `plugins.settings.<key>`, checked at start
    (errors name the key path); read with `ports.settings(key)`."""


@hookspec
def picobot_providers(register) -> None:
    """Provider types for `providers.<key>.type`: `register(type_name, adapter)`, the adapter's
    `transform_request(body) -> body` (an OpenAI Chat Completions request to the API's), `transform_response(body)
    -> chat.completion`, `transform_stream_chunk(event) -> chat.completion.chunk | None`, optional `path`
    (default "/chat/completions") and `headers(api_key) -> dict` (picobot/providers/adapted.py)."""


@hookspec
def picobot_subscriptions(subscribe) -> None:
    """The event bus: `subscribe(event, fn)`, `fn(event_dict)` called on the bus's own thread, never in a turn
    (picobot/plugins/events.py: turn.started, model.round, turn.ended, message.delivered)."""


# ---------------------------------------------------------------- lifecycle (the core's calls)


@hookspec
def picobot_started(ports, registry) -> None:
    """The process's tool registry is built (`registry`); start background parts (MCP clients)."""


@hookspec
def picobot_turn_notes(ctx, turn_input, ports) -> list[Any] | None:
    """Runtime notes (ChatMessages, never stored) sent after the history, before the turn's input:
    recalled memories."""


@hookspec
def picobot_prompt_index(ports, registry, skills) -> str | None:
    """Text added to the runtime note of every model call (the skill index). `registry`: the running
    agent's tools; `skills`: its skill allowlist (None = every skill)."""


@hookspec(firstresult=True)
def picobot_context_overflow(ctx, error, ports, cancel) -> list[Any] | None:
    """The model said the turn does not fit: compact the stored history now and return it, or None."""


@hookspec
def picobot_turn_committed(conn, turn, ports) -> Any:
    """Inside the transaction that commits a turn (also a failed input given up on): record what
    must be atomic with it (an outbox row). May return a callable to run after the commit."""


@hookspec
def picobot_turn_finished(turn, ports) -> None:
    """After a turn's outcome is stored and published: bookkeeping (job runs, compaction)."""


@hookspec
def picobot_outbox_message(conn, channel, chat_id, text, kind, key, session_id, ports, buttons) -> Any:
    """A message for an external chat outside a turn's answer (`send_session_message`, a job's
    message, a notice), inside the transaction that records it. `buttons`: (label, slash command)
    pairs a channel that has buttons shows under the message (a Telegram inline keyboard); pressing
    one sends that command as the presser; the text names the commands for channels without. Return
    a callable to run after the commit when this plugin took it (its channel), else None."""


@hookspec(firstresult=True)
def picobot_internal_event(name, payload, ports) -> bool | None:
    """A scheduled `internal_event` job fired (`name`: payload.event). Return True when handled."""


@hookspec
def picobot_history_prefix(ctx, history, compacted, ports) -> list[Any] | None:
    """Runtime notes sent before a turn's stored history (a compacted dialog's previous context)."""


@hookspec(firstresult=True)
def picobot_transcribe(ctx, audio, ports, cancel) -> Any:
    """A turn's input holds a voice message (`audio`: an AudioClip). In the worker, before the turn: return a
    `Transcript` with `text` (it replaces the audio in the stored input) or `error` (the turn answers it, no
    model call). None: not this plugin's to hear. `cancel`: the turn's CancelToken (/stop), or None."""


@hookspec(firstresult=True)
def picobot_speech(text, ports) -> Any:
    """Speak an answer to a user who spoke: return an AudioClip (format `opus` when it is Ogg Opus), a string
    saying why it failed now (a delivery retries), or None (no speech configured)."""


@hookspec
def picobot_session_state(session_id, ports) -> list[dict[str, Any]] | None:
    """Frames for a socket that starts watching a dialog, sent right after its `ready` or `session`
    frame: this plugin's state of the dialog (its plan). Called in the web process."""


@hookspec
def picobot_subagent_run(run, ports) -> None:
    """A sub-agent run was admitted (`run.status` queued or running) or ended (completed, failed,
    cancelled, interrupted). `run`: a SubagentRunView (id, session_id, status, text, plan_item_id)."""


@hookspec
def picobot_session_stopped(session_id, ports) -> None:
    """`/stop` in a dialog: stop what this plugin runs for it (sub-agent runs)."""


@hookspec
def picobot_sweep(ports) -> None:
    """The sweeper's tick: recover this plugin's lost work (deliveries, events, runs)."""


@hookspec
def picobot_health(ports) -> dict[str, Any] | None:
    """Entries for `/health`, by name."""


@hookspec
def picobot_close() -> None:
    """The process is shutting down: stop threads, close connections."""


# ---------------------------------------------------------------- observation (metrics, traces)
# Called only when some plugin implements them (PluginHost.has), so they cost nothing otherwise.


@hookspec
def picobot_input_received(ctx, ports) -> Any:
    """The gateway starts storing an input (`ctx.session_id` and `ctx.turn_id` empty): in the web process,
    or for a platform channel (Telegram, WeChat, Feishu) in the worker's channel-event task.
    May return a callable `done(session_id, fate)`, called once in the same thread when the input was
    stored and its turn enqueued, or refused (a trace's intake span lives between the two)."""


@hookspec
def picobot_turn_started(ctx, queued_at) -> None:
    """A worker starts a turn (`queued_at`: epoch seconds its first input was stored, or None).
    `picobot_turn_ended` follows in the same thread, whatever happens to the turn."""


@hookspec
def picobot_turn_ended(ctx, status) -> None:
    """The turn is over: completed, cancelled, failed or interrupted (not stored; its input runs again)."""


@hookspec(firstresult=True)
def picobot_model_call_gate(ctx, request) -> Any:
    """Before each model call (`request`: a ModelRequestView). Return a `Refusal` to not send it: the
    turn (or sub-agent run) ends with the refusal's status and message. A built-in (budgets) runs
    inline; `picobot_model_call` follows every call this let through, in the same thread."""


@hookspec
def picobot_model_call(ctx, call) -> None:
    """A model call ended (`call`: a ModelCallView: provider, model, times, tokens, finish reason or error, and
    `kind`: `turn`, or `title` for a dialog's background title call, whose `ctx` has no turn_id)."""


@hookspec
def picobot_tool_call(ctx, call) -> None:
    """A tool call ended (`call`: a ToolCallRecord: name, outcome ok/error/denied/timeout/cancelled, times).
    Called in the tool's own thread."""


@hookspec
def picobot_heartbeat(ports) -> None:
    """A worker's heartbeat tick (every 2 s, on the heartbeat thread): publish live state (metric samples)."""


@hookspec
def picobot_session_info(session_id, ports) -> dict[str, Any] | None:
    """Extra fields for `/info` of a dialog (web process), by name; shown as `name: value` lines."""
