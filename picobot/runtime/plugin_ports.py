"""PluginPorts: what a plugin's route, task or process is handed — never the application.

    ports.config              the effective Config (read it; changing it changes nothing)
    ports.redis               the process's Redis client (use your own key prefix: "<plugin>:")
    ports.settings(key)       plugins.settings.<key>, validated by the model the plugin registered
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
"""

from __future__ import annotations

import logging
import threading
from typing import TYPE_CHECKING, Any

from picobot.errors import ConfigError

if TYPE_CHECKING:
    import redis

    from picobot.config import Config
    from picobot.runtime.ports import Ports
    from picobot.storage.db import Database

log = logging.getLogger("picobot.plugins")

MAX_FETCH_BYTES = 64 * 1024 * 1024


class PluginPorts:
    def __init__(self, rt: "Ports", plugin: str = "") -> None:
        self._rt = rt
        self.plugin = plugin
        self._settings: dict[str, Any] = {}
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
        """plugins.settings.<key> as the registered model (defaults when absent); ConfigError when bad."""
        with self._lock:
            if key not in self._settings:
                self._settings[key] = plugin_settings(self._rt.config, self._rt.plugins, key)
            return self._settings[key]

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

    def send_task(self, name: str, *args: Any, countdown: float = 0) -> None:
        from picobot.plugins.contributions import check_task

        spec = next((t for t in self._rt.plugins.contributions("picobot_tasks", check_task) if t.name == name), None)
        if spec is None:
            raise ValueError(f"no plugin registered a task named {name!r}")
        self._rt.queue.enqueue_background(name, list(args), queue=spec.queue, countdown=countdown)

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


def plugin_settings(config: "Config", plugins: Any, key: str) -> Any:
    """plugins.settings.<key> validated by its registered model; ConfigError naming the key path."""
    from pydantic import ValidationError

    from picobot.plugins.contributions import check_settings

    spec = next((s for s in plugins.contributions("picobot_settings", check_settings) if s.key == key), None)
    if spec is None:
        raise ConfigError(f"plugins.settings.{key}", "no plugin registered settings under this key")
    raw = config.plugins.settings.get(key) or {}
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
