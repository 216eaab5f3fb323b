"""The characters a tool's schema adds to a model request (the budget gate's estimate), per tool once.

Serialising every tool's JSON schema for every turn was ~2 % of a worker's CPU per turn. A process
keeps the same tool objects from turn to turn, so the size is kept per (name, description, schema
object); the cache holds the schema object itself, so its id cannot be reused while it is cached.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from typing import Any, Iterable

MAX_ENTRIES = 2048

_sizes: OrderedDict[tuple[str, str, int], tuple[Any, int]] = OrderedDict()
_lock = threading.Lock()


def tools_chars(tools: Iterable[Any]) -> int:
    """Characters of the tools' names, descriptions and JSON schemas."""
    total = 0
    for t in tools:
        key = (t.name, t.description, id(t.parameters))
        with _lock:
            found = _sizes.get(key)
        if found is None or found[0] is not t.parameters:
            size = len(t.name) + len(t.description) + len(json.dumps(t.parameters))
            with _lock:
                _sizes[key] = (t.parameters, size)
                while len(_sizes) > MAX_ENTRIES:
                    _sizes.popitem(last=False)
        else:
            size = found[1]
        total += size
    return total
