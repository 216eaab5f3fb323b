"""The package imports nothing from PicoBot but the SDK, `picobot.plugins`."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent.parent / "picobot_qq"


def picobot_imports(path: Path) -> list[str]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
    return [name for name in found if name == "picobot" or name.startswith("picobot.")]


def test_only_the_sdk_is_imported_from_picobot() -> None:
    sources = sorted(PACKAGE.rglob("*.py"))
    assert len(sources) >= 8
    wrong = {str(p.relative_to(PACKAGE)): names for p in sources
             if (names := [n for n in picobot_imports(p) if n != "picobot.plugins"])}
    assert wrong == {}
    assert any(picobot_imports(p) for p in sources)  # the scan sees the SDK imports it allows


def test_no_dynamic_import_gets_around_the_rule() -> None:
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text()
        assert "importlib" not in text and "__import__" not in text, path
