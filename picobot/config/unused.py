"""Settings that are accepted and validated but not acted on yet, and which of them a config sets.

The one list of such keys: `picobot config` warns about each one a user set (in config.json
or through the environment), and a test checks that docs/CONFIGURATION.md marks every one.
Take a key off the list in the same change that makes the code act on it.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterator

from pydantic import BaseModel

from picobot.config.schema import Config
from picobot.domain.scope import SOCKET_CHANNELS as _SOCKET_CHANNELS

KeyPath = tuple[str, ...]


@dataclass(frozen=True)
class UnusedKey:
    pattern: str  # dotted key path as written in config.json; "*" stands for any one key
    why: str  # what is missing, for the warning
    acted_on: tuple[str, ...] = ()  # keys the "*" may stand for that ARE acted on

    def matches(self, path: KeyPath) -> bool:
        parts = self.pattern.split(".")
        if len(parts) != len(path):
            return False
        return all(want == got or (want == "*" and got not in self.acted_on) for want, got in zip(parts, path))


UNUSED_KEYS: tuple[UnusedKey, ...] = (
    UnusedKey("channels.*", "no adapter is built for this channel type (known: feishu, telegram, wechat; web and cli_chat "
              "are the built-in socket channels)"),
)


# No pattern is deeper than this; free-form values (`models.*.options`) may nest far deeper.
_DEPTH = max(len(key.pattern.split(".")) for key in UNUSED_KEYS)


def set_paths(model: BaseModel, prefix: KeyPath = ()) -> Iterator[KeyPath]:
    """The key path of every value the file or the environment set, down to the deepest pattern."""
    if len(prefix) >= _DEPTH:
        return
    fields = type(model).model_fields
    for name in sorted(model.model_fields_set):
        field = fields.get(name)
        if field is not None and field.exclude:  # computed at start, not a setting
            continue
        key = (field.alias if field is not None and field.alias else name)
        yield prefix + (key,)
        yield from _inner_paths(getattr(model, name, None), prefix + (key,))


def _inner_paths(value: Any, path: KeyPath) -> Iterator[KeyPath]:
    if len(path) >= _DEPTH:
        return
    if isinstance(value, BaseModel):
        yield from set_paths(value, path)
    elif isinstance(value, dict):
        for key, item in value.items():
            yield path + (str(key),)
            yield from _inner_paths(item, path + (str(key),))


_CLASS_PATH = re.compile(r"[A-Za-z_][\w.]*:[A-Za-z_]\w*")
# Channels with no adapter whose `allow_from` still holds: the OpenAI-compatible API (picobot/openai_api)
_EDGE_CHANNELS = _SOCKET_CHANNELS | {"openai_api"}


def _known_channel(config: Config, path: KeyPath, channel_types: frozenset[str]) -> bool:
    """`channels.<key>` of a type an adapter is offered for (its keys are acted on, or checked, by it)."""
    if len(path) != 2 or path[0] != "channels" or path[1] not in config.channels:
        return False
    type_name = config.channels[path[1]].type or ""
    return path[1] in _EDGE_CHANNELS or type_name in channel_types or bool(_CLASS_PATH.fullmatch(type_name))


def unused_settings(config: Config, channel_types: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    """(key path, why) for each setting in `config` that is set but not acted on yet.

    `channel_types`: the channel types the plugins offer (the caller asks them; config knows none).
    """
    found: dict[str, str] = {}
    for path in set_paths(config):
        if _known_channel(config, path, channel_types):
            continue
        for key in UNUSED_KEYS:
            if key.matches(path):
                found.setdefault(show_path(path), key.why)
    return list(found.items())


_PLAIN = re.compile(r"[A-Za-z0-9_-]+")


def show_path(path: KeyPath) -> str:
    """Dotted, with odd keys (dots, spaces, control characters, lone surrogates) quoted as JSON strings."""
    return ".".join(part if _PLAIN.fullmatch(part) else json.dumps(part) for part in path)


def warning_lines(config: Config, channel_types: frozenset[str] = frozenset()) -> list[str]:
    return [f"warning: {path} is accepted but not acted on yet: {why} (see docs/CONFIGURATION.md)"
            for path, why in unused_settings(config, channel_types)]
