"""Every top-level module and package of picobot/ has a place in the layers contract (pyproject.toml):
import-linter checks only the modules a layer names, so one left out could import anything unseen."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def layered_names(pyproject: Path = ROOT / "pyproject.toml") -> set[str]:
    """The modules the "Layers: …" contract names, siblings (`|` or `:`) split apart."""
    contracts = tomllib.loads(pyproject.read_text())["tool"]["importlinter"]["contracts"]
    (layers,) = [c["layers"] for c in contracts if c["name"].startswith("Layers")]
    return {name.strip() for line in layers for name in re.split(r"[|:]", line)}


def top_level_names(package: Path = ROOT / "picobot") -> set[str]:
    """picobot.<name> for each module and package directly under picobot/ (not __init__)."""
    found = {f"picobot.{p.stem}" for p in package.glob("*.py") if p.stem != "__init__"}
    return found | {f"picobot.{p.parent.name}" for p in package.glob("*/__init__.py")}


def test_every_top_level_module_is_in_a_layer() -> None:
    assert top_level_names() - layered_names() == set()


def test_the_contract_names_no_module_that_is_gone() -> None:
    assert layered_names() - top_level_names() == set()


def test_the_check_sees_modules_and_packages(tmp_path: Path) -> None:
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "data").mkdir()  # no __init__.py: not a package
    for name in ("__init__.py", "__main__.py", "heap.py"):
        (tmp_path / name).write_text("")
    assert top_level_names(tmp_path) == {"picobot.__main__", "picobot.heap", "picobot.pkg"}
