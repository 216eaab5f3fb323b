"""What a worker publishes and the gateway merges: hostile bodies never raise, good ones round-trip."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings, strategies as st
from prometheus_client.parser import text_string_to_metric_families

from picobot.observability import publish
from picobot.observability.gateway import merge
from picobot.observability.metrics import Metrics
from picobot.plugins.types import ModelCallView, ToolCallRecord

json_values = st.recursive(st.none() | st.booleans() | st.floats(allow_nan=False) | st.integers() | st.text(max_size=20),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=20)


@settings(max_examples=300, deadline=None)
@given(st.one_of(st.text(max_size=200), json_values.map(json.dumps), st.binary(max_size=50)))
def test_a_hostile_body_is_dropped_not_raised(raw: Any) -> None:
    parsed = publish._parse(raw)
    if parsed is not None:
        families: dict = {}
        merge(families, parsed.families, parsed.process, parsed.host)  # never raises either


@settings(max_examples=200, deadline=None)
@given(st.lists(json_values, max_size=5))
def test_hostile_samples_are_skipped(sample_list: list) -> None:
    families: dict = {}
    merge(families, [{"name": "picobot_x", "type": "gauge", "help": "h", "samples": sample_list}], "p", "h")
    for family in families.values():
        assert all(s.labels["process"] == "p" for s in family.samples)


def test_a_snapshot_round_trips_through_the_merge() -> None:
    m = Metrics()
    m.turn_started("t1", "web", 100.0)
    m.model_call("t1", ModelCallView("default", "gpt", 100.5, 1.5, 0.25, 10, 5, 2, "stop"))
    m.tool_call(ToolCallRecord("c1", "bash", "timeout", 101.0, 2.0))
    m.turn_ended("t1", "web", "completed", 103.0)
    raw = json.dumps({"process": "w1@h", "host": "h", "at": 1.0, "families": publish.snapshot(m.registry)})
    parsed = publish._parse(raw)
    assert parsed is not None
    families: dict = {}
    merge(families, parsed.families, parsed.process, parsed.host)
    merge(families, publish.snapshot(m.registry), "web:x", "h")  # a second process: same families, merged

    from prometheus_client import CollectorRegistry, generate_latest

    class Fixed:
        def collect(self):  # type: ignore[no-untyped-def]
            return list(families.values())

    reg = CollectorRegistry(auto_describe=False)
    reg.register(Fixed())  # type: ignore[arg-type]
    text = generate_latest(reg).decode()
    found = {(s.name, tuple(sorted(s.labels.items()))): s.value
             for f in text_string_to_metric_families(text) for s in f.samples}
    assert found[("picobot_turns_total", (("channel", "web"), ("host", "h"), ("process", "w1@h"),
                                         ("status", "completed")))] == 1
    assert found[("picobot_tool_calls_total", (("host", "h"), ("outcome", "timeout"), ("process", "web:x"),
                                              ("tool", "bash")))] == 1
    assert found[("picobot_first_token_seconds_sum", (("channel", "web"), ("host", "h"), ("process", "w1@h")))] == 0.75
    assert found[("picobot_turn_duration_seconds_sum", (("channel", "web"), ("host", "h"), ("process", "w1@h")))] == 3.0
    assert not any(name.endswith("_created") for name, _ in found)
