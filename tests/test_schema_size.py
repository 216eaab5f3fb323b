"""The tool-schema size the budget gate estimates with: kept per tool, recomputed when a schema changes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from picobot.agent.schema_size import tools_chars


@dataclass
class T:
    name: str
    description: str
    parameters: dict[str, Any] = field(default_factory=dict)


def direct(tools: list[T]) -> int:
    return sum(len(t.name) + len(t.description) + len(json.dumps(t.parameters)) for t in tools)


def test_sizes_match_the_schemas_and_follow_a_new_schema() -> None:
    a = T("calc", "adds", {"type": "object", "properties": {"x": {"type": "number"}}})
    b = T("echo", "says it back", {"type": "object"})
    assert tools_chars([a, b]) == direct([a, b]) and tools_chars([a, b]) == direct([a, b])
    a.parameters = {"type": "object", "properties": {"x": {"type": "number"}, "y": {"type": "string"}}}
    assert tools_chars([a]) == direct([a])  # another schema object: measured again
    assert tools_chars([T("calc", "adds more", a.parameters)]) == direct([T("calc", "adds more", a.parameters)])
    assert tools_chars([]) == 0
