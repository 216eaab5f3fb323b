"""Find, read, expand and validate config.json; every failure is a ConfigError.

Order of work in `load_config`:
  1. environment = process env > ./.env > $PICOBOT_HOME/.env (without touching os.environ)
  2. file = $PICOBOT_HOME/config.json, else ./config.json, else none
  3. `${VAR}` / `<VAR>` placeholders expanded in string values
  4. OPENAI_* / ANTHROPIC_* fill `providers` when the file has none
  5. pydantic validation; errors become ConfigError with a dotted key path

`load_client_settings` does steps 1-3 and reads only what a client of a running gateway needs,
without validating the rest: pydantic and the schema are imported only when a full load (or an
error report) needs them, since they cost most of `picobot chat -m`'s run.
"""

from __future__ import annotations

import difflib
import json
import logging
import os
import re
import types
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Mapping, Sequence, Union, get_args, get_origin

from dotenv import dotenv_values

from picobot.config.home import AMQP_SCHEMES, REDIS_SCHEMES, RUNTIME_KEYS, default_database_url, picobot_home, url_scheme
from picobot.errors import ConfigError

if TYPE_CHECKING:
    from pydantic import ValidationError

    from picobot.config.schema import Config

log = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
DOTENV_FILE = ".env"
DEFAULT_OPENAI_MODEL = "gpt-4o-mini"
DEFAULT_ANTHROPIC_MODEL = "claude-sonnet-4-5"

# Free text for the model, passed verbatim: prompts legitimately contain "<b>" or "${HOME}".
VERBATIM_KEYS = frozenset({"prompt", "system_prompt"})

_NAME = r"[A-Za-z_][A-Za-z0-9_]*"
_PLACEHOLDER = re.compile(rf"\$(?P<escape>\$)?\{{(?P<dollar>{_NAME})\}}|<(?P<angle>{_NAME})>")
_WHOLE_ANGLE = re.compile(rf"<({_NAME})>")

KeyPath = tuple[str | int, ...]  # a location inside the config data

__all__ = [
    "CONFIG_FILE",
    "apply_dotenv",
    "find_config_file",
    "format_key_path",
    "load_config",
    "load_dotenv_layers",
    "picobot_home",
]


# --- .env layering ------------------------------------------------------------------


def _read_dotenv(path: Path) -> dict[str, str]:
    if not path.is_file():
        return {}
    try:
        # No interpolation: values are taken literally, so the result depends only on
        # the files and never on whatever os.environ happens to hold.
        values = dotenv_values(path, interpolate=False, encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read {path}: {exc}") from None
    return {key: value for key, value in values.items() if value is not None}


def load_dotenv_layers(
    home: Path, cwd: Path, environ: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The effective environment: process env > `<cwd>/.env` > `<home>/.env`."""
    merged = _read_dotenv(Path(home) / DOTENV_FILE)
    merged.update(_read_dotenv(Path(cwd) / DOTENV_FILE))
    merged.update(os.environ if environ is None else environ)
    return merged


def apply_dotenv(home: Path | None = None, cwd: Path | None = None) -> dict[str, str]:
    """Copy `.env` values missing from os.environ into it; return what was added.

    Called once by the CLI at start, before any thread exists.
    """
    home = picobot_home() if home is None else Path(home)
    cwd = Path.cwd() if cwd is None else Path(cwd)
    merged = load_dotenv_layers(home, cwd, os.environ)
    added = {key: value for key, value in merged.items() if key not in os.environ}
    os.environ.update(added)
    return added


# --- finding and reading the file ---------------------------------------------------


def find_config_file(home: Path, cwd: Path) -> Path | None:
    """`<home>/config.json`, else `<cwd>/config.json`, else None."""
    for candidate in (Path(home) / CONFIG_FILE, Path(cwd) / CONFIG_FILE):
        if candidate.is_file():
            return candidate
    return None


def _read_json(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8-sig")  # -sig: tolerate a Windows BOM
    except FileNotFoundError:
        raise ConfigError("", f"config file not found: {path}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError("", f"cannot read {path}: {exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(
            "", f"{path}: invalid JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
        ) from None
    if not isinstance(data, dict):
        raise ConfigError("", f"{path}: the top level must be a JSON object")
    return data


# --- placeholders -------------------------------------------------------------------


def format_key_path(path: Sequence[str | int]) -> str:
    """('scheduler', 'jobs', 0, 'id') -> 'scheduler.jobs[0].id'."""
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


def _unset(path: KeyPath, var: str, syntax: str) -> ConfigError:
    return ConfigError(
        format_key_path(path), f"environment variable {var} is not set (placeholder {syntax})"
    )


def _expand_string(text: str, env: Mapping[str, str], path: KeyPath) -> str:
    def replace(match: re.Match[str]) -> str:
        if match["escape"]:  # "$${VAR}" is a literal "${VAR}"
            return match[0][1:]
        var = match["dollar"] or match["angle"]
        if var not in env:
            syntax = f"${{{var}}}" if match["dollar"] else f"<{var}>"
            raise _unset(path, var, syntax)
        return env[var]

    return _PLACEHOLDER.sub(replace, text)


def _unset_whole_angle(value: Any, env: Mapping[str, str]) -> str | None:
    if isinstance(value, str):
        match = _WHOLE_ANGLE.fullmatch(value)
        if match and match[1] not in env:
            return match[1]
    return None


def expand_placeholders(
    value: Any, env: Mapping[str, str], path: KeyPath = (), dropped: dict[KeyPath, str] | None = None
) -> Any:
    """`value` with placeholders replaced from `env`.

    A member whose whole value is `<VAR>` with VAR unset is dropped, so the key counts as
    absent (optional keys take their default); its path goes into `dropped`. Any other
    unset placeholder is a ConfigError naming the key path and the variable.
    """
    dropped = {} if dropped is None else dropped
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            var = _unset_whole_angle(item, env)
            if var is not None:
                dropped[(*path, key)] = var
            elif key in VERBATIM_KEYS and isinstance(item, str):
                out[key] = item
            else:
                out[key] = expand_placeholders(item, env, (*path, key), dropped)
        return out
    if isinstance(value, list):
        return [expand_placeholders(item, env, (*path, i), dropped) for i, item in enumerate(value)]
    if isinstance(value, str):
        return _expand_string(value, env, path)
    return value


# --- environment fallbacks ----------------------------------------------------------


def _env(env: Mapping[str, str], name: str) -> str | None:
    return (env.get(name) or "").strip() or None


def _provider_from_env(env: Mapping[str, str]) -> tuple[dict[str, Any], str] | None:
    key, url = _env(env, "OPENAI_API_KEY"), _env(env, "OPENAI_BASE_URL")
    if key or url:  # a URL alone is a local server (Ollama, vLLM, ...) that needs no key
        provider = {"type": "openai", "api_key": key, "base_url": url}
        return provider, _env(env, "OPENAI_MODEL") or DEFAULT_OPENAI_MODEL
    key = _env(env, "ANTHROPIC_API_KEY")
    if key:
        provider = {"type": "anthropic", "api_key": key, "base_url": _env(env, "ANTHROPIC_BASE_URL")}
        return provider, _env(env, "ANTHROPIC_MODEL") or DEFAULT_ANTHROPIC_MODEL
    return None


def _apply_env_fallbacks(data: dict[str, Any], env: Mapping[str, str]) -> None:
    # Only when the file says nothing about providers: a file that lists providers is
    # taken as complete, so the environment never silently adds one.
    if "providers" in data:
        return
    found = _provider_from_env(env)
    if found is None:
        return
    provider, model_id = found
    data["providers"] = {"default": provider}
    data.setdefault("models", {"default": {"model_id": model_id}})


# --- validation errors --------------------------------------------------------------


def _data_path(loc: Sequence[str | int], data: Any) -> KeyPath:
    """Pydantic's error location mapped onto the input, dropping union tags."""
    out: list[str | int] = []
    node = data
    for i, part in enumerate(loc):
        last = i == len(loc) - 1
        if not last and isinstance(node, dict) and node.get("type") == part:
            continue  # the tag of a discriminated union: schedule {"type": "at", "at": ...}
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
            node = node[part]
        elif not last:
            continue  # some other step pydantic adds that is not in the input
        out.append(part)
    return tuple(out)


def _unwrap(tp: Any) -> Any:
    if get_origin(tp) is Annotated:
        tp = get_args(tp)[0]
    if get_origin(tp) in (Union, types.UnionType):
        args = [a for a in get_args(tp) if a is not type(None)]
        if len(args) == 1:
            return _unwrap(args[0])
    return tp


def _child_type(tp: Any, part: str | int) -> Any:
    from pydantic import BaseModel

    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        for name, field in tp.model_fields.items():
            if part in (name, field.alias):
                return field.annotation
        return None
    args = get_args(tp)
    if get_origin(tp) is dict and len(args) == 2:
        return args[1]
    if get_origin(tp) is list and args:
        return args[0]
    return None


def _known_keys(parent: KeyPath) -> list[str]:
    from pydantic import BaseModel

    from picobot.config.schema import Config

    tp: Any = Config
    for part in parent:
        tp = _child_type(tp, part)
        if tp is None:
            return []
    tp = _unwrap(tp)
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        return [f.alias or n for n, f in tp.model_fields.items() if not f.exclude]
    return []


def _reason(error: Mapping[str, Any], path: KeyPath) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        key = str(path[-1]) if path else "?"
        close = difflib.get_close_matches(key, _known_keys(path[:-1]), n=1)
        return f"unknown key {key!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
    if kind == "missing":
        return "required key is missing"
    msg = str(error["msg"])
    for prefix in ("Value error, ", "Assertion failed, "):
        msg = msg.removeprefix(prefix)
    return msg


def _dropped_note(path: KeyPath, dropped: Mapping[KeyPath, str]) -> str | None:
    # A failure at (or inside) an object whose `<VAR>` member was dropped is most
    # likely caused by that unset variable: say so.
    for where, var in dropped.items():
        if where[: len(path)] == path:
            at = format_key_path(where)
            return f"environment variable {var} is not set (placeholder <{var}> at {at})"
    return None


def _describe(error: Mapping[str, Any], data: Any, dropped: Mapping[KeyPath, str]) -> tuple[str, str]:
    path = _data_path(error["loc"], data)
    if error["type"] == "missing" and path in dropped:
        var = dropped[path]
        return format_key_path(path), f"environment variable {var} is not set (placeholder <{var}>)"
    reason = _reason(error, path)
    note = _dropped_note(path, dropped)
    return format_key_path(path), f"{reason}; {note}" if note else reason


def _where(file: Path | None) -> str:
    return f" (in {file})" if file else " (no config file; values from the environment)"


def _validation_error(
    exc: ValidationError, data: Any, file: Path | None, dropped: Mapping[KeyPath, str]
) -> ConfigError:
    # include_input=False: the offending value may be a secret.
    problems = [_describe(e, data, dropped) for e in exc.errors(include_url=False, include_input=False)]
    key_path, reason = problems[0]
    error = ConfigError(key_path, reason + _where(file))
    if len(problems) > 1:
        listing = "\n".join(f"  - {p or '<root>'}: {r}" for p, r in problems)
        # Keep .key_path/.reason about the first problem; the message lists them all.
        error.args = (f"{error}\nall {len(problems)} problems:\n{listing}",)
    error.problems = problems
    return error


def _validate(data: dict[str, Any], file: Path | None, dropped: Mapping[KeyPath, str]) -> Config:
    from pydantic import ValidationError

    from picobot.config.schema import Config

    try:
        return Config.model_validate(data)
    except ValidationError as exc:
        # `from None`: pydantic's own text repeats input values, which may be secrets.
        raise _validation_error(exc, data, file, dropped) from None
    except ConfigError as exc:  # cross-reference checks raise it with the key path
        raise ConfigError(exc.key_path, exc.reason + _where(file)) from None


# --- the entry point ----------------------------------------------------------------


def _reject_runtime_keys(data: Mapping[str, Any], file: Path | None) -> None:
    for key in RUNTIME_KEYS:
        if key in data:
            raise ConfigError(
                key,
                "unknown key (computed at start; use PICOBOT_HOME, DATABASE_URL or REDIS_URL)"
                + _where(file),
            )


@dataclass
class Sources:
    """Steps 1-3 of loading: the environment, the file, and its data with placeholders expanded."""

    home: Path
    env: Mapping[str, str]
    file: Path | None
    data: dict[str, Any]
    dropped: dict[KeyPath, str]  # members left out because their `<VAR>` is unset


def read_sources(
    home: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    path: Path | str | None = None,
) -> Sources:
    """Everything `load_config` does before validation (the parameters are its own)."""
    base_env: Mapping[str, str] = os.environ if environ is None else environ
    home = picobot_home(base_env) if home is None else Path(home).expanduser().absolute()
    cwd = Path.cwd() if cwd is None else Path(cwd)
    env = load_dotenv_layers(home, cwd, base_env)
    file = Path(path).expanduser() if path is not None else find_config_file(home, cwd)
    raw = _read_json(file) if file else {}
    _reject_runtime_keys(raw, file)
    dropped: dict[KeyPath, str] = {}
    try:
        data = expand_placeholders(raw, env, (), dropped)
    except ConfigError as exc:
        raise ConfigError(exc.key_path, exc.reason + _where(file)) from None
    return Sources(home, env, file, data, dropped)


def database_url(env: Mapping[str, str], home: Path) -> str:
    """DATABASE_URL, else SQLite in the home."""
    return _env(env, "DATABASE_URL") or default_database_url(home)


def load_config(
    home: Path | str | None = None,
    environ: Mapping[str, str] | None = None,
    cwd: Path | str | None = None,
    path: Path | str | None = None,
) -> Config:
    """Load the effective configuration; raise ConfigError on any problem.

    `environ` defaults to os.environ and is never modified; `.env` files are layered
    under it. `path` names the file explicitly (it must exist).
    """
    src = read_sources(home, environ, cwd, path)
    for where, var in src.dropped.items():
        log.info("config: %s is unset, so %s is left out", var, format_key_path(where))
    data = src.data
    _apply_env_fallbacks(data, src.env)
    data.update(
        home=src.home,
        config_path=src.file,
        database_url=database_url(src.env, src.home),
        redis_url=_env(src.env, "REDIS_URL"),
        broker_url=_broker_url(src.env),
    )
    return _validate(data, src.file, src.dropped)


def _broker_url(env: Mapping[str, str]) -> str | None:
    """CELERY_BROKER_URL, checked: a scheme Celery can use here (Redis or RabbitMQ), or a ConfigError."""
    url = _env(env, "CELERY_BROKER_URL")
    if url is None:
        return None
    if url_scheme(url) not in REDIS_SCHEMES + AMQP_SCHEMES:
        raise ConfigError("CELERY_BROKER_URL", "must be a redis://, rediss://, sentinel:// or amqp:// URL "
                                               f"(got a {url_scheme(url) or 'scheme-less'} one)")
    return url
