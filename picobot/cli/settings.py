"""`picobot settings`: list, read and change plugin settings at run time (kept in SQL, over config.json).

Builds the plugin host as the processes do, so the keys and models are the ones they validate with; a
change reaches every running process within seconds (picobot/runtime/settings_store.py). Errors are
one line and exit 2.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported when the command runs: every command builds this parser
    from picobot.config import Config
    from picobot.runtime.settings_store import SettingsStore

EXIT_BAD_INPUT = 2


def add_parser(sub: Any) -> argparse.ArgumentParser:
    p = sub.add_parser("settings", help="list, get, set or unset plugin settings at run time")
    actions = p.add_subparsers(dest="settings_action", required=True)
    listing = actions.add_parser("list", help="every setting of every key (or of KEY): effective value and source")
    listing.add_argument("key", nargs="?", metavar="KEY")
    listing.add_argument("--json", action="store_true", help="print JSON instead of text")
    get = actions.add_parser("get", help="the effective value of KEY.NAME, as JSON (a secret masked)")
    get.add_argument("path", metavar="KEY.NAME")
    put = actions.add_parser("set", help="set KEY.NAME to VALUE (JSON, else a string), validated first")
    put.add_argument("path", metavar="KEY.NAME")
    put.add_argument("value", metavar="VALUE")
    unset = actions.add_parser("unset", help="drop KEY.NAME's run-time value (config.json's or the default applies)")
    unset.add_argument("path", metavar="KEY.NAME")
    return p


def run(config: Config, args: argparse.Namespace) -> int:
    from picobot.app import build_plugins
    from picobot.errors import ConfigError
    from picobot.runtime.settings_store import SettingsStore
    from picobot.storage.db import Database

    host = build_plugins(config)
    db = Database(config.database_url)
    try:
        db.migrate()  # a fresh home has no plugin_settings table yet
        return ACTIONS[args.settings_action](SettingsStore(config, host, db), args)
    except (ConfigError, ValueError) as exc:
        print(f"picobot settings: error: {_one_line(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    finally:
        db.dispose()
        host.close()


def _list(store: SettingsStore, args: argparse.Namespace) -> int:
    keys = [args.key] if args.key else sorted(s.key for s in store.specs())
    described = [store.describe(key) for key in keys]
    if args.json:
        print(json.dumps({"settings": described}, indent=2, ensure_ascii=False))
        return 0
    for section in described:
        if section["error"]:
            print(f"{section['key']}: {_one_line(section['error'])}")
        for field in section["fields"]:
            print(f"{section['key']}.{field['name']} = {_json(field['effective'])}  ({field['source']})")
    return 0


def _get(store: SettingsStore, args: argparse.Namespace) -> int:
    key, name = _split(args.path)
    field = next((f for f in store.describe(key)["fields"] if f["name"] == name), None)
    if field is None:
        raise ValueError(f"plugins.settings.{args.path}: the model has no such setting")
    store.effective(key, store.overrides(key))  # a key that does not validate is an error, not a null
    print(_json(field["effective"]))
    return 0


def _set(store: SettingsStore, args: argparse.Namespace) -> int:
    key, name = _split(args.path)
    store.update(key, {name: parse_value(args.value)}, by="cli")
    print(f"plugins.settings.{key}.{name} set")
    return 0


def _unset(store: SettingsStore, args: argparse.Namespace) -> int:
    key, name = _split(args.path)
    store.update(key, {}, (name,), by="cli")
    print(f"plugins.settings.{key}.{name} unset")
    return 0


ACTIONS = {"list": _list, "get": _get, "set": _set, "unset": _unset}


def parse_value(text: str) -> Any:
    """VALUE as JSON (5, true, null, "x", [1], {"a": 1}), else the text itself as a string."""
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _split(path: str) -> tuple[str, str]:
    key, dot, name = path.partition(".")
    if not (key and dot and name):
        raise ValueError(f"{path!r} is not KEY.NAME (such as example.level)")
    return key, name


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _one_line(error: Any) -> str:
    return " ".join(str(error).split()).encode("utf-8", "backslashreplace").decode("utf-8")
