"""Agent files: `$PICOBOT_HOME/agents/<id>.md`, named agents defined beside config.json.

    ---
    description: Reviews code changes      # optional: shown in lists and to delegating agents
    model: openai:gpt-4o                   # "<provider>:<model>", or `provider` and `model` keys
    tools: [read, bash, task]              # optional allowlist; absent = every tool
    skills: [code-review]                  # optional allowlist; absent = every skill
    delegates: [tester]                    # agents `task` may hand work to; absent = any, [] = none
    max_tool_iterations: 30
    timeout_secs: 300                      # when it runs as a sub-agent (never above subagents.timeout_secs)
    ---
    The agent's instructions (its system prompt).

The folder is read as a whole: a *generation* holds every usable agent and every file's error. When a
file's name, mtime, size or inode changes, the next `current()` re-reads the folder and swaps in a new
generation; a caller that holds one (a turn in flight) keeps using it. This lives in the config layer
because agent names are config references (channels, jobs, hooks, `/v1` model names) checked at load,
and the values are checked against the loaded `providers` and `models`.
"""

from __future__ import annotations

import logging
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from picobot.domain.definition import Definition, DefinitionError, decode, parse

log = logging.getLogger("picobot.agents")

FOLDER = "agents"
SUFFIX = ".md"
ID_RE = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
MAX_FILE_BYTES = 64 * 1024
MAX_FILES = 512
MAX_DESCRIPTION_CHARS = 300
KEYS = frozenset({"description", "provider", "model", "tools", "skills", "delegates", "max_tool_iterations",
                  "timeout_secs"})


@dataclass(frozen=True)
class FileAgent:
    id: str
    path: str
    provider: str
    model: str
    instructions: str
    description: str = ""
    tools: tuple[str, ...] | None = None
    skills: tuple[str, ...] | None = None
    delegates: tuple[str, ...] | None = None
    max_tool_iterations: int | None = None
    timeout_secs: float | None = None


@dataclass(frozen=True)
class LoadError:
    id: str  # the file's stem (may be no valid id)
    path: str
    error: str


@dataclass(frozen=True)
class Generation:
    """One consistent reading of the folder."""

    number: int
    agents: Mapping[str, FileAgent]
    errors: tuple[LoadError, ...]
    files: frozenset[str]  # stems of every `*.md`, usable or not: names config may refer to

    def error_of(self, agent_id: str) -> LoadError | None:
        return next((e for e in self.errors if e.id == agent_id), None)


@dataclass(frozen=True)
class Known:
    """What a file's values are checked against: the loaded config's keys."""

    providers: frozenset[str]
    models: frozenset[str]
    config_agents: frozenset[str]
    default_provider: str
    default_model: str
    profiles: tuple[tuple[str, str, str], ...] = ()  # (name, provider, model) of config `profiles`

    def profile(self, name: str) -> tuple[str, str] | None:
        for key, provider, model in self.profiles:
            if key == name:
                return provider, model
        return None


class AgentFiles:
    """The agent files of one home; `current()` is cheap (a stat scan) and safe from any thread."""

    def __init__(self, home: Path, known: Known):
        self.folder = home / FOLDER
        self.known = known
        self._lock = threading.Lock()
        self._fingerprint: tuple | None = None
        self._generation = Generation(0, {}, (), frozenset())

    def current(self) -> Generation:
        """The newest generation; re-read only when a file changed since the last call."""
        fingerprint = _scan(self.folder)
        with self._lock:
            if fingerprint != self._fingerprint:
                self._generation = self._load(fingerprint, self._generation.number + 1)
                self._fingerprint = fingerprint
            return self._generation

    def _load(self, fingerprint: tuple, number: int) -> Generation:
        agents: dict[str, FileAgent] = {}
        errors: list[LoadError] = []
        for name, _ in fingerprint:
            stem, path = name[: -len(SUFFIX)], self.folder / name
            try:
                _check_name(name, path)
                agents[stem] = read_agent(path, stem, self.known)
            except DefinitionError as exc:  # a name that is not UTF-8 is shown with '?' for its bad bytes
                errors.append(LoadError(_shown(stem), _shown(str(path)), str(exc)))
        for e in errors:
            log.warning("agent file skipped: %s", e.error)
        return Generation(number, agents, tuple(errors), frozenset(n[: -len(SUFFIX)] for n, _ in fingerprint))


def read_agent(path: Path, stem: str, known: Known) -> FileAgent:
    """The agent a file defines; DefinitionError names the file, line and key of what is wrong."""
    where = str(path)
    if not ID_RE.fullmatch(stem):
        raise DefinitionError(f"{stem[:80]!r} is no valid agent id: name the file with 1-64 lowercase letters, "
                              "digits, '_' or '-', starting with a letter or digit", path=where)
    if stem in known.config_agents:
        raise DefinitionError(f"shadowed by agents.{stem} in config (the config one wins); rename the file",
                              path=where)
    try:
        with open(path, "rb") as fh:
            data = fh.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise DefinitionError(f"it cannot be read ({exc.strerror or type(exc).__name__})", path=where) from None
    doc = parse(decode(data, path=where, max_bytes=MAX_FILE_BYTES), path=where)
    doc.unknown_keys(KEYS)
    provider, model = _model_of(doc, known)
    iterations = doc.number("max_tool_iterations", low=0, high=10_000, whole=True)
    return FileAgent(
        id=stem, path=where, provider=provider, model=model, instructions=doc.body.strip(),
        description=doc.text("description", max_chars=MAX_DESCRIPTION_CHARS, fold=True) or "",
        tools=doc.names("tools", what="tool names", example="[read, bash]"),
        skills=doc.names("skills", what="skill names", example="[pdf-forms]"),
        delegates=_delegates(doc, stem),
        max_tool_iterations=int(iterations) if iterations is not None else None,
        timeout_secs=doc.number("timeout_secs", low=0, high=86_400, what="of seconds "),
    )


def _model_of(doc: Definition, known: Known) -> tuple[str, str]:
    model = doc.text("model", max_chars=200, what="a key of `models`, '<provider>:<model>' or a profile")
    provider = doc.text("provider", max_chars=200, what="a key of `providers`")
    profile = known.profile(model) if model is not None and model not in known.models else None
    if profile is not None:  # a named profile (config `profiles`): its provider and model
        if provider is not None:
            raise doc.error("model", "'model' names a profile, which has its provider; drop the 'provider' key")
        provider, model = profile
        key = "model"
    elif model is not None and ":" in model and model not in known.models:
        if provider is not None:
            raise doc.error("model", "'model' names its provider ('<provider>:<model>'); drop the 'provider' key")
        provider, _, model = model.partition(":")
        key = "model"
    else:
        key = "provider"
    provider = provider or known.default_provider
    model = model or known.default_model
    unconfigured = not known.providers  # as for agents in config: no providers at all is a valid setup
    if provider not in known.providers and not (unconfigured and provider == "default"):
        raise doc.error(key, f"unknown provider {provider[:64]!r} (known: {_list(known.providers)})")
    if model not in known.models and not (unconfigured and model == "default"):
        raise doc.error("model", f"unknown model {model[:64]!r} (known: {_list(known.models)})")
    return provider, model


def _shown(text: str) -> str:
    return text.encode("utf-8", "replace").decode("utf-8")


def _check_name(name: str, path: Path) -> None:
    if _shown(name) != name:  # bytes that are no UTF-8 in a file name: shown, never used
        raise DefinitionError("its file name is not UTF-8; rename it", path=_shown(str(path)))
    if not (path.is_file()):
        raise DefinitionError("it is not a regular file", path=str(path))


def _delegates(doc: Definition, stem: str) -> tuple[str, ...] | None:
    found = doc.names("delegates", what="agent ids", example="[tester, writer]", item=ID_RE)
    if found is not None and stem in found:
        raise doc.error("delegates", f"an agent does not delegate to itself; remove {stem!r}")
    return found


def _scan(folder: Path) -> tuple:
    """(file name, (mtime_ns, size, inode)) of each `*.md`, sorted: what a change of the folder changes."""
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return ()
    found = []
    for entry in entries:
        if entry.name.startswith(".") or not entry.name.endswith(SUFFIX) or len(entry.name) > 255:
            continue
        try:
            st = entry.stat()
        except OSError:
            continue
        found.append((entry.name, (st.st_mtime_ns, st.st_size, st.st_ino)))
    found.sort()
    return tuple(found[:MAX_FILES])


def _list(names: Any) -> str:
    return ", ".join(sorted(names)) or "none"


def report(config: Any) -> dict[str, Any]:
    """Every agent (config, then files) with its model, allowlists and source, and each file's load error:
    what `GET /api/agents` and `picobot agents list` show."""
    generation = config.agent_files().current()
    agents = [_config_entry(name, agent) for name, agent in config.agents.items()]
    for found in generation.agents.values():
        agents.append({
            "name": found.id, "source": "file", "path": found.path, "description": found.description,
            "provider": found.provider, "model": found.model, "tools": _opt(found.tools),
            "skills": _opt(found.skills), "delegates": _opt(found.delegates),
            "max_tool_iterations": found.max_tool_iterations, "timeout_secs": found.timeout_secs,
        })
    errors = [{"name": e.id, "path": e.path, "error": e.error} for e in generation.errors]
    return {"generation": generation.number, "folder": str(config.home / FOLDER), "agents": agents, "errors": errors}


def _config_entry(name: str, agent: Any) -> dict[str, Any]:
    return {"name": name, "source": "config", "path": None, "description": "", "provider": agent.provider,
            "model": agent.model, "tools": None, "skills": None, "delegates": None,
            "max_tool_iterations": agent.max_tool_iterations, "timeout_secs": None}


def _opt(names: tuple[str, ...] | None) -> list[str] | None:
    return list(names) if names is not None else None
