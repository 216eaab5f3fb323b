"""Editing an allowlisted set of config.json keys from the web UI, safely.

    changes {key path: value} --check--> allowlist, types, size, no placeholders   (else 400, per key)
      --under a lock on the file's folder--> version check (else 409)
      --> candidate file (temp file in the same folder, fsynced, same mode) --> the project's loader
          and plugin checks (else 400 with their key paths; the temp file is removed)
      --> os.replace over config.json, folder fsynced                            (atomic: old or new)

Only the edited keys change: the rest of the file keeps its content, key order, indentation,
placeholders (`${VAR}`, `<VAR>`) and BOM. The allowlist holds no secret (api keys, tokens,
app secrets, hook secrets are never editable here), and a new value may not carry a placeholder,
so an edit can neither reveal the environment nor write a secret. Nothing reloads the config of a
running process: each key names the processes that read it at start (`restart`).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import math
import os
import re
import tempfile
from copy import deepcopy
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

from picobot.config.loader import _PLACEHOLDER, VERBATIM_KEYS
from picobot.errors import ConfigError
from picobot.security.redact import is_secret_key

ABSENT = "absent"  # the version of a config file that does not exist yet
MAX_CHANGES = 64
MAX_TEXT_CHARS = 100_000
MAX_NAME_CHARS = 1_000
MAX_LIST_ITEMS = 1_000
MAX_ITEM_CHARS = 256
MAX_INT = 10**9
_SEGMENT = re.compile(r"[A-Za-z0-9_-]{1,64}")

WORKER = ("worker",)
INTAKE = ("web", "worker", "channels")  # gateway intake runs in web, in workers (webhook events) and pollers


@dataclass(frozen=True)
class EditableKey:
    pattern: str  # dotted; "*" stands for an existing entry of agents / models / channels
    kind: str  # text | name | int | number | bool | list
    restart: tuple[str, ...]  # processes that read the key at start: web, worker, beat, channels
    help: str


EDITABLE: tuple[EditableKey, ...] = (
    EditableKey("agents.*.system_prompt", "text", WORKER, "The agent's instructions; null: AGENT.md and the built-in prompt."),
    EditableKey("agents.*.model", "name", WORKER, "Which `models` entry the agent uses."),
    EditableKey("agents.*.max_tool_iterations", "int", WORKER, "Tool rounds of one turn (at least 1)."),
    EditableKey("models.*.model_id", "name", WORKER, "The provider's name of the model."),
    EditableKey("models.*.temperature", "number", WORKER, "0 to 2; null: the provider's default."),
    EditableKey("gateway.show_tool_results", "bool", WORKER, "Show tool results in the live turn."),
    EditableKey("gateway.rate_limits.messages_per_chat_per_minute", "int", INTAKE, "0 = off."),
    EditableKey("gateway.rate_limits.messages_per_device_per_minute", "int", INTAKE, "0 = off."),
    EditableKey("gateway.rate_limits.new_dialogs_per_chat_per_hour", "int", INTAKE, "0 = off."),
    EditableKey("gateway.rate_limits.sockets_per_device", "int", ("web",), "Open WebSockets per device; 0 = off."),
    EditableKey("tools.disabled", "list", WORKER, "Tool names the agent does not get."),
    EditableKey("tools.approval.mode", "name", ("web", "worker"),
                "off, ask (dangerous tool calls wait for /approve) or deny (refused without asking)."),
    EditableKey("tools.approval.timeout_secs", "number", WORKER, "Seconds a call waits for a decision; then denied."),
    EditableKey("skills.enabled", "bool", ("web", "worker"), "Skills on or off."),
    EditableKey("memory.enabled", "bool", ("web", "worker", "beat"), "Long-term memory on or off."),
    EditableKey("memory.recall_limit", "int", WORKER, "Knowledge entries recalled into each turn (0 to 50)."),
    EditableKey("subagents.enabled", "bool", WORKER, "The `task` tool (sub-agents) on or off."),
    EditableKey("titles.enabled", "bool", WORKER, "Automatic dialog titles after the first answer on or off."),
    EditableKey("channels.*.allow_from", "list", INTAKE, "Sender ids who may talk on the channel; [\"*\"]: everyone."),
    EditableKey("channels.*.agent", "name", INTAKE, "Which agent answers on the channel."),
)
WILDCARD_SECTIONS = ("agents", "models", "channels")


class EditError(ValueError):
    """A refused edit: HTTP `status`, a `code`, and per-key `problems` [(key path, reason)]."""

    def __init__(self, status: int, code: str, message: str, problems: list[tuple[str, str]] | None = None,
                 **extra: Any):
        super().__init__(message)
        self.status, self.code, self.problems, self.extra = status, code, problems or [], extra


@dataclass
class SaveResult:
    version: str
    saved: list[str]
    restart: list[str]
    path: Path


@dataclass
class Change:
    key: str
    path: tuple[str, ...]
    spec: EditableKey
    value: Any


# --- which keys, which values ----------------------------------------------------------------


def allowed_patterns() -> list[str]:
    return [k.pattern for k in EDITABLE]


def spec_for(path: tuple[str, ...], names: Mapping[str, Any]) -> EditableKey | None:
    """The allowlist entry of a key path; `names[section]` holds the entries a `*` may name."""
    for spec in EDITABLE:
        parts = spec.pattern.split(".")
        if len(parts) != len(path):
            continue
        if all(p == q or (p == "*" and q in names.get(parts[0], ())) for p, q in zip(parts, path)):
            return spec
    return None


def _has_placeholder(text: str) -> bool:
    return _PLACEHOLDER.search(text) is not None


def _check_string(value: Any, cap: int, verbatim: bool) -> str | None:
    if not isinstance(value, str):
        return "must be a string"
    if len(value) > cap:
        return f"is longer than {cap} characters"
    if "\x00" in value:
        return "contains a NUL character"
    if not verbatim and _has_placeholder(value):
        return "may not hold a ${VAR} or <VAR> placeholder here (edit config.json on the server for that)"
    return None


def check_value(spec: EditableKey, leaf: str, value: Any) -> str | None:
    """Why `value` cannot go into a key of this kind, or None. null always may (back to the default)."""
    if value is None:
        return None
    kind = spec.kind
    if kind == "bool":
        return None if isinstance(value, bool) else "must be true or false"
    if kind in ("int", "number"):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return "must be a number" if kind == "number" else "must be a whole number"
        if isinstance(value, float) and not math.isfinite(value):
            return "must be a finite number (not NaN or infinity)"
        if kind == "int" and not (isinstance(value, int) or value.is_integer()):
            return "must be a whole number"
        return None if abs(value) <= MAX_INT else f"must be between -{MAX_INT} and {MAX_INT}"
    if kind in ("text", "name"):
        return _check_string(value, MAX_TEXT_CHARS if kind == "text" else MAX_NAME_CHARS, leaf in VERBATIM_KEYS)
    if kind == "list":
        if not isinstance(value, list):
            return "must be a list of strings"
        if len(value) > MAX_LIST_ITEMS:
            return f"has more than {MAX_LIST_ITEMS} items"
        for i, item in enumerate(value):
            problem = _check_string(item, MAX_ITEM_CHARS, False)
            if problem:
                return f"item {i} {problem}"
        return None
    return "cannot be edited"


def parse_changes(body: Any, names: Mapping[str, Any]) -> list[Change]:
    """The checked changes of a request body {key path: value}; EditError(400) listing every problem."""
    if not isinstance(body, dict) or not body:
        raise EditError(400, "bad_request", "The body must be a JSON object {\"key.path\": value, ...} with at least one key.")
    if len(body) > MAX_CHANGES:
        raise EditError(400, "bad_request", f"At most {MAX_CHANGES} keys per request.")
    changes, problems, refused = [], [], []
    for key, value in body.items():
        shown = key[:200]
        path = tuple(key.split(".")) if isinstance(key, str) else ()
        if not path or len(path) > 6 or not all(_SEGMENT.fullmatch(p) for p in path):
            refused.append(shown)
            continue
        spec = spec_for(path, names)
        if spec is None or any(is_secret_key(p) for p, q in zip(path, spec.pattern.split(".")) if q != "*"):
            refused.append(shown)
            continue
        problem = check_value(spec, path[-1], value)
        if problem:
            problems.append((key, problem))
        elif spec.kind == "int" and isinstance(value, float):
            value = int(value)  # 5.0 from a JSON writer that knows no integers
        changes.append(Change(key, path, spec, value))
    if refused:
        raise EditError(400, "not_editable", f"Not editable from the web UI: {', '.join(refused)}. "
                        "Editable keys (* = an existing agent, model or channel): " + ", ".join(allowed_patterns()) + ".",
                        [(k, "not editable here") for k in refused], allowed=allowed_patterns())
    if problems:
        raise EditError(400, "invalid_value", "; ".join(f"{k}: {r}" for k, r in problems), problems)
    return changes


# --- the file ----------------------------------------------------------------------------------


def version_of(data: bytes | None) -> str:
    """A short hash of the file's bytes (what If-Match / ETag carry); ABSENT for no file."""
    return ABSENT if data is None else hashlib.sha256(data).hexdigest()[:20]


def read_bytes(path: Path) -> bytes | None:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return None


def file_version(path: Path) -> str:
    return version_of(read_bytes(path))


@dataclass(frozen=True)
class JsonStyle:
    indent: str | None
    ensure_ascii: bool
    newline: bool
    bom: bool

    @classmethod
    def of(cls, text: str) -> JsonStyle:
        bom = text.startswith("\ufeff")
        body = text.lstrip("\ufeff")
        found = re.search(r"\n([ \t]+)\S", body)
        indent = found.group(1) if found else (None if "\n" not in body.strip() else "  ")
        ascii_only = "\\u" in body and all(ord(c) < 128 for c in body)
        return cls(indent, ascii_only, body.endswith("\n"), bom)

    def dump(self, data: Any) -> str:
        text = json.dumps(data, indent=self.indent, ensure_ascii=self.ensure_ascii, allow_nan=False)
        return ("\ufeff" if self.bom else "") + text + ("\n" if self.newline else "")


NEW_FILE_STYLE = JsonStyle("  ", False, True, False)


def apply_changes(raw: dict[str, Any], changes: list[Change]) -> dict[str, Any]:
    """A copy of the file's data with each change set (null: the key removed, so its default applies)."""
    data = deepcopy(raw)
    for change in changes:
        node = data
        for part in change.path[:-1]:
            child = node.get(part)
            if not isinstance(child, dict):
                child = node[part] = {}  # a missing section, or one that was not an object (the loader says so)
            node = child
        if change.value is None:
            node.pop(change.path[-1], None)
        else:
            node[change.path[-1]] = change.value
    return data


def _locked_folder(folder: Path) -> int:
    fd = os.open(folder, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # every editor of this folder's config, in any process, one at a time
    return fd


def _write_temp(folder: Path, name: str, text: str, mode: int) -> Path:
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=f".{name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
    except BaseException:
        os.unlink(tmp)
        raise
    return Path(tmp)


def _fsync_folder(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _load_raw(data: bytes | None, path: Path) -> tuple[dict[str, Any], JsonStyle]:
    if data is None:
        return {}, NEW_FILE_STYLE
    try:
        text = data.decode("utf-8")
        raw = json.loads(text.lstrip("\ufeff"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise EditError(409, "file_unreadable", f"{path} is not valid JSON now; fix it on the server first.") from None
    if not isinstance(raw, dict):
        raise EditError(409, "file_unreadable", f"{path}: the top level is not a JSON object; fix it on the server first.")
    return raw, JsonStyle.of(text)


def _problems(exc: ConfigError, tmp: Path, path: Path) -> list[tuple[str, str]]:
    found = getattr(exc, "problems", None) or [(exc.key_path, exc.reason)]
    return [(key or "<root>", reason.replace(f" (in {tmp})", "").replace(str(tmp), str(path))) for key, reason in found]


def save_changes(path: Path, changes: list[Change], expected_version: str,
                 validate: Callable[[Path], Any]) -> SaveResult:
    """Write `changes` into the config file at `path` atomically, if it still has `expected_version`
    ("*": any) and the candidate passes `validate(candidate_path)` (which raises ConfigError).
    A symlinked config.json stays a symlink: its target is what is replaced."""
    path = path.resolve() if path.is_symlink() else path
    folder = path.parent
    lock = _locked_folder(folder)
    try:
        before = read_bytes(path)
        current = version_of(before)
        if expected_version not in ("*", current):
            raise EditError(409, "version_mismatch", "The config file changed since you loaded it; reload and edit again.",
                            version=current)
        raw, style = _load_raw(before, path)
        text = style.dump(apply_changes(raw, changes))
        mode = (path.stat().st_mode & 0o777) if before is not None else 0o600
        tmp = _write_temp(folder, path.name, text, mode)
        try:
            validate(tmp)
        except ConfigError as exc:
            tmp.unlink()
            problems = _problems(exc, tmp, path)
            raise EditError(400, "invalid_config", "; ".join(f"{k}: {r}" for k, r in problems)
                            + f" (in {path}; nothing was written)", problems) from None
        except BaseException:
            tmp.unlink()
            raise
        os.replace(tmp, path)
        _fsync_folder(folder)
    finally:
        os.close(lock)  # closing the descriptor releases the lock
    restart = sorted({p for c in changes for p in c.spec.restart})
    return SaveResult(version_of(text.encode("utf-8")), [c.key for c in changes], restart, path)


# --- what the page shows ---------------------------------------------------------------------


def _lookup(tree: Any, path: tuple[str, ...]) -> tuple[bool, Any]:
    for part in path:
        if not isinstance(tree, dict) or part not in tree:
            return False, None
        tree = tree[part]
    return True, tree


def entries(effective: Mapping[str, Any], running: Mapping[str, Any], raw: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every editable key of this config: its value (what the file gives now), what this process runs,
    whether the file sets it, and which processes need a restart for it. Trees are file-spelled dumps."""
    out = []
    for spec in EDITABLE:
        parts = spec.pattern.split(".")
        names: list[str] = [""] if "*" not in parts else sorted(  # "": no wildcard to fill
            set(effective.get(parts[0]) or {}) | set(running.get(parts[0]) or {}))
        for name in names:
            path = tuple(name if p == "*" else p for p in parts)
            _, value = _lookup(effective, path)
            known, now = _lookup(running, path)
            out.append({"key": ".".join(path), "pattern": spec.pattern, "kind": spec.kind, "help": spec.help,
                        "value": value, "running": now if known else None, "pending": (value != now) if known else True,
                        "in_file": _lookup(raw, path)[0], "restart": list(spec.restart)})
    return out


def read_raw(path: Path) -> dict[str, Any]:
    """The file's own data (no placeholder expanded); {} when it is missing or unreadable."""
    try:
        return _load_raw(read_bytes(path), path)[0]
    except EditError:
        return {}
