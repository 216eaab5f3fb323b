"""Plugin settings at run time: config.json's `plugins.settings.<key>` with the changes kept in SQL.

The effective value of `<key>.<field>` is the SQL override if one is set, else config.json's
`plugins.settings.<key>.<field>`, else the model's default. A write is checked before anything is
stored: the value must be plain JSON of bounded size and depth, and the whole merged object must
validate against the model the plugin registered; a refusal is a ConfigError naming
`plugins.settings.<key>.<field>`. Secret fields (typed SecretStr, or named like a credential) are
masked when listed. The ports, `picobot settings` and `/api/settings` all go through SettingsStore.
"""

from __future__ import annotations

import json
import math
from typing import TYPE_CHECKING, Any, Iterable, Mapping, get_args

from pydantic import SecretBytes, SecretStr
from pydantic_core import to_jsonable_python

from picobot.errors import ConfigError
from picobot.runtime.plugin_ports import plugin_settings
from picobot.security.redact import MASK, is_secret_key
from picobot.storage import plugin_settings as rows

if TYPE_CHECKING:
    from picobot.config import Config
    from picobot.plugins.contributions import SettingsSpec
    from picobot.storage.db import Database

MAX_VALUE_CHARS = 64 * 1024  # a value's JSON text
MAX_DEPTH = 32  # lists and objects inside a value


class SettingsStore:
    """The registered settings of one process's plugins, over its config and its database."""

    def __init__(self, config: "Config", plugins: Any, db: "Database") -> None:
        self.config = config
        self.plugins = plugins
        self.db = db

    def specs(self) -> list["SettingsSpec"]:
        from picobot.plugins.contributions import check_settings

        return list(self.plugins.contributions("picobot_settings", check_settings))

    def spec(self, key: str) -> "SettingsSpec":
        found = next((s for s in self.specs() if s.key == key), None)
        if found is None:
            raise ConfigError(f"plugins.settings.{_shown(key)}", "no plugin registered settings under this key")
        return found

    def overrides(self, key: str) -> dict[str, Any]:
        with self.db.connect() as conn:
            return rows.overrides(conn, key)

    def effective(self, key: str, overrides: Mapping[str, Any] | None = None) -> Any:
        """The merged, validated model; ConfigError naming the key path when it does not validate."""
        try:
            return plugin_settings(self.config, self.plugins, key, overrides)
        except ConfigError:
            raise
        except Exception as exc:  # a model whose validators raise something else
            raise ConfigError(f"plugins.settings.{key}", f"{type(exc).__name__}: {exc}"[:300]) from None

    def update(self, key: str, values: Mapping[str, Any], unset: Iterable[str] = (), by: str = "") -> Any:
        """Set `values` and drop `unset` in one transaction, after the merged object validated; the new model."""
        fields = self.spec(key).model.model_fields
        unset = list(unset)
        texts = {}
        for name in [*values, *unset]:
            if not isinstance(name, str) or name not in fields:
                raise ConfigError(f"plugins.settings.{key}.{_shown(name)}", "the model has no such setting")
        for name, value in values.items():
            texts[name] = json_text(f"plugins.settings.{key}.{name}", value)
        with self.db.begin() as conn:
            merged = {**rows.overrides(conn, key), **values}
            for name in unset:
                merged.pop(name, None)
            model = self.effective(key, merged)  # raises before anything is written
            for name, text in texts.items():
                rows.put(conn, key, name, text, by)
            for name in unset:
                rows.remove(conn, key, name)
        return model

    def describe(self, key: str) -> dict[str, Any]:
        """The key's fields (type, default, config value, override, effective value, source), secrets masked."""
        model = self.spec(key).model
        configured = self.config.plugins.settings.get(key) or {}
        with self.db.connect() as conn:
            over, changed = rows.overrides(conn, key), rows.changes(conn, key)
        try:
            effective, error = self.effective(key, over), None
        except ConfigError as exc:
            effective, error = None, str(exc)
        fields = [_field(name, info, configured, over, changed, effective)
                  for name, info in model.model_fields.items()]
        return {"key": key, "plugin": self.spec(key).plugin, "fields": fields, "error": error}


def _field(name: str, info: Any, configured: Mapping[str, Any], over: Mapping[str, Any],
           changed: Mapping[str, tuple[float, str]], effective: Any) -> dict[str, Any]:
    secret = is_secret_field(name, info.annotation)

    def shown(value: Any) -> Any:
        return _masked(value) if secret else value

    entry: dict[str, Any] = {"name": name, "type": _type_name(info.annotation), "secret": secret,
                             "default": shown(_plain(info.get_default(call_default_factory=True)))}
    if name in configured:
        entry["config"] = shown(_plain(configured[name]))
    if name in over:
        entry["override"] = shown(over[name])
        entry["updated_at"], entry["updated_by"] = changed.get(name, (None, ""))
    entry["source"] = "override" if name in over else "config" if name in configured else "default"
    entry["effective"] = None if effective is None else shown(_plain(getattr(effective, name, None)))
    return entry


def is_secret_field(name: str, annotation: Any) -> bool:
    """A field typed SecretStr or SecretBytes (also inside Optional, list...), or named like a credential."""
    return is_secret_key(name) or _holds_secret(annotation)


def _holds_secret(annotation: Any) -> bool:
    if annotation in (SecretStr, SecretBytes):
        return True
    return any(_holds_secret(arg) for arg in get_args(annotation))


def _masked(value: Any) -> Any:
    return value if value in (None, "") else MASK


def _plain(value: Any) -> Any:
    return to_jsonable_python(value, fallback=str)


def _type_name(annotation: Any) -> str:
    if isinstance(annotation, type):
        return annotation.__name__
    return str(annotation).replace("typing.", "")


def _shown(name: Any) -> str:
    text = name if isinstance(name, str) else repr(name)
    return text.encode("utf-8", "backslashreplace").decode("utf-8")[:80]


def json_text(path: str, value: Any) -> str:
    """The JSON text of a value a setting may hold; ConfigError at `path` for anything else."""
    problem = _json_problem(value)
    if problem:
        raise ConfigError(path, problem)
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False)
    except ValueError as exc:  # an integer of more digits than Python converts
        raise ConfigError(path, f"the value is not JSON ({exc})"[:200]) from None
    if len(text) > MAX_VALUE_CHARS:
        raise ConfigError(path, f"the value is over {MAX_VALUE_CHARS} characters of JSON")
    return text


def _json_problem(value: Any) -> str | None:
    """Why `value` is not plain JSON (exact types, finite numbers, UTF-8 text, bounded depth), or None."""
    stack: list[tuple[Any, int]] = [(value, 0)]
    while stack:
        item, depth = stack.pop()
        if depth > MAX_DEPTH:
            return f"the value nests deeper than {MAX_DEPTH} levels"
        kind = type(item)
        if kind is float and not math.isfinite(item):
            return "a number must be finite (no NaN or infinity)"
        if kind is str and not _utf8(item):
            return "the text is not valid Unicode (a lone surrogate)"
        if kind is list:
            stack.extend((v, depth + 1) for v in item)
        elif kind is dict:
            if not all(type(k) is str and _utf8(k) for k in item):
                return "an object's keys must be text"
            stack.extend((v, depth + 1) for v in item.values())
        elif kind not in (str, int, float, bool, type(None)):
            return f"a {kind.__name__} is not a JSON value"
    return None


def _utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
