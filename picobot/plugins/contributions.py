"""What a plugin contributes through the `register` hooks: HTTP and WebSocket routes, Celery tasks,
long-running processes, CLI commands, settings models and provider adapters.

Each contribution hook takes one argument, `register`, a callback (datasette's `register_routes`,
simonw/llm's `register_models(register)`): the plugin calls it once per thing it brings, and never
sees the application. What it registers is checked here; a bad one (a path that is not a path, a
task name another plugin took, a handler that is not callable) is refused with a reason, recorded
against the plugin (`/health`, `picobot plugins`), and the rest of PicoBot carries on.

    @hookimpl
    def picobot_routes(register):
        register("POST", "/qq/<channel>", on_event)            # on_event(request, ports) -> HttpResponse
        register("GET", "/qq/ws/<channel>", on_socket, websocket=True)  # on_socket(socket, request, ports)

    @hookimpl
    def picobot_tasks(register):
        register("qq.fetch", fetch_media, queue="outbound")   # fetch_media(ports, *args)

    @hookimpl
    def picobot_processes(register):
        register("connection", run, instances=forward_channels)  # run(ctx); instances(config) -> [names]

    @hookimpl
    def picobot_cli(register):
        register("qq", click_group)                            # `picobot qq ...`

    @hookimpl
    def picobot_settings(register):
        register("qq", QQSettings)                            # plugins.settings.qq, checked at start

    @hookimpl
    def picobot_providers(register):
        register("echo-api", EchoAdapter())                   # providers.<key>.type: "echo-api"
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from picobot.providers import PROVIDER_TYPES

# a route path: segments of letters, digits and -._~, or a <name> / <converter:name> part (werkzeug's syntax)
_PATH = re.compile(r"^/(?:(?:[A-Za-z0-9\-._~]+|<(?:(?:int|string|path):)?[A-Za-z_]\w*>)/?)*$")
_TASK_NAME = re.compile(r"^[a-z][a-z0-9_]*(?:[.:-][a-z0-9_]+)+$")  # namespaced: "<plugin>.<what>"
_NAME = re.compile(r"^[a-z][a-z0-9_-]{0,39}$")
METHODS = frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"})
KERNEL_PATH_PREFIXES = ("/ws", "/api", "/v1", "/health", "/metrics", "/hooks", "/static", "/assets", "/pair",
                        "/plugin-pages")
TASK_QUEUES = frozenset({"maintenance", "outbound", "scheduled", "subagents"})  # never "turns": a turn's slot is a turn's
MAX_BODY_BYTES = 1024 * 1024


class ContributionError(ValueError):
    """A plugin registered something PicoBot cannot take; the message says what and why."""


@dataclass(frozen=True)
class HttpRequest:
    """A request to a plugin's route, framework-neutral. `headers` have lower-case names."""

    method: str
    path: str
    params: Mapping[str, str] = field(default_factory=dict)  # the route's <name> parts
    query: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)
    body: bytes = b""
    remote_addr: str = ""

    def json(self) -> Any:
        """The body as JSON; ValueError (with the reason) for anything else, deep nesting included."""
        try:
            return json.loads(self.body)
        except RecursionError as exc:
            raise ValueError("the JSON nests too deep") from exc
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(f"the body is not JSON ({exc})") from exc


@dataclass(frozen=True)
class HttpResponse:
    """A plugin route's answer. `body`: bytes, text, or a JSON value (dict, list) sent as application/json."""

    status: int = 200
    body: Any = b""
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def json(cls, value: Any, status: int = 200) -> "HttpResponse":
        return cls(status, value, {"Content-Type": "application/json"})

    def encoded(self) -> tuple[int, dict[str, str], bytes]:
        """(status, headers, body bytes) — JSON bodies encoded, text as UTF-8 (lone surrogates escaped)."""
        headers = {str(k): str(v) for k, v in self.headers.items()}
        body = self.body
        if isinstance(body, (dict, list)):
            body = json.dumps(body, ensure_ascii=True, allow_nan=False, default=str).encode()
            headers.setdefault("Content-Type", "application/json")
        elif isinstance(body, str):
            body = body.encode("utf-8", "backslashreplace")
            headers.setdefault("Content-Type", "text/plain; charset=utf-8")
        elif body is None:
            body = b""
        if not isinstance(body, (bytes, bytearray)):
            raise ContributionError(f"a route answered a body of type {type(body).__name__}")
        status = self.status
        if not isinstance(status, int) or isinstance(status, bool) or not 100 <= status <= 599:
            raise ContributionError(f"a route answered the status {status!r}")
        return status, headers, bytes(body)


def as_response(value: Any) -> HttpResponse:
    """A handler's result: an HttpResponse, a (status, headers, body) tuple or (status, body), or a JSON value."""
    if isinstance(value, HttpResponse):
        return value
    if isinstance(value, tuple) and len(value) == 3:
        return HttpResponse(value[0], value[2], dict(value[1] or {}))
    if isinstance(value, tuple) and len(value) == 2:
        return HttpResponse(value[0], value[1])
    if value is None:
        return HttpResponse(204)
    return HttpResponse(200, value)


@dataclass(frozen=True)
class Route:
    plugin: str
    method: str
    path: str
    handler: Callable[..., Any]
    websocket: bool = False
    max_body_bytes: int = MAX_BODY_BYTES


@dataclass(frozen=True)
class TaskSpec:
    plugin: str
    name: str
    function: Callable[..., Any]
    queue: str = "maintenance"


@dataclass(frozen=True)
class ProcessSpec:
    """A long-running part (a platform's long connection): `run(ctx)` until `ctx.stopping` is set.

    `instances(config)`: the names to run it for (a channel key each); None: one instance, named "main"."""

    plugin: str
    name: str
    run: Callable[..., Any]
    instances: Callable[[Any], list[str]] | None = None

    def instance_names(self, config: Any) -> list[str]:
        if self.instances is None:
            return ["main"]
        names = self.instances(config)
        if not isinstance(names, (list, tuple)) or not all(isinstance(n, str) and _INSTANCE.match(n) for n in names):
            raise ContributionError(f"process {self.plugin}:{self.name}: instances() gave {names!r}, "
                                    "not a list of names")
        return list(names)


_INSTANCE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")


@dataclass(frozen=True)
class CliCommand:
    plugin: str
    name: str
    command: Any  # a click command or group, or a callable taking the argument list and returning an exit code


@dataclass(frozen=True)
class SettingsSpec:
    plugin: str
    key: str  # under plugins.settings
    model: Any  # a pydantic model class


@dataclass(frozen=True)
class ProviderAdapterSpec:
    """A provider type a plugin brings: `name` for `providers.<key>.type`, `adapter` a ProviderAdapter."""

    plugin: str
    name: str
    adapter: Any


def check_route(plugin: str, method: Any, path: Any, handler: Any, websocket: bool = False,
                max_body_bytes: int = MAX_BODY_BYTES) -> Route:
    method = method.upper() if isinstance(method, str) else method
    if not isinstance(method, str) or method not in METHODS:
        raise ContributionError(f"route {path!r}: method {method!r} is not one of {', '.join(sorted(METHODS))}")
    if (not isinstance(path, str) or len(path) > 200 or not _PATH.match(path)
            or any(part in (".", "..") for part in path.split("/"))):
        raise ContributionError(f"route {str(path)[:80]!r} is not a path like /name/<param>")
    if any(path == p or path.startswith(p + "/") for p in KERNEL_PATH_PREFIXES) or path == "/":
        raise ContributionError(f"route {path}: the path belongs to PicoBot itself")
    if not callable(handler):
        raise ContributionError(f"route {path}: the handler is not callable")
    if websocket and method != "GET":
        raise ContributionError(f"route {path}: a WebSocket route is a GET")
    if not isinstance(max_body_bytes, int) or not 0 < max_body_bytes <= 64 * MAX_BODY_BYTES:
        raise ContributionError(f"route {path}: max_body_bytes must be from 1 to {64 * MAX_BODY_BYTES}")
    return Route(plugin, method, path, handler, bool(websocket), max_body_bytes)


def check_task(plugin: str, name: Any, function: Any, queue: str = "maintenance") -> TaskSpec:
    if not isinstance(name, str) or not _TASK_NAME.match(name):
        raise ContributionError(f"task name {str(name)[:80]!r} must be namespaced like '{plugin}.<what>' (lower case)")
    if not callable(function):
        raise ContributionError(f"task {name}: the function is not callable")
    if not isinstance(queue, str) or queue not in TASK_QUEUES:
        raise ContributionError(f"task {name}: queue {queue!r} is not one of {', '.join(sorted(TASK_QUEUES))}")
    return TaskSpec(plugin, name, function, queue)


@dataclass(frozen=True)
class PageSpec:
    plugin: str
    page_id: str
    title: str
    script: str  # an absolute path to the page's ES module
    icon: str = "tool"
    group: str = "manage"

    @property
    def route(self) -> str:
        """The page's id in the web UI's hash route (#/<route>): the plugin's name and the page's, so no
        plugin's page can take a built-in page's place (those have no dash)."""
        return f"{self.plugin}-{self.page_id}"


PAGE_ICONS = frozenset({"chat", "pulse", "sliders", "devices", "copy", "book", "send", "tool", "brain", "clock", "bars"})
MAX_PAGE_SCRIPT_BYTES = 512 * 1024
_PLUGIN_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,39}$")


def check_page(plugin: str, page_id: Any, title: Any, script: Any, icon: Any = "tool", group: Any = "manage") -> PageSpec:
    from pathlib import Path

    if not _PLUGIN_NAME.match(plugin or ""):
        raise ContributionError(f"plugin name {plugin[:40]!r} cannot name a page (lower case letters, digits, - or _)")
    if not isinstance(page_id, str) or not _NAME.match(page_id):
        raise ContributionError(f"page id {str(page_id)[:80]!r} must be lower case letters, digits, - or _")
    if not isinstance(title, str) or not title.strip() or len(title) > 40 or not title.isprintable():
        raise ContributionError(f"page {page_id}: the title must be 1 to 40 printable characters")
    if group not in ("main", "manage"):
        raise ContributionError(f"page {page_id}: group must be main or manage")
    if not isinstance(script, (str, Path)):
        raise ContributionError(f"page {page_id}: script must be the path of a .js file")
    path = Path(script)
    try:
        ok = path.is_absolute() and path.suffix == ".js" and path.is_file() and path.stat().st_size <= MAX_PAGE_SCRIPT_BYTES
    except (OSError, ValueError):
        ok = False
    if not ok:
        raise ContributionError(f"page {page_id}: script {str(script)[:120]!r} is not an absolute path to a .js file "
                                f"of at most {MAX_PAGE_SCRIPT_BYTES // 1024} KiB")
    return PageSpec(plugin, page_id, title.strip(), str(path), icon if isinstance(icon, str) and icon in PAGE_ICONS else "tool", group)


@dataclass(frozen=True)
class BeatEntry:
    plugin: str
    name: str
    task: str
    every: float | None = None
    cron: str | None = None
    queue: str = "maintenance"
    expires: float | None = None
    args: tuple[Any, ...] = ()


def check_beat(plugin: str, name: Any, task: Any, every: Any = None, cron: Any = None, queue: str = "maintenance",
               expires: Any = None, args: Any = ()) -> BeatEntry:
    if not isinstance(name, str) or not name or len(name) > 100 or not name.isprintable():
        raise ContributionError(f"beat entry name {str(name)[:80]!r} is not a name")
    if not isinstance(task, str) or not _TASK_NAME.match(task):
        raise ContributionError(f"beat entry {name}: task {str(task)[:80]!r} is not a task name")
    if (every is None) == (cron is None):
        raise ContributionError(f"beat entry {name}: give exactly one of every (seconds) or cron")
    if every is not None and (isinstance(every, bool) or not isinstance(every, (int, float)) or not 1 <= every <= 86400 * 31):
        raise ContributionError(f"beat entry {name}: every must be 1 s to 31 days")
    if cron is not None and (not isinstance(cron, str) or len(cron.split()) != 5):
        raise ContributionError(f"beat entry {name}: cron must have five fields (minute hour day month weekday)")
    if not isinstance(queue, str) or queue not in TASK_QUEUES:
        raise ContributionError(f"beat entry {name}: queue {queue!r} is not one of {', '.join(sorted(TASK_QUEUES))}")
    if expires is not None and (isinstance(expires, bool) or not isinstance(expires, (int, float)) or expires <= 0):
        raise ContributionError(f"beat entry {name}: expires must be a positive number of seconds")
    if not isinstance(args, (list, tuple)):
        raise ContributionError(f"beat entry {name}: args must be a list")
    return BeatEntry(plugin, name, task, float(every) if every is not None else None, cron, queue,
                     float(expires) if expires is not None else None, tuple(args))


def check_process(plugin: str, name: Any, run: Any, instances: Any = None) -> ProcessSpec:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ContributionError(f"process name {str(name)[:80]!r} must be lower case letters, digits, - or _")
    if not callable(run):
        raise ContributionError(f"process {name}: run is not callable")
    if instances is not None and not callable(instances):
        raise ContributionError(f"process {name}: instances must be a function of the config")
    return ProcessSpec(plugin, name, run, instances)


def check_cli(plugin: str, name: Any, command: Any, taken: frozenset[str] = frozenset()) -> CliCommand:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ContributionError(f"command name {str(name)[:80]!r} must be lower case letters, digits, - or _")
    if name in taken:
        raise ContributionError(f"command {name}: `picobot {name}` is PicoBot's own")
    if not (callable(command) or hasattr(command, "main")):
        raise ContributionError(f"command {name}: not a click command or a callable")
    return CliCommand(plugin, name, command)


def check_settings(plugin: str, key: Any, model: Any) -> SettingsSpec:
    if not isinstance(key, str) or not _NAME.match(key):
        raise ContributionError(f"settings key {str(key)[:80]!r} must be lower case letters, digits, - or _")
    if not (isinstance(model, type) and hasattr(model, "model_validate")):
        raise ContributionError(f"settings {key}: the model is not a pydantic model class")
    return SettingsSpec(plugin, key, model)


ADAPTER_METHODS = ("transform_request", "transform_response", "transform_stream_chunk")


def check_provider_adapter(plugin: str, name: Any, adapter: Any) -> ProviderAdapterSpec:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ContributionError(f"provider type {str(name)[:80]!r} must be lower case letters, digits, - or _")
    if name in PROVIDER_TYPES:
        raise ContributionError(f"provider type {name}: the name is one of PicoBot's own provider types")
    missing = [m for m in ADAPTER_METHODS if not callable(getattr(adapter, m, None))]
    if missing:
        raise ContributionError(f"provider type {name}: the adapter has no callable {', '.join(missing)}")
    path = getattr(adapter, "path", None)
    if path is not None and (not isinstance(path, str) or not path.startswith("/") or len(path) > 500
                             or not path.isprintable() or " " in path):
        raise ContributionError(f"provider type {name}: path {str(path)[:80]!r} is not a path like /chat/completions")
    if getattr(adapter, "headers", None) is not None and not callable(adapter.headers):
        raise ContributionError(f"provider type {name}: headers must be a function of the API key")
    return ProviderAdapterSpec(plugin, name, adapter)
