"""The folder-level import graph of picobot/ has no cycle, counting every import: at module level,
inside functions and under TYPE_CHECKING (import-linter's contracts in pyproject.toml see the
first kind only as the interpreter would; this sees them all). And the core names no capability."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "picobot"
CORE = ("runtime", "agent", "gateway")
CAPABILITIES = ("channels", "scheduler", "memory", "skills", "subagents", "mcp", "contrib", "titles", "budgets", "delegates", "plans", "voice", "browser", "approvals", "logstream", "app")


def _module(path: Path, root: Path) -> list[str]:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    return parts[:-1] if parts[-1] == "__init__" else parts


def _targets(node: ast.AST, mod: list[str], is_pkg: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if not node.level:
            return [node.module or ""]
        base = mod if is_pkg else mod[:-1]
        base = base[:len(base) - (node.level - 1)]
        return [".".join(base + ([node.module] if node.module else []))]
    return []


def folder_graph(root: Path = ROOT) -> dict[str, set[str]]:
    """picobot's top-level folders (and modules) -> the ones they import, by any import statement."""
    edges: dict[str, set[str]] = defaultdict(set)
    for path in root.rglob("*.py"):
        mod = _module(path, root)
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            for target in _targets(node, mod, path.name == "__init__.py"):
                parts = target.split(".")
                if parts[0] == "picobot" and len(parts) > 1 and len(mod) > 1 and parts[1] != mod[1]:
                    edges[mod[1]].add(parts[1])
    return edges


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in edges.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in list(edges):
        if v not in index:
            visit(v)
    return found


def test_the_folder_graph_has_no_cycle() -> None:
    assert cycles(folder_graph()) == []


def test_the_core_imports_no_capability() -> None:
    edges = folder_graph()
    assert {f: sorted(edges[f] & set(CAPABILITIES)) for f in CORE if edges[f] & set(CAPABILITIES)} == {}


def test_the_check_sees_imports_in_functions_and_type_checking(tmp_path: Path) -> None:
    pkg = tmp_path / "picobot"
    (pkg / "a").mkdir(parents=True)
    (pkg / "b").mkdir()
    (pkg / "a" / "__init__.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                                           "    from picobot.b import x\n")
    (pkg / "b" / "__init__.py").write_text("def f():\n    from ..a import y\n")
    edges = folder_graph(pkg)
    assert edges == {"a": {"b"}, "b": {"a"}} and cycles(edges) == [["a", "b"]]
