"""The core (picobot/) imports neither the web framework nor the task system: web/ and worker/ are adapters."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FORBIDDEN = {"flask", "flask_sock", "werkzeug", "gunicorn", "celery", "kombu", "redbeat", "web", "worker"}


def _top_level_imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_core_module_imports_flask_celery_web_or_worker() -> None:
    found = {str(p.relative_to(ROOT)): sorted(_top_level_imports(p) & FORBIDDEN)
             for p in sorted((ROOT / "picobot").rglob("*.py"))}
    assert {path: names for path, names in found.items() if names} == {}


def test_the_check_sees_an_import_anywhere_in_a_module(tmp_path: Path) -> None:
    sample = tmp_path / "m.py"
    sample.write_text("def f():\n    if True:\n        from worker.queue import CeleryTaskQueue\n    import flask.json\n")
    assert _top_level_imports(sample) & FORBIDDEN == {"worker", "flask"}
