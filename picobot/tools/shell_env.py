"""The environment `bash` runs with: a short allowlist plus what the user names, never PicoBot's own.

PicoBot's environment holds API keys, REDIS_URL, DATABASE_URL and whatever an operator
exported; a denylist always misses one. So nothing passes unless it is on this list or
named in `tools.bash.env`.
"""

from __future__ import annotations

import os
from typing import Mapping

# Harmless variables that programs expect: locale, terminal, identity, paths.
ALLOWED = frozenset({
    "PATH", "HOME", "LANG", "LANGUAGE", "TZ", "TERM", "COLORTERM", "NO_COLOR", "USER", "LOGNAME",
    "SHELL", "TMPDIR", "COLUMNS", "LINES", "PAGER", "EDITOR",
    # Windows: cmd.exe and most programs do not start without these.
    "SYSTEMROOT", "SYSTEMDRIVE", "WINDIR", "COMSPEC", "PATHEXT", "TEMP", "TMP", "USERPROFILE",
    "APPDATA", "LOCALAPPDATA", "PROGRAMFILES", "PROGRAMDATA", "NUMBER_OF_PROCESSORS", "PROCESSOR_ARCHITECTURE", "OS",
})
ALLOWED_PREFIXES = ("LC_",)
FALLBACK_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def command_env(user_env: Mapping[str, str | None] | None = None,
                environ: Mapping[str, str] | None = None,
                overrides: Mapping[str, str] | None = None) -> dict[str, str]:
    """The allowlisted part of environ, then `tools.bash.env` (None = pass through), then overrides."""
    source = os.environ if environ is None else environ
    env = {k: v for k, v in source.items() if k in ALLOWED or k.startswith(ALLOWED_PREFIXES)}
    for name, value in (user_env or {}).items():
        if value is None:
            if name in source:
                env[name] = source[name]
        else:
            env[name] = value
    env.update(overrides or {})
    env.setdefault("PATH", FALLBACK_PATH)
    return {k: v for k, v in env.items() if _passable(k, v)}


def _passable(name: str, value: str) -> bool:
    # execve rejects NUL and "=" in names; a lone surrogate cannot be encoded for the OS.
    if not name or "=" in name or "\x00" in name or "\x00" in value:
        return False
    try:
        os.fsencode(name), os.fsencode(value)
    except UnicodeError:
        return False
    return True
