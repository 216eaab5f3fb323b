"""PluginHost: one pluggy manager per process, loading each plugin on its own and calling hooks safely.

Discovery: the built-ins first (always), then, unless `plugins.enabled` is false, every entry point
of the group `picobot.plugins` and every `*.py` in `$PICOBOT_HOME/plugins/`, each loaded and
registered alone: one that fails to import or to register is recorded (`statuses()`) and the
others still load (pluggy's own `load_setuptools_entrypoints` stops at the first failure).

Stage hooks of third-party plugins run in a hook thread with `plugins.hook_timeout_secs`; an
exception, a timeout or a wrong return type is logged with the plugin's name and skipped, except in
`before_toolcall`, where it denies (security plugins fail closed). Built-in plugins run inline, and
so do the contribution and lifecycle calls. With no implementation a stage call costs one dict
lookup: each hook's implementations are cached until a plugin is added or removed.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pluggy

from picobot.errors import TurnCancelled
from picobot.plugins import discovery, hookspecs, values
from picobot.plugins.events import EventBus, check_subscription
from picobot.plugins.discovery import ENTRY_POINT_GROUP  # noqa: F401 (re-exported)
from picobot.plugins.values import CUT_NOTE, MAX_TEXT, clean_text  # noqa: F401 (re-exported)
from picobot.plugins.contributions import ContributionError, ProviderAdapterSpec, check_provider_adapter
from picobot.plugins.decorator import as_tool
from picobot.plugins.types import Command, Deny, ToolCallView
from picobot.threadpool import pool
from picobot.tools.base import Tool

log = logging.getLogger("picobot.plugins")

# the hooks whose calls are also published on the event bus, as these events (picobot/plugins/events.py)
EVENT_OF_HOOK = {"picobot_turn_started": "turn.started", "post_action": "model.round",
                 "picobot_turn_ended": "turn.ended"}

STAGE_HOOKS = ("on_input", "pre_action", "post_action", "before_toolcall", "after_toolcall",
               "before_output", "after_output")


@dataclass
class PluginStatus:
    """What `statuses()` reports of one plugin."""

    name: str
    source: str  # builtin | entry_point | file
    version: str | None = None
    state: str = "active"  # active | disabled | failed
    error: str | None = None
    errors: int = 0
    hooks: list[str] = field(default_factory=list)
    plugin: Any = None

    def as_dict(self) -> dict[str, Any]:
        return {"name": self.name, "source": self.source, "version": self.version, "hooks": list(self.hooks),
                "state": self.state, "error": self.error, "errors": self.errors}


@dataclass(frozen=True)
class _Impl:
    """One hook implementation, with what calling it needs precomputed."""

    function: Callable[..., Any]
    argnames: tuple[str, ...]
    status: PluginStatus
    inline: bool  # a built-in: runs in the caller's thread, no timeout


class HookProblem(Exception):
    """A hook timed out or returned a value its spec does not take."""


class PluginHost:
    def __init__(self, config: Any, builtins: Sequence[tuple[str, Any]] = (), discover: bool = True) -> None:
        self.config = config
        self.pm = pluggy.PluginManager("picobot")
        self.pm.add_hookspecs(hookspecs)
        self._hook_names = tuple(sorted(n for n, c in vars(self.pm.hook).items()
                                        if not n.startswith("_") and c.has_spec()))
        self._records: list[PluginStatus] = []
        self._active: dict[str, PluginStatus] = {}
        self._impls: dict[str, tuple[_Impl, ...]] = {}
        self._contributed: dict[str, list[Any]] = {}
        self._bus: EventBus | None = None
        self._lock = threading.Lock()
        self._pool = pool("plugin-hooks")
        self._closed = False
        for name, plugin in builtins:
            self.register(name, plugin)
        if discover and config.plugins.enabled:
            self._discover()
        self._refresh()

    # ------------------------------------------------------------------ loading

    def register(self, name: str, plugin: Any, source: str = "builtin", version: str | None = None) -> bool:
        """Add a plugin; False (recorded as failed, not registered) when pluggy refuses it."""
        status = PluginStatus(name, source, version or discovery.version_attr(plugin), plugin=plugin)
        try:
            self._validated_register(name, plugin)
        except Exception as exc:  # unknown hook or argument names, a wrapper, a duplicate name
            return self._failed(status, exc)
        status.hooks = sorted(c.name for c in self.pm.get_hookcallers(plugin) or ())
        self._records.append(status)
        self._active[name] = status
        self._refresh()
        return True

    def unregister(self, name: str) -> Any:
        """Remove a plugin by name; returns it (None when there was none)."""
        status = self._active.pop(name, None)
        if status is None:
            return None
        self.pm.unregister(name=name)
        self._records.remove(status)
        self._refresh()
        return status.plugin

    def _validated_register(self, name: str, plugin: Any) -> None:
        self.pm.register(plugin, name=name)
        try:
            self.pm.check_pending()  # only this plugin can be pending: earlier ones passed
            discovery.refuse_wrappers(self.pm, plugin)
        except Exception:
            self.pm.unregister(plugin)
            raise

    def _failed(self, status: PluginStatus, exc: BaseException) -> bool:
        status.state, status.error, status.errors, status.plugin = "failed", values.describe(exc), 1, None
        self._records.append(status)
        log.error("plugin %s (%s) not loaded: %s", status.name, status.source, status.error)
        return False

    def _discover(self) -> None:
        disabled = set(self.config.plugins.disabled)
        for ep in discovery.entry_points():
            self._load(ep.name, "entry_point", ep.load, discovery.dist_version(ep), disabled)
        for path in discovery.home_files(Path(self.config.home) / "plugins"):
            self._load(path.stem, "file", functools.partial(discovery.load_file, path), None, disabled)

    def _load(self, name: str, source: str, load: Callable[[], Any], version: str | None,
              disabled: set[str]) -> None:
        if name in disabled:
            self._records.append(PluginStatus(name, source, version, state="disabled"))
            log.info("plugin %s (%s) disabled by plugins.disabled", name, source)
            return
        try:
            plugin = discovery.instance(load())
        except (Exception, SystemExit) as exc:  # a module body may call sys.exit too
            self._failed(PluginStatus(name, source, version), exc)
            return
        self.register(name, plugin, source, version)

    def _refresh(self) -> None:
        """Recompute each hook's implementations, in pluggy's call order (tryfirst/trylast kept)."""
        impls = {}
        for name in self._hook_names:
            found = [self._impl(i) for i in reversed(getattr(self.pm.hook, name).get_hookimpls())]
            impls[name] = tuple(i for i in found if i is not None)
        self._impls = impls  # one assignment: a caller in another thread sees the old or the new
        self._contributed = {}
        self._bus = None

    def _impl(self, impl: Any) -> _Impl | None:
        status = self._active.get(impl.plugin_name)
        if status is None:
            return None
        return _Impl(impl.function, tuple(impl.argnames), status, status.source == "builtin")

    # ------------------------------------------------------------------ state

    def plugin(self, name: str) -> Any:
        """A registered plugin object by name (the composition root reaches the built-ins this way)."""
        status = self._active.get(name)
        if status is None:
            raise KeyError(f"no active plugin named {name!r}")
        return status.plugin

    def source_of(self, name: str) -> str | None:
        """How an active plugin was loaded (builtin | entry_point | file); None when none by that name is."""
        status = self._active.get(name)
        return None if status is None else status.source

    def statuses(self) -> list[dict[str, Any]]:
        """Every plugin seen: name, source, version, hooks, state, error (the last one), errors."""
        with self._lock:
            return [s.as_dict() for s in self._records]

    def report(self, name: str, hook: str, problem: str) -> None:
        """Record a problem with what a plugin contributed, found by the part that uses it (a route whose
        path is taken): shown with the plugin in statuses() and /health, like a hook's own failure."""
        status = self._active.get(name)
        if status is None:
            log.error("plugin %s: %s: %s", name, hook, problem)
            return
        with self._lock:
            status.error = f"{hook}: {problem}"[:values.ERROR_CHARS]
            status.errors += 1
        log.error("plugin %s: %s: %s", name, hook, problem)

    def has(self, hook_name: str) -> bool:
        """True when any active plugin implements the hook (or subscribes to the event its calls publish)."""
        if self._impls.get(hook_name):
            return True
        event = EVENT_OF_HOOK.get(hook_name)
        return event is not None and self.events.has(event)

    @property
    def events(self) -> EventBus:
        """The process's event bus, with every plugin's subscriptions (built on first use)."""
        bus = self._bus
        if bus is None:
            subscriptions = self.contributions("picobot_subscriptions", check_subscription)  # may report: no lock held
            with self._lock:
                if self._bus is None:
                    self._bus = EventBus(subscriptions, self.report)
                bus = self._bus
        return bus

    def publish(self, event: str, **payload: Any) -> None:
        """Publish an event to its subscribers (never waits for them)."""
        self.events.publish(event, payload)

    def close(self) -> None:
        """Tell every plugin the process is shutting down (once)."""
        if not self._closed:
            self._closed = True
            self.call("picobot_close")
            if self._bus is not None:
                self._bus.close()

    # ------------------------------------------------------------------ calling one implementation

    def _run(self, impl: _Impl, kwargs: dict[str, Any], isolate: bool = True) -> Any:
        """Call one implementation with the arguments it names; raises what it raised, or HookProblem."""
        args = {name: kwargs[name] for name in impl.argnames}
        if impl.inline or not isolate:
            return impl.function(**args)
        return self._isolated(impl.function, args)

    def _isolated(self, function: Callable[..., Any], args: dict[str, Any]) -> Any:
        timeout = self.config.plugins.hook_timeout_secs
        done = threading.Lock()  # an Event's job, at half its cost: the hook thread releases it when done
        done.acquire()
        box: list[Any] = []

        def job() -> None:
            try:
                box.append((True, function(**args)))
            except BaseException as exc:  # handed to the caller's thread
                box.append((False, exc))
            finally:
                done.release()

        self._pool.submit(job)
        if not done.acquire(timeout=timeout):  # the thread runs on; its result is dropped
            raise HookProblem(f"timed out after {timeout:g}s (plugins.hook_timeout_secs)")
        ok, value = box[0]
        if ok:
            return value
        raise value if isinstance(value, Exception) else HookProblem(f"raised {type(value).__name__}")

    def _value(self, impl: _Impl, hook: str, kwargs: dict[str, Any], check: Callable[[Any], bool],
               isolate: bool = True) -> Any:
        """The implementation's result, or None when it raised or returned a value `check` refuses."""
        try:
            value = self._run(impl, kwargs, isolate)
        except TurnCancelled:
            raise  # the turn stopping is not the plugin's failure
        except Exception as exc:
            self._fault(impl, hook, exc)
            return None
        if value is not None and not check(value):
            self._fault(impl, hook, HookProblem(f"returned {type(value).__name__}, which {hook} does not take"))
            return None
        return value

    def _fault(self, impl: _Impl, hook: str, exc: BaseException) -> None:
        status = impl.status
        with self._lock:
            status.error = f"{hook}: {values.describe(exc)}"[:values.ERROR_CHARS]
            status.errors += 1
        log.error("plugin %s: %s failed: %s", status.name, hook, values.describe(exc),
                  exc_info=None if isinstance(exc, HookProblem) else exc)

    # ------------------------------------------------------------------ stage hooks

    def on_input(self, ctx: Any, message: Any) -> str | None:
        """The first plugin's answer to the input (the turn then makes no model call), or None."""
        impls = self._impls["on_input"]
        if not impls:
            return None
        kwargs = {"ctx": ctx, "message": message}
        for impl in impls:
            answer = self._value(impl, "on_input", kwargs, values.is_str)
            if answer is not None:
                return values.clean_text(answer)
        return None

    def pre_action(self, ctx: Any, messages: Any) -> list[str]:
        """Every plugin's extra system notes for this model call, in call order."""
        impls = self._impls["pre_action"]
        if not impls:
            return []
        kwargs = {"ctx": ctx, "messages": messages}
        notes: list[str] = []
        for impl in impls:
            value = self._value(impl, "pre_action", kwargs, values.is_notes)
            notes += [values.clean_text(n) for n in ([value] if isinstance(value, str) else value or ()) if n]
        return notes

    def post_action(self, ctx: Any, response: Any) -> None:
        """Tell the plugins of a model response (and publish it as `model.round`)."""
        if self._impls["post_action"]:
            self._notify("post_action", {"ctx": ctx, "response": response})
        if self.events.has("model.round"):
            self.events.publish("model.round", {
                **_turn_fields(ctx), "text": response.text, "input_tokens": response.input_tokens,
                "output_tokens": response.output_tokens,
                "tool_calls": [{"name": c.name, "arguments": c.arguments} for c in response.tool_calls]})

    def before_toolcall(self, ctx: Any, call: ToolCallView) -> Deny | dict[str, Any] | None:
        """A Deny, the replaced arguments, or None. An exception, a timeout or a wrong type denies."""
        impls = self._impls["before_toolcall"]
        if not impls:
            return None
        replaced: dict[str, Any] | None = None
        for impl in impls:
            view = call if replaced is None else ToolCallView(call.id, call.name, replaced)
            verdict = self._verdict(impl, ctx, view)
            if isinstance(verdict, Deny):
                return verdict
            if verdict is not None:
                replaced = verdict
        return replaced

    def _verdict(self, impl: _Impl, ctx: Any, call: ToolCallView) -> Deny | dict[str, Any] | None:
        try:
            value = self._run(impl, {"ctx": ctx, "call": call})
        except TurnCancelled:
            raise
        except Exception as exc:
            self._fault(impl, "before_toolcall", exc)
            return Deny(f"the plugin {impl.status.name} failed while checking this call, so it was not run")
        if value is None:
            return None
        if isinstance(value, Deny):
            return Deny(values.clean_text(value.reason if isinstance(value.reason, str) else str(value.reason)))
        if isinstance(value, dict) and values.json_object(value):
            return values.repaired(value)
        self._fault(impl, "before_toolcall", HookProblem(f"returned {type(value).__name__}, not a Deny, "
                                                         "a JSON object or None"))
        return Deny(f"the plugin {impl.status.name} gave an answer PicoBot cannot read, so the call was not run")

    def after_toolcall(self, ctx: Any, call: ToolCallView, result: str) -> str:
        """The tool's result, as the plugins replaced it (each sees the latest)."""
        if not self._impls["after_toolcall"]:
            return result
        return self._chain("after_toolcall", {"ctx": ctx, "call": call}, "result", result)

    def before_output(self, ctx: Any, text: str) -> str:
        """The final answer, as the plugins replaced it (each sees the latest)."""
        if not self._impls["before_output"]:
            return text
        return self._chain("before_output", {"ctx": ctx}, "text", text)

    def after_output(self, ctx: Any, turn: Any) -> None:
        """Tell the plugins a turn was committed."""
        if self._impls["after_output"]:
            self._notify("after_output", {"ctx": ctx, "turn": turn})

    def _chain(self, hook: str, kwargs: dict[str, Any], key: str, value: str) -> str:
        for impl in self._impls[hook]:
            replaced = self._value(impl, hook, {**kwargs, key: value}, values.is_str)
            if replaced is not None:
                value = values.clean_text(replaced)
        return value

    def _notify(self, hook: str, kwargs: dict[str, Any]) -> None:
        for impl in self._impls[hook]:
            self._value(impl, hook, kwargs, values.anything)

    # ------------------------------------------------------------------ contributions

    def tools(self, config: Any, ports: Any) -> list[Tool]:
        """Every plugin's tools (`Tool` objects; functions become tools); on a name taken, the first stays."""
        found: dict[str, Tool] = {}
        for impl, item in self._offered("picobot_tools", {"config": config, "ports": ports}):
            made = self._tool(impl, item)
            if made is not None and made.name in found:
                log.warning("plugin %s: a tool named %s is already offered; the first one stays",
                            impl.status.name, made.name)
            elif made is not None:
                found[made.name] = made
        return list(found.values())

    def _tool(self, impl: _Impl, item: Any) -> Tool | None:
        try:
            return as_tool(item)
        except TypeError as exc:  # not a tool, or a function whose types have no JSON schema
            self._fault(impl, "picobot_tools", exc)
            return None

    def commands(self, config: Any, ports: Any) -> dict[str, Command]:
        """Slash commands by name (lower-case, no "/"); on a name taken, the first stays."""
        found: dict[str, Command] = {}
        for impl, item in self._offered("picobot_commands", {"config": config, "ports": ports}):
            name = values.command_name(item)
            if name is None:
                self._fault(impl, "picobot_commands", HookProblem(f"offered {values.what(item)}, not a Command"))
            elif name in found:
                log.warning("plugin %s: command /%s is already taken; the first one stays", impl.status.name, name)
            else:
                found[name] = dataclasses.replace(item, name=name)
        return found

    def channels(self, config: Any) -> dict[str, Any]:
        """Channel adapter types by `type` name; on a name taken, the first stays."""
        return {name: adapter for name, (_plugin, adapter) in self._channel_offers(config).items()}

    def channel_owners(self, config: Any) -> dict[str, str]:
        """The name of the plugin offering each channel type (the one `channels` keeps)."""
        return {name: plugin for name, (plugin, _adapter) in self._channel_offers(config).items()}

    def _channel_offers(self, config: Any) -> dict[str, tuple[str, Any]]:
        found: dict[str, tuple[str, Any]] = {}
        for impl, value in self._results("picobot_channels", {"config": config}, values.is_dict):
            for name, adapter in value.items():
                if name in found:
                    log.warning("plugin %s: channel type %s is already taken; the first one stays",
                                impl.status.name, name)
                else:
                    found[name] = (impl.status.name, adapter)
        return found

    def provider_adapters(self) -> dict[str, Any]:
        """The plugins' provider types (`picobot_providers`) by name, ProviderAdapterSpec each; on a name
        taken, the first stays and the other is reported against its plugin."""
        taken: set[str] = set()

        def check(plugin: str, *args: Any, **kwargs: Any) -> ProviderAdapterSpec:
            spec = check_provider_adapter(plugin, *args, **kwargs)
            if spec.name in taken:
                raise ContributionError(f"provider type {spec.name} is already another plugin's; the first stays")
            taken.add(spec.name)
            return spec

        return {spec.name: spec for spec in self.contributions("picobot_providers", check)}

    def config_problems(self, config: Any) -> list[tuple[str, str]]:
        """Every (key path, why) problem the plugins find in their part of the config."""
        found: list[tuple[str, str]] = []
        for impl, value in self._results("picobot_config_check", {"config": config}, values.is_list):
            for item in value:
                if values.is_problem(item):
                    found.append((item[0], item[1]))
                else:
                    self._fault(impl, "picobot_config_check", HookProblem(f"offered {values.what(item)}, "
                                                                          "not a (key path, why) pair"))
        return found

    def contributions(self, hook: str, check: Callable[..., Any]) -> list[Any]:
        """What every plugin registers through a `register` hook (picobot_routes, picobot_tasks, …), each
        item made by `check(plugin_name, *args, **kwargs)`. A refused item (check raised) or a hook that
        raised is recorded against its plugin and skipped; the others stand. Cached per hook."""
        cached = self._contributed.get(hook)
        if cached is not None:
            return cached
        found: list[Any] = []
        for impl in self._impls[hook]:
            def register(*args: Any, _impl: _Impl = impl, **kwargs: Any) -> None:
                try:
                    found.append(check(_impl.status.name, *args, **kwargs))
                except (ValueError, TypeError) as exc:  # ContributionError, or arguments check cannot take
                    self._fault(_impl, hook, HookProblem(str(exc)))

            # the callback by either name: `register` (contributions) or `subscribe` (the event bus)
            self._value(impl, hook, {"register": register, "subscribe": register, "config": self.config}, values.anything,
                        isolate=False)
        self._contributed[hook] = found
        return found

    def _offered(self, hook: str, kwargs: dict[str, Any]) -> Iterator[tuple[_Impl, Any]]:
        """(implementation, item) for each item of each implementation's list."""
        for impl, value in self._results(hook, kwargs, values.is_list):
            for item in value:
                yield impl, item

    def _results(self, hook: str, kwargs: dict[str, Any], check: Callable[[Any], bool]) -> Iterator[tuple[_Impl, Any]]:
        """(implementation, result) of each one that gave a result; inline, no timeout, whoever the plugin."""
        for impl in self._impls[hook]:
            value = self._value(impl, hook, kwargs, check, isolate=False)
            if value is not None:
                yield impl, value

    # ------------------------------------------------------------------ lifecycle (the core's calls)

    def call(self, hook_name: str, **kwargs: Any) -> list[Any]:
        """Every implementation's non-None result, in call order; failures logged and skipped."""
        event = EVENT_OF_HOOK.get(hook_name)
        if event is not None and self.events.has(event):
            fields = _turn_fields(kwargs.get("ctx"))
            self.events.publish(event, {**fields, "status": kwargs["status"]} if "status" in kwargs else fields)
        if not self._lifecycle(hook_name):
            return []
        return [value for _impl, value in self._results(hook_name, kwargs, values.anything)]

    def first(self, hook_name: str, **kwargs: Any) -> Any:
        """The first non-None result (the rest are not called), or None."""
        if self._lifecycle(hook_name):
            for _impl, value in self._results(hook_name, kwargs, values.anything):
                return value
        return None

    def _lifecycle(self, hook_name: str) -> tuple[_Impl, ...]:
        impls = self._impls.get(hook_name)
        if impls is None:
            raise ValueError(f"no hook named {hook_name!r} (see picobot/plugins/hookspecs.py)")
        return impls


def _turn_fields(ctx: Any) -> dict[str, Any]:
    """Who a turn is for, as an event's fields (a StageContext's)."""
    return {name: getattr(ctx, name, "") for name in ("session_id", "turn_id", "channel", "chat_id", "sender_id",
                                                        "agent")}
