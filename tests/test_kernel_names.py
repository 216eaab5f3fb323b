"""The kernel knows no capability, measured: how often each kernel file names a capability (a platform, memory,
skills, the scheduler, approvals, …), against the ledger tests/kernel_mentions.json.

A ratchet, not yet a zero: the kernel still names capabilities in places (the config schema's sections, the
tables, the web's pages and APIs, the CLI's commands; docs/PLUGINS.md, "What the kernel still names"). A change
may lower a count (then `python -m tests.test_kernel_names --write` records the new ledger) but never raise one
or add a file: a capability reaches the kernel through the plugin hooks, never by name.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LEDGER = Path(__file__).resolve().parent / "kernel_mentions.json"
KERNEL = ("picobot/runtime", "picobot/agent", "picobot/gateway", "picobot/config", "picobot/storage", "picobot/cli",
          "web", "worker")
CAPABILITIES = ("feishu", "lark", "telegram", "wechat", "ilink", "qq", "approval", "memor", "knowledge", "skill",
                "subagent", "scheduler", "mcp", "webhook", "budget", "title", "voice", "browser", "delegate", "todo",
                "tracing", "openai_api")
_NAMED = re.compile("(?i)(" + "|".join(CAPABILITIES) + ")")


def mentions(root: Path = ROOT) -> dict[str, dict[str, int]]:
    """{kernel file: {capability: times named}} for the Python files of the kernel folders."""
    found: dict[str, dict[str, int]] = {}
    for folder in KERNEL:
        for path in sorted((root / folder).rglob("*.py")):
            for match in _NAMED.finditer(path.read_text(encoding="utf-8")):
                counts = found.setdefault(path.relative_to(root).as_posix(), {})
                counts[match.group(1).lower()] = counts.get(match.group(1).lower(), 0) + 1
    return found


def test_no_kernel_file_names_a_capability_more_than_the_ledger_says() -> None:
    ledger = json.loads(LEDGER.read_text())
    grown = []
    for file, counts in mentions().items():
        for name, count in counts.items():
            allowed = ledger.get(file, {}).get(name, 0)
            if count > allowed:
                grown.append(f"{file} names {name!r} {count} times (the ledger allows {allowed})")
    assert not grown, ("the kernel must not learn a capability's name; register through a plugin hook instead "
                       "(docs/PLUGINS.md):\n" + "\n".join(grown))


def test_the_ledger_counts_what_is_there() -> None:
    """A lowered count is recorded, so the ratchet keeps what was won."""
    now = mentions()
    ledger = json.loads(LEDGER.read_text())
    stale = [f"{file}: {name} {count} -> {now.get(file, {}).get(name, 0)}" for file, counts in ledger.items()
             for name, count in counts.items() if now.get(file, {}).get(name, 0) < count]
    assert not stale, ("kernel files name capabilities less often than the ledger says; record it with "
                       "`python -m tests.test_kernel_names --write`:\n" + "\n".join(stale))


def test_the_count_sees_a_new_mention(tmp_path: Path) -> None:
    (tmp_path / "picobot" / "runtime").mkdir(parents=True)
    (tmp_path / "picobot" / "runtime" / "x.py").write_text("from picobot.channels.telegram import api\n")
    assert mentions(tmp_path) == {"picobot/runtime/x.py": {"telegram": 1}}


if __name__ == "__main__" and "--write" in sys.argv:
    LEDGER.write_text(json.dumps(mentions(), indent=1, sort_keys=True) + "\n")
    print(f"{LEDGER.name}: {sum(sum(c.values()) for c in mentions().values())} mentions in {len(mentions())} files")
