"""PluginPorts: what a plugin's route, task or process is handed — never the application.

    ports.config              the effective Config (read it; changing it changes nothing)
    ports.redis               the process's Redis client (use your own key prefix: "<plugin>:")
    ports.settings(key)       plugins.settings.<key>, validated by the model the plugin registered: the values set
                              at run time (SQL) over config.json's over the defaults, re-read every 2 s at most
    ports.set_setting(key, name, value) / ports.unset_setting(key, name)
                              change plugins.settings.<key>.<name> at run time (validated; every process sees it)
    ports.list_settings(key)  the key's fields: type, default, config value, override, effective (secrets masked)
    ports.channel(key)        channels.<key> as a dict (its own keys included), or None
    ports.record_event(channel, event_key, payload)
                              store a platform event before answering the platform (a redelivery with the
                              same key records nothing), then queue it: the channel's adapter `normalize`s it
                              into input in a worker. Returns (event id, created).
    ports.send_task(name, *args, countdown=0)
                              run a task the plugin registered (picobot_tasks) in a worker
    ports.fetch(url, max_bytes)
                              GET a URL through the network guard (tools.network): (bytes, content type)
    ports.redact(text)        the text with every configured secret masked (for logs and errors)

Two tiers (`ports_for` picks one; docs/PLUGINS.md, "Two tiers"). A built-in plugin, or an entry-point or
home-file plugin named in `plugins.trusted`, gets the PluginPorts above. Any other gets RestrictedPluginPorts:
its Redis reaches only keys under "<plugin>:" (an allowlist of commands, each with its key positions), no
`db`, only the settings and tasks it registered, and `record_event` only for channels of a type it offers.
Each refusal is a PermissionError that says what was refused and that `plugins.trusted` lifts it. The tiers
bound what the ports do; they are not a sandbox: the plugin is Python in PicoBot's process.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Callable, Mapping, NoReturn, Sequence

import redis
from redis.client import Pipeline

from picobot.errors import ConfigError

if TYPE_CHECKING:
    from picobot.config import Config
    from picobot.runtime.ports import Ports
    from picobot.storage.db import Database

log = logging.getLogger("picobot.plugins")

MAX_FETCH_BYTES = 64 * 1024 * 1024
SETTINGS_TTL = 2.0  # seconds a plugin's settings are reused before SQL is read again (a change's delay)


class PluginPorts:
    def __init__(self, rt: "Ports", plugin: str = "") -> None:
        self._rt = rt
        self.plugin = plugin
        self._settings: dict[str, tuple[float, Any, dict[str, Any]]] = {}  # key: (read at, model, overrides)
        self._lock = threading.Lock()

    @property
    def config(self) -> "Config":
        return self._rt.config

    @property
    def redis(self) -> "redis.Redis":
        return self._rt.redis

    @property
    def db(self) -> "Database":
        return self._rt.db

    @property
    def worker_name(self) -> str:
        return self._rt.worker_name

    def settings(self, key: str) -> Any:
        """plugins.settings.<key> as the registered model: the values set at run time (SQL) over config.json's
        over the defaults; re-read at most every SETTINGS_TTL seconds. ConfigError when bad."""
        now = time.monotonic()
        with self._lock:
            cached = self._settings.get(key)
        if cached is not None and now - cached[0] < SETTINGS_TTL:
            return cached[1]
        store = self._settings_store()
        store.spec(key)
        overrides = self._overrides(store, key, None if cached is None else cached[2])
        model = store.effective(key, overrides)
        with self._lock:
            self._settings[key] = (now, model, overrides)
        return model

    def _overrides(self, store: Any, key: str, known: dict[str, Any] | None) -> dict[str, Any]:
        from sqlalchemy.exc import SQLAlchemyError

        try:
            return store.overrides(key)
        except SQLAlchemyError as exc:  # the database down (or not migrated): the last values read stand
            log.warning("plugin settings %s: the run-time values are not readable (%s)", key, type(exc).__name__)
            return known or {}

    def set_setting(self, key: str, name: str, value: Any) -> Any:
        """Set plugins.settings.<key>.<name> at run time (every process sees it within SETTINGS_TTL seconds);
        the new model. ConfigError naming the key path, and nothing written, when the result does not validate."""
        return self._settings_write(key, {name: value}, ())

    def unset_setting(self, key: str, name: str) -> Any:
        """Drop the run-time value of plugins.settings.<key>.<name> (config.json's or the default applies)."""
        return self._settings_write(key, {}, (name,))

    def list_settings(self, key: str) -> dict[str, Any]:
        """The key's fields: type, default, config value, override, effective value; secrets masked."""
        return self._settings_store().describe(key)

    def _settings_write(self, key: str, values: dict[str, Any], unset: Sequence[str]) -> Any:
        model = self._settings_store().update(key, values, unset, by=f"plugin:{self.plugin}")
        with self._lock:
            self._settings.pop(key, None)
        return model

    def _settings_store(self) -> Any:
        from picobot.runtime.settings_store import SettingsStore

        return SettingsStore(self._rt.config, self._rt.plugins, self._rt.db)

    def channel(self, key: str) -> dict[str, Any] | None:
        cfg = self._rt.config.channels.get(key)
        return None if cfg is None else cfg.model_dump()

    def record_event(self, channel: str, event_key: str, payload: dict[str, Any]) -> tuple[int, bool]:
        """Store a platform event (once per (channel, event_key)) and queue its processing. A queue that is
        down loses nothing: the event is in SQL and the sweeper queues it."""
        from picobot.storage import channel_events

        if not isinstance(payload, dict):
            raise TypeError("a channel event's payload is a JSON object")
        if not channel or not event_key:
            raise ValueError("a channel event needs a channel and an event key")
        event_id, created = self._rt.db.grouped(
            lambda conn: channel_events.record(conn, channel, str(event_key)[:256], payload))
        if created:
            try:
                self._rt.queue.enqueue_channel_event(event_id)
            except Exception as exc:
                log.warning("channel event %d stored but not queued (%s); the sweeper will", event_id,
                            type(exc).__name__)
        return event_id, created

    def inject_input(self, channel: str, chat_id: str, content: Any, sender_id: str, key: str | None = None,
                     mode: str = "steer") -> dict[str, Any]:
        """Bring input from outside (a timer, a sensor, another bot) into a chat, as `sender_id` wrote it: it
        starts or steers a turn whose answer goes to that chat like any other (allow_from applies). `key` makes a
        redelivery count once; `mode` "queue" waits for the running turn. The gateway's answer as a frame."""
        if not all(isinstance(v, str) and v for v in (channel, chat_id, sender_id)):
            raise ValueError("inject_input needs a channel, a chat id and a sender id (strings)")
        inject = getattr(self._rt, "inject_input", None)
        if inject is None:
            raise RuntimeError("this process cannot take input")
        return inject(channel, chat_id, sender_id, content, key=key, mode=mode)

    def inject_interrupt(self, channel: str, chat_id: str, sender_id: str) -> dict[str, Any]:
        """Stop the chat's running turn and clear its waiting input, as `/stop` from `sender_id` would."""
        return self.inject_input(channel, chat_id, "/stop", sender_id)

    def send_task(self, name: str, *args: Any, countdown: float = 0) -> None:
        spec = self._task(name)
        self._rt.queue.enqueue_background(name, list(args), queue=spec.queue, countdown=countdown)

    def _task(self, name: str) -> Any:
        from picobot.plugins.contributions import check_task

        spec = next((t for t in self._rt.plugins.contributions("picobot_tasks", check_task) if t.name == name), None)
        if spec is None:
            raise ValueError(f"no plugin registered a task named {name!r}")
        return spec

    def fetch(self, url: str, max_bytes: int = 20 * 1024 * 1024, timeout: float = 30.0) -> tuple[bytes, str]:
        """GET `url` through the network guard; ValueError when refused, too big or not 2xx."""
        from picobot.security.netguard import guarded_client
        from picobot.security.netpolicy import NetworkPolicy

        max_bytes = max(1, min(int(max_bytes), MAX_FETCH_BYTES))
        policy = NetworkPolicy.from_allow(self._rt.config.tools.network.allow)
        with guarded_client(policy, timeout=timeout) as client, client.stream("GET", url) as response:
            if not 200 <= response.status_code < 300:
                raise ValueError(f"GET answered {response.status_code}")
            data = bytearray()
            for chunk in response.iter_bytes():
                data += chunk
                if len(data) > max_bytes:
                    raise ValueError(f"the file is over {max_bytes} bytes")
            return bytes(data), response.headers.get("content-type", "")

    def redact(self, text: str) -> str:
        from picobot.security.redact import redact

        return redact(text, self._rt.secrets)


def ports_for(rt: "Ports", plugin: str) -> PluginPorts:
    """The ports of a plugin's route, task, process, command or channel adapter, of the plugin's tier."""
    return PluginPorts(rt, plugin) if is_trusted(rt, plugin) else RestrictedPluginPorts(rt, plugin)


def is_trusted(rt: "Ports", plugin: str) -> bool:
    """A built-in plugin, or an active entry-point or home-file plugin named in plugins.trusted."""
    source = rt.plugins.source_of(plugin)
    return source == "builtin" or (source is not None and plugin in rt.config.plugins.trusted)


def refusal(plugin: str, what: str, rule: str) -> PermissionError:
    return PermissionError(f"plugin {plugin!r} may not {what}: {rule}. It is not in plugins.trusted; "
                           "naming it there gives it the full ports")


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 80 else text[:77] + "..."


class RestrictedPluginPorts(PluginPorts):
    """The ports of a plugin that is not trusted (the module docstring says what they refuse)."""

    def __init__(self, rt: "Ports", plugin: str = "") -> None:
        super().__init__(rt, plugin)
        self._redis: GuardedRedis | None = None
        self._channel_types: frozenset[str] | None = None

    @property
    def redis(self) -> "redis.Redis":
        with self._lock:
            if self._redis is None:
                inner = self._rt.redis
                self._redis = GuardedRedis(inner, KeyGuard(self.plugin, inner.get_encoder().encoding))
            return self._redis

    @property
    def db(self) -> "Database":
        raise refusal(self.plugin, "use the database (ports.db)", "SQL is for trusted plugins")

    def settings(self, key: str) -> Any:
        self._own_settings(key, "read")
        return super().settings(key)

    def list_settings(self, key: str) -> dict[str, Any]:
        self._own_settings(key, "list")
        return super().list_settings(key)

    def _settings_write(self, key: str, values: dict[str, Any], unset: Sequence[str]) -> Any:
        self._own_settings(key, "change")
        return super()._settings_write(key, values, unset)

    def _own_settings(self, key: str, verb: str) -> None:
        from picobot.plugins.contributions import check_settings

        specs = self._rt.plugins.contributions("picobot_settings", check_settings)
        owner = next((s.plugin for s in specs if s.key == key), self.plugin)
        if owner != self.plugin:
            shown = key[:80] if isinstance(key, str) else _shown(key)
            raise refusal(self.plugin, f"{verb} plugins.settings.{shown}", "it uses the settings it registered")

    def record_event(self, channel: str, event_key: str, payload: dict[str, Any]) -> tuple[int, bool]:
        cfg = self._rt.config.channels.get(channel) if isinstance(channel, str) else None
        if cfg is None or (cfg.type or channel) not in self._own_channel_types():
            raise refusal(self.plugin, f"record an event for the channel {_shown(channel)}",
                          "only for a configured channel of a type it offers (picobot_channels)")
        return super().record_event(channel, event_key, payload)

    def inject_input(self, channel: str, chat_id: str, content: Any, sender_id: str, key: str | None = None,
                     mode: str = "steer") -> dict[str, Any]:
        cfg = self._rt.config.channels.get(channel) if isinstance(channel, str) else None
        if cfg is None or (cfg.type or channel) not in self._own_channel_types():
            raise refusal(self.plugin, f"bring input into the channel {_shown(channel)}",
                          "only into a configured channel of a type it offers (picobot_channels)")
        return super().inject_input(channel, chat_id, content, sender_id, key=key, mode=mode)

    def _own_channel_types(self) -> frozenset[str]:
        if self._channel_types is None:
            owners = self._rt.plugins.channel_owners(self._rt.config)
            self._channel_types = frozenset(t for t, p in owners.items() if p == self.plugin)
        return self._channel_types

    def _task(self, name: str) -> Any:
        spec = super()._task(name)
        if spec.plugin != self.plugin:
            raise refusal(self.plugin, f"send the task {_shown(name)}", "it sends the tasks it registered")
        return spec


# ---------------------------------------------------------------- an untrusted plugin's Redis

def _first(args: Sequence[Any]) -> Sequence[Any]:
    return args[:1]


def _first_two(args: Sequence[Any]) -> Sequence[Any]:
    return args[:2]


def _every(args: Sequence[Any]) -> Sequence[Any]:
    return args


def _all_but_last(args: Sequence[Any]) -> Sequence[Any]:  # BLPOP key [key ...] timeout
    return args[:-1]


def _pairs(args: Sequence[Any]) -> Sequence[Any]:  # MSET key value [key value ...]
    return args[::2]


def _none(args: Sequence[Any]) -> Sequence[Any]:
    return ()


# The commands an untrusted plugin may run, each with where its keys are: every key a command names is
# checked, so a command that reaches keys it does not name (EVAL, SORT ... BY, KEYS, COPY ... DB, SELECT)
# or whose keys hide behind a count (ZUNIONSTORE, LMPOP) is not here. SCAN is checked on its own (MATCH).
KEYS_OF: dict[str, Callable[[Sequence[Any]], Sequence[Any]]] = {
    **dict.fromkeys((
        "GET", "SET", "SETNX", "SETEX", "PSETEX", "GETSET", "GETDEL", "GETEX", "APPEND", "STRLEN", "INCR",
        "INCRBY", "INCRBYFLOAT", "DECR", "DECRBY", "GETRANGE", "SETRANGE", "GETBIT", "SETBIT", "BITCOUNT", "BITPOS",
        "EXPIRE", "PEXPIRE", "EXPIREAT", "PEXPIREAT", "EXPIRETIME", "PEXPIRETIME", "TTL", "PTTL", "PERSIST", "TYPE",
        "HGET", "HSET", "HSETNX", "HMSET", "HMGET", "HDEL", "HGETALL", "HKEYS", "HVALS", "HLEN", "HEXISTS",
        "HINCRBY", "HINCRBYFLOAT", "HSTRLEN", "HRANDFIELD", "HSCAN",
        "LPUSH", "RPUSH", "LPUSHX", "RPUSHX", "LPOP", "RPOP", "LLEN", "LRANGE", "LINDEX", "LSET", "LREM", "LTRIM",
        "LINSERT", "LPOS",
        "SADD", "SREM", "SMEMBERS", "SISMEMBER", "SMISMEMBER", "SCARD", "SPOP", "SRANDMEMBER", "SSCAN",
        "ZADD", "ZREM", "ZSCORE", "ZMSCORE", "ZINCRBY", "ZCARD", "ZCOUNT", "ZLEXCOUNT", "ZRANGE", "ZRANGEBYSCORE",
        "ZRANGEBYLEX", "ZREVRANGE", "ZREVRANGEBYSCORE", "ZREVRANGEBYLEX", "ZRANK", "ZREVRANK", "ZREMRANGEBYSCORE",
        "ZREMRANGEBYRANK", "ZREMRANGEBYLEX", "ZPOPMIN", "ZPOPMAX", "ZRANDMEMBER", "ZSCAN",
        "XADD", "XLEN", "XRANGE", "XREVRANGE", "XTRIM", "XDEL", "XACK", "XPENDING", "XCLAIM", "XAUTOCLAIM",
        "PFADD"), _first),
    **dict.fromkeys(("DEL", "UNLINK", "EXISTS", "TOUCH", "MGET", "WATCH", "SINTER", "SUNION", "SDIFF",
                     "SINTERSTORE", "SUNIONSTORE", "SDIFFSTORE", "PFCOUNT", "PFMERGE"), _every),
    **dict.fromkeys(("RENAME", "RENAMENX", "SMOVE", "RPOPLPUSH", "BRPOPLPUSH", "LMOVE", "BLMOVE"), _first_two),
    **dict.fromkeys(("BLPOP", "BRPOP", "BZPOPMIN", "BZPOPMAX"), _all_but_last),
    **dict.fromkeys(("MSET", "MSETNX"), _pairs),
    **dict.fromkeys(("PING", "UNWATCH"), _none),
}
SCAN_OPTIONS = frozenset({"MATCH", "COUNT", "TYPE"})
RESERVED_NAMESPACES = frozenset({"picobot", "redbeat"})  # ours (coord/keys.py, each capability's keys.py), redbeat's
_WORD = re.compile(r"[A-Za-z]+")
_GLOB = re.compile(r"([*?\[\\])")


def _word(value: Any) -> str | None:
    """A command or option name, upper-cased; None for anything but one plain word (no "CONFIG GET")."""
    if type(value) is bytes:
        value = value.decode("latin-1")
    return value.upper() if type(value) is str and _WORD.fullmatch(value) else None


class KeyGuard:
    """Checks each command an untrusted plugin sends: an allowlisted one, every key under "<plugin>:"."""

    def __init__(self, plugin: str, encoding: str = "utf-8", also: Sequence[str] = ()) -> None:
        self.plugin = plugin
        # The colon: "qq" owns "qq:x", never "qqx:y". A name with a colon would own another plugin's keys
        # ("a" those of "a:b"), "picobot" and "redbeat" PicoBot's: such a name, or none, owns no key.
        owner = bool(plugin) and ":" not in plugin and plugin not in RESERVED_NAMESPACES
        self.prefix = f"{plugin}:" if owner else None
        self._keys = self._pairs([self.prefix, *also] if self.prefix else [], encoding)
        self.pattern = None if self.prefix is None else _GLOB.sub(r"\\\1", self.prefix)  # SCAN MATCH's literal
        self._patterns = self._pairs([self.pattern] if self.pattern else [], encoding)

    @staticmethod
    def _pairs(texts: Sequence[str], encoding: str) -> list[tuple[str, bytes | None]]:
        found: list[tuple[str, bytes | None]] = []
        for text in texts:
            try:
                found.append((text, text.encode(encoding)))
            except UnicodeError:  # a file plugin's name with a lone surrogate: no bytes key is its own
                found.append((text, None))
        return found

    def check(self, args: Sequence[Any]) -> None:
        """PermissionError unless the command may run: allowlisted, and every key it names is the plugin's."""
        name = _word(args[0]) if args else None
        if name == "SCAN":
            return self._check_scan(args[2:])
        keys_of = KEYS_OF.get(name or "")
        if keys_of is None:
            raise self.refused(f"run the Redis command {_shown(args[0] if args else None)}")
        for key in keys_of(args[1:]):
            if not self._under(key, self._keys):
                raise self.refused(f"run {name} on the key {_shown(key)}")

    def _check_scan(self, options: Sequence[Any]) -> None:
        pairs = [(_word(options[i]), options[i + 1]) for i in range(0, len(options) - 1, 2)]
        unknown = len(options) % 2 or any(word not in SCAN_OPTIONS for word, _ in pairs)
        patterns = [value for word, value in pairs if word == "MATCH"]
        if unknown or not patterns:
            raise self.refused(f"run SCAN without MATCH {self.pattern!r}* (or with other options)")
        for pattern in patterns:  # Redis takes the last MATCH: every one must be under the prefix
            if not self._under(pattern, self._patterns):
                raise self.refused(f"SCAN for {_shown(pattern)}")

    @classmethod
    def _under(cls, value: Any, prefixes: list[tuple[str, bytes | None]]) -> bool:
        return any(cls._starts(value, text, raw) for text, raw in prefixes)

    @staticmethod
    def _starts(value: Any, text: str, raw: bytes | None) -> bool:
        # exact types only: a str or bytes subclass could encode to something else than it compares as
        if type(value) is str:
            return value.startswith(text)
        return type(value) is bytes and raw is not None and value.startswith(raw)

    def refused(self, what: str) -> PermissionError:
        return refusal(self.plugin, what, f"its Redis reaches only allowlisted commands on keys under {self.prefix!r}")


class _Guarded:
    """What a guarded client and its pipelines share: each command checked, and no way around the check."""

    guard: KeyGuard
    connection_pool: Any
    response_callbacks: Any

    def execute_command(self, *args: Any, **options: Any) -> Any:
        self.guard.check(args)
        return super().execute_command(*args, **options)  # type: ignore[misc]

    def pipeline(self, transaction: bool = True, shard_hint: Any = None) -> "GuardedPipeline":
        return GuardedPipeline(self.guard, self.connection_pool, self.response_callbacks, transaction, shard_hint)

    # the ways to Redis that do not go through execute_command, or run Lua (a lock's release is a script)
    def pubsub(self, **kwargs: Any) -> NoReturn:
        raise self.guard.refused("use Pub/Sub")

    def monitor(self) -> NoReturn:
        raise self.guard.refused("use MONITOR")

    def client(self) -> NoReturn:
        raise self.guard.refused("open a connection of its own")

    def lock(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise self.guard.refused("take a Redis lock (its release is a Lua script)")

    def register_script(self, script: Any) -> NoReturn:
        raise self.guard.refused("run Lua scripts")


class GuardedRedis(_Guarded, redis.Redis):
    """The process's Redis (its connection pool) for an untrusted plugin, each command checked by its KeyGuard."""

    def __init__(self, inner: redis.Redis, guard: KeyGuard) -> None:
        super().__init__(connection_pool=inner.connection_pool)
        self.guard = guard


class GuardedPipeline(_Guarded, Pipeline):
    """A pipeline of a GuardedRedis: each command checked as it is queued."""

    def __init__(self, guard: KeyGuard, *args: Any) -> None:
        super().__init__(*args)
        self.guard = guard


def plugin_settings(config: "Config", plugins: Any, key: str, overrides: Mapping[str, Any] | None = None) -> Any:
    """plugins.settings.<key>, with `overrides` (the values set at run time) over it, validated by its registered
    model; ConfigError naming the key path."""
    from pydantic import ValidationError

    from picobot.plugins.contributions import check_settings

    spec = next((s for s in plugins.contributions("picobot_settings", check_settings) if s.key == key), None)
    if spec is None:
        raise ConfigError(f"plugins.settings.{key}", "no plugin registered settings under this key")
    raw = {**(config.plugins.settings.get(key) or {}), **(overrides or {})}
    try:
        return spec.model.model_validate(raw)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        raise ConfigError(f"plugins.settings.{key}" + (f".{where}" if where else ""), first.get("msg", "invalid")) from None


def settings_problems(config: "Config", plugins: Any) -> list[tuple[str, str]]:
    """(key path, why) for each registered settings section that does not validate."""
    from picobot.plugins.contributions import check_settings

    problems = []
    for spec in plugins.contributions("picobot_settings", check_settings):
        try:
            plugin_settings(config, plugins, spec.key)
        except ConfigError as exc:
            problems.append((exc.key_path, exc.reason))
        except Exception as exc:  # a model whose validators raise something else
            problems.append((f"plugins.settings.{spec.key}", f"{type(exc).__name__}: {exc}"[:300]))
    return problems
