"""The parallel suite's order: the test files that take longest start first.

`scripts/test` runs the suite with pytest-xdist, one test file per worker at a time (`--dist loadfile`).
A long file that starts last keeps one worker busy after the others have finished: on two cores the
scheduler fault tests alone take four minutes. Handing out the longest files first (the classic
longest-processing-time rule) keeps the tail short.

Each file's time comes from `tests/file_durations.json`: seconds per test file, from an earlier whole
run. Every parallel run writes its own figures to `test-artifacts/file-durations.json`; copy that file
over the committed one when files were added or got much slower. A file missing from it counts as
its number of tests times `NEW_FILE_SECONDS_PER_TEST`. The order never changes what runs, only when.
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SEED = ROOT / "tests" / "file_durations.json"
OUTPUT = ROOT / "test-artifacts" / "file-durations.json"
NEW_FILE_SECONDS_PER_TEST = 1.0

_spent: dict[str, float] = defaultdict(float)


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def known_durations(path: Path = SEED) -> dict[str, float]:
    """Seconds per test file from `path`; {} when it is missing or not a JSON object of numbers."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): float(v) for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def longest_first(nodeids: list[str], durations: dict[str, float]) -> list[int]:
    """The order (indexes into `nodeids`) that starts the longest files first; a file's tests keep theirs."""
    counts: dict[str, int] = defaultdict(int)
    for nodeid in nodeids:
        counts[_file_of(nodeid)] += 1

    def cost(i: int) -> float:
        path = _file_of(nodeids[i])
        return durations.get(path, counts[path] * NEW_FILE_SECONDS_PER_TEST)

    return sorted(range(len(nodeids)), key=lambda i: -cost(i))  # stable: ties keep collection order


def _parallel(config: pytest.Config) -> bool:
    """A run split across pytest-xdist workers (this process is one of them, or their controller)."""
    if hasattr(config, "workerinput"):
        return True
    numprocesses = getattr(config.option, "numprocesses", None)
    return bool(numprocesses) and getattr(config.option, "dist", "no") != "no"


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    if not _parallel(config):
        return
    order = longest_first([item.nodeid for item in items], known_durations())
    items[:] = [items[i] for i in order]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _spent[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or not _parallel(config) or not _spent:
        return  # the controller of a parallel run writes the figures: it saw every worker's reports
    OUTPUT.parent.mkdir(exist_ok=True)
    figures = {path: round(seconds, 1) for path, seconds in sorted(_spent.items(), key=lambda kv: -kv[1])}
    OUTPUT.write_text(json.dumps(figures, indent=1) + "\n", encoding="utf-8")
