"""Hostile values at the SDK's registration boundary and in a route's answer: whatever a plugin hands over —
any text (lone surrogates, NUL, huge), any JSON-ish value (NaN, deep nesting), wrong types — is taken or refused
with a ContributionError, never another exception, and an answer is always encodable or refused."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given, settings, strategies as st

from picobot.plugins.contributions import (
    ContributionError, HttpRequest, HttpResponse, as_response, check_beat, check_cli, check_page, check_process,
    check_provider_adapter, check_route, check_settings, check_task,
)
from picobot.plugins.events import check_subscription

anything = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text() | st.binary(max_size=64),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)


def _refused_or_taken(check: Any, *args: Any, **kwargs: Any) -> None:
    try:
        check("p", *args, **kwargs)
    except ContributionError:
        pass


@settings(max_examples=200, deadline=None)
@given(method=anything, path=anything, websocket=st.booleans(), size=anything)
def test_a_route_of_anything_is_taken_or_refused(method: Any, path: Any, websocket: bool, size: Any) -> None:
    _refused_or_taken(check_route, method, path, print, websocket=websocket, max_body_bytes=size)


@settings(max_examples=200, deadline=None)
@given(name=anything, queue=anything, every=anything, cron=anything, expires=anything, args=anything)
def test_tasks_beat_processes_commands_settings_pages_events_of_anything(name: Any, queue: Any, every: Any, cron: Any,
                                                                         expires: Any, args: Any) -> None:
    _refused_or_taken(check_task, name, print, queue=queue)
    _refused_or_taken(check_beat, name, name, every=every, cron=cron, queue=queue, expires=expires, args=args)
    _refused_or_taken(check_process, name, print, instances=None)
    _refused_or_taken(check_cli, name, print)
    _refused_or_taken(check_settings, name, dict)
    _refused_or_taken(check_page, name, name, name, icon=queue, group=queue)
    _refused_or_taken(check_subscription, name, print)
    _refused_or_taken(check_provider_adapter, name, args)


@settings(max_examples=300, deadline=None)
@given(status=anything, body=anything, headers=st.dictionaries(st.text(max_size=10), st.text(max_size=10), max_size=3))
def test_an_answer_is_encodable_or_refused(status: Any, body: Any, headers: dict[str, str]) -> None:
    for answer in (HttpResponse(status, body, headers), as_response((status, headers, body)), as_response(body)):
        try:
            code, out_headers, data = answer.encoded()
        except (ContributionError, ValueError):  # ValueError: NaN in a JSON body; the route answers 500
            continue
        assert 100 <= code <= 599 and isinstance(data, bytes)
        if out_headers.get("Content-Type") == "application/json":
            json.loads(data)  # valid JSON, surrogates escaped
        if isinstance(answer.body, str):
            data.decode("utf-8")  # text: surrogates escaped, never an encode error on the socket


@settings(max_examples=200, deadline=None)
@given(body=st.binary(max_size=256) | st.text().map(lambda t: t.encode("utf-8", "surrogatepass")))
def test_a_request_body_is_json_or_a_value_error(body: bytes) -> None:
    try:
        HttpRequest("POST", "/p", body=body).json()
    except ValueError:
        pass


def test_deep_nesting_is_a_value_error() -> None:
    deep = b"[" * 200_000 + b"]" * 200_000
    try:
        HttpRequest("POST", "/p", body=deep).json()
    except ValueError as exc:
        assert "nests too deep" in str(exc)
