"""`delegate_to_cli`: hand a task to a configured coding CLI and answer with what it printed."""

from __future__ import annotations

import os
import secrets as random_tokens
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Mapping

from picobot.config.delegates import PROMPT, DelegateConfig
from picobot.errors import ToolError, TurnCancelled
from picobot.security.redact import is_secret_key, redact
from picobot.security.sandbox import EgressLink
from picobot.tools.base import Tool, ToolContext
from picobot.tools.files import display_path, resolve_path, workspace_root
from picobot.tools.shell import CappedOutput, launch_spec
from picobot.delegates.process import Run, Tee, save_log

MAX_PROMPT_CHARS = 100_000
TASKS_FOLDER = "tasks"
LOGS_FOLDER = "cli_outputs"


class DelegateTool(Tool):
    name = "delegate_to_cli"
    parameters: dict[str, Any]

    def __init__(self, delegates: Mapping[str, DelegateConfig], home: Path) -> None:
        self.delegates = dict(delegates)
        self.home = Path(home)
        self._egress = EgressLink()
        self.description = "A coding CLI does a whole task in a new tasks/ dir (or cwd)."
        self.parameters = {
            "type": "object",
            "properties": {
                "cli": {"enum": sorted(self.delegates)},
                "prompt": {"type": "string"},
                "cwd": {"type": "string"},
            },
            "required": ["cli", "prompt"],
            "additionalProperties": False,
        }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        ctx.cancel.raise_if_cancelled()
        name, prompt = _arg(args, "cli"), _arg(args, "prompt")
        spec = self.delegates.get(name)
        if spec is None:
            raise ToolError(f"Unknown CLI {name[:40]!r}; configured: {', '.join(sorted(self.delegates))}.")
        if len(prompt) > MAX_PROMPT_CHARS:
            raise ToolError(f"The prompt is {len(prompt)} characters; keep it under {MAX_PROMPT_CHARS}.")
        root = workspace_root(ctx)
        folder = self._folder(args, spec, root, name)
        argv = [spec.command, *(arg.replace(PROMPT, prompt) for arg in spec.args)]
        argv, env = launch_spec(argv, root, ctx, self._egress, chdir=folder, overrides=spec.env)
        hidden = ctx.secrets | _env_secrets(spec.env)
        return self._run(name, spec, argv, env, folder, root, ctx, hidden)

    def _folder(self, args: dict[str, Any], spec: DelegateConfig, root: Path, name: str) -> Path:
        raw = args.get("cwd") if args.get("cwd") is not None else spec.cwd
        if raw is not None:
            if not isinstance(raw, str):
                raise ToolError("'cwd' must be a folder path in the workspace.")
            folder = resolve_path(raw, root)
            if not folder.is_dir():
                raise ToolError(f"cwd {raw!r} is not a folder in the workspace.")
            return folder
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
        folder = root / TASKS_FOLDER / f"{stamp}-{name}-{random_tokens.token_hex(3)}"
        folder.mkdir(parents=True)
        return folder

    def _run(self, name: str, spec: DelegateConfig, argv: list[str], env: dict[str, str], folder: Path,
             root: Path, ctx: ToolContext, hidden: frozenset[str]) -> str:
        logs = self.home / LOGS_FOLDER
        logs.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
        log_path = logs / f"{stamp}-{name}.log"
        raw_path = logs / f".{stamp}-{name}.raw"
        capped = CappedOutput(spec.max_output_chars)
        started = time.monotonic()
        with ctx.gate.side_effect(), open(os.open(raw_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as raw:
            tee = Tee(capped, raw)
            try:
                run = Run(argv, env, folder, tee)
            except ToolError:  # the program could not start: nothing to keep
                raw_path.unlink(missing_ok=True)
                raise
            exited = run.wait(spec.timeout_secs, ctx.cancel)
        save_log(raw_path, log_path, hidden, tee.dropped)
        took = time.monotonic() - started
        output = redact(capped.text(), hidden) or "(no output)"
        where = f"Folder: {display_path(folder, root)}. Full output: {log_path}"
        if ctx.cancel.cancelled:
            raise TurnCancelled(ctx.cancel.reason or "stopped")
        if not exited:
            raise ToolError(f"{name} timed out after {spec.timeout_secs:g} s; it and its child processes were "
                            f"stopped. {where}\nOutput so far:\n{output}")
        return f"{name} exited with code {run.proc.returncode} after {took:.0f} s. {where}\n{output}"


def _arg(args: dict[str, Any], key: str) -> str:
    value = args.get(key)
    if not isinstance(value, str) or not value.strip():
        raise ToolError(f"'{key}' must be a non-empty string.")
    if "\x00" in value:
        raise ToolError(f"'{key}' contains a NUL character.")
    try:
        os.fsencode(value)
    except UnicodeError:
        raise ToolError(f"'{key}' is not valid text (it holds a lone surrogate).") from None
    return value


def _env_secrets(env: Mapping[str, str]) -> frozenset[str]:
    """Values of the CLI's own variables whose names say they are secret (API keys, tokens)."""
    return frozenset(v for k, v in env.items() if is_secret_key(k) and len(v) >= 4)
