"""worker/ modules import cleanly on their own and never import each other in a circle."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
WORKER = ROOT / "worker"
MODULES = sorted(f"worker.{p.stem}" for p in WORKER.glob("*.py") if p.stem != "__init__")


def _imported(tree: ast.AST) -> set[str]:
    """Every dotted module name an import statement names, including `from a import b` as `a.b`
    (also those under `if TYPE_CHECKING:`: a cycle a type checker follows is still a cycle)."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def import_graph() -> dict[str, set[str]]:
    graph = {}
    for name in MODULES:
        tree = ast.parse((WORKER / f"{name.split('.')[1]}.py").read_text())
        graph[name] = {dep for dep in _imported(tree) if dep in MODULES and dep != name}
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, str] = {}  # "open" while on the current path, "done" after

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = "open"
        for dep in sorted(graph.get(node, ())):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]  # "open" nodes are exactly those on the path
            if dep not in state and (cycle := visit(dep, path + [dep])):
                return cycle
        state[node] = "done"
        return None

    for start in sorted(graph):
        if start not in state and (cycle := visit(start, [start])):
            return cycle
    return None


def test_the_cycle_finder_finds_a_cycle() -> None:
    # the check below is only worth something if it can fail
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set(), "c": {"a", "b"}}) is None


def test_no_import_cycle_among_worker_modules() -> None:
    graph = import_graph()
    assert {"worker.celery_app", "worker.queue", "worker.tasks"} <= set(graph)
    assert find_cycle(graph) is None, f"import cycle: {' -> '.join(find_cycle(graph) or [])}"


@pytest.mark.parametrize("module", MODULES)
def test_each_worker_module_imports_alone(module: str, tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("OPENAI_", "ANTHROPIC_", "REDIS_URL", "DATABASE_URL", "PICOBOT_"))}
    # worker.app loads the config at import; nothing here connects anywhere
    env.update(PICOBOT_HOME=str(tmp_path / "home"), REDIS_URL="redis://127.0.0.1:1/0")
    r = subprocess.run([sys.executable, "-c", f"import {module}"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]


def test_task_and_queue_names_come_from_one_place() -> None:
    from picobot.cli.processes import worker_argv
    from picobot.runtime import task_names
    from picobot.runtime.task_names import ALL_QUEUES
    from picobot.config import Config
    from worker.celery_app import make_celery

    from picobot.app import build_plugins
    from picobot.plugins.contributions import check_task
    from picobot.titles import TITLE_TASK
    from worker.tasks import register_plugin_tasks

    config = Config(redis_url="redis://127.0.0.1:1/0")
    app = make_celery(config)
    assert set(app.conf.task_routes) == {task_names.TURN_TASK, task_names.SWEEP_TASK}  # the kernel's own two
    app.__dict__["plugins"] = build_plugins(config, discover=False)
    registered = register_plugin_tasks(app, lambda: None)  # as a worker does at worker_init
    names = {value for key, value in vars(task_names).items() if key.endswith("_TASK")}
    # a capability the core must not name keeps its task's name in its own package
    names |= {TITLE_TASK}
    assert names <= set(app.tasks)
    assert set(registered) == names - {task_names.TURN_TASK, task_names.SWEEP_TASK}
    specs = app.plugins.contributions("picobot_tasks", check_task)
    queues = {spec.queue for spec in specs} | {route["queue"] for route in app.conf.task_routes.values()}
    assert queues == set(ALL_QUEUES)
    queues = worker_argv()[worker_argv().index("-Q") + 1]
    assert queues.split(",") == list(ALL_QUEUES)


def test_two_apps_in_one_process_each_register_their_own_tasks() -> None:
    # tasks belong to the app that made them (shared=False): a second app in the same process (the suite's
    # in-process tests make several) got the first one's tasks too, and Celery warned of duplicate names
    import warnings

    from picobot.config import Config
    from worker.celery_app import make_celery

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        apps = [make_celery(Config(redis_url="redis://127.0.0.1:1/0")) for _ in range(2)]
        registered = [set(app.tasks) for app in apps]
    assert registered[0] == registered[1]
    assert not [str(w.message) for w in caught if "already registered" in str(w.message)]
