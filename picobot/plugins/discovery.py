"""Finding plugins: entry points of the group `picobot.plugins` and the home's `plugins/*.py` files."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
import sys
from pathlib import Path
from typing import Any

import pluggy

log = logging.getLogger("picobot.plugins")

ENTRY_POINT_GROUP = "picobot.plugins"
HOME_MODULE = "picobot_home_plugins"


def refuse_wrappers(pm: pluggy.PluginManager, plugin: Any) -> None:
    # the host calls each implementation itself (isolation, timeouts): a wrapper would never run as one
    for caller in pm.get_hookcallers(plugin) or ():
        if any(i.plugin is plugin and (i.wrapper or i.hookwrapper) for i in caller.get_hookimpls()):
            raise pluggy.PluginValidationError(plugin, f"hook {caller.name}: wrappers are not supported")


def entry_points() -> list[Any]:
    try:
        found = importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)
    except Exception:  # a broken distribution's metadata must not stop the process
        log.exception("plugin entry points could not be read")
        return []
    seen: set[tuple[str, str]] = set()
    unique = []
    for ep in found:  # one distribution on sys.path twice lists its entry points twice
        if (ep.name, ep.value) not in seen:
            seen.add((ep.name, ep.value))
            unique.append(ep)
    return unique


def dist_version(ep: Any) -> str | None:
    dist = getattr(ep, "dist", None)
    return getattr(dist, "version", None) if dist is not None else None


def version_attr(plugin: Any) -> str | None:
    version = getattr(plugin, "__version__", None)
    return version if isinstance(version, str) else None


def instance(plugin: Any) -> Any:
    # an entry point naming a class: its hooks are methods, so the plugin is an instance
    return plugin() if isinstance(plugin, type) else plugin


def home_files(folder: Path) -> list[Path]:
    """The plugin files of the home's plugins/ folder ("_name.py" are helpers, not plugins)."""
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.glob("*.py") if not p.name.startswith("_"))


def load_file(path: Path) -> Any:
    """A home plugin file, imported as its own module (`picobot_home_plugins.<stem>`)."""
    name = f"{HOME_MODULE}.{path.stem}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ImportError(f"{path} cannot be imported")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickle look a module up by name while it runs
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module
