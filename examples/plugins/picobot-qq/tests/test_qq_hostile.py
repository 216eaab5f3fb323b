"""Frames a platform (or someone posing as one) should never send: each is dropped or read safely."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from picobot_qq.message import MAX_SEGMENTS, FrameError, load_frame, parse_message, plain_text, split_text

LIMIT = 1024 * 1024


@pytest.mark.parametrize("raw, why", [
    ("[" * 100_000 + "]" * 100_000, "deep"),
    ("{\"a\": " + "[" * 40 + "]" * 40 + "}", "deeper than"),
    ('{"x": NaN}', "not JSON"),
    ('{"x": -Infinity}', "not JSON"),
    ("[1, 2]", "not an object"),
    ('"text"', "not an object"),
    ("{", "not JSON"),
    ("", "not JSON"),
    ("x" * (LIMIT + 1), "over"),
    (b"\xff" * (LIMIT + 1), "over"),
    (12, "type int"),
])
def test_bad_frames_are_refused_with_a_reason(raw: object, why: str) -> None:
    with pytest.raises(FrameError, match=why):
        load_frame(raw, LIMIT)


def test_lone_surrogates_become_replacement_characters() -> None:
    frame = load_frame('{"message": "a\\ud800b", "\\udfff": ["\\ud83d"]}', LIMIT)
    assert frame == {"message": "a\ufffdb", "\ufffd": ["\ufffd"]}
    json.dumps(frame).encode("utf-8")  # storable anywhere


def test_bytes_that_are_not_utf8_are_read_with_replacements() -> None:
    assert load_frame(b'{"t": "\xff"}', LIMIT) == {"t": "\ufffd"}


def test_wrong_types_and_empty_values_in_a_message() -> None:
    assert parse_message([{"type": "text", "data": {"text": None}}, {"type": "at", "data": {"qq": True}}]) == [
        parse_message([{"type": "text"}])[0], parse_message([{"type": "at"}])[0]]
    assert plain_text(parse_message([{"type": "text", "data": {}}, {"type": "at", "data": {}}]), "1") == "@"
    assert parse_message("") == []


def test_huge_messages_are_capped() -> None:
    assert len(parse_message([{"type": "text", "data": {"text": "x"}}] * 10_000)) == MAX_SEGMENTS
    assert len(parse_message("[CQ:face,id=1]" * 10_000)) == MAX_SEGMENTS
    text = plain_text(parse_message("y" * 300_000), "1")
    assert len(text) < 100_100 and text.endswith("characters]")


json_values = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                           lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                           max_leaves=30)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_any_json_value_as_a_message_parses_without_raising(value: object) -> None:
    for segment in parse_message(value):
        assert isinstance(segment.type, str) and all(isinstance(v, str) for v in segment.data.values())
    plain_text(parse_message(value), "10001")


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_any_text_as_a_cq_string_or_a_frame_never_raises_anything_else(text: str) -> None:
    plain_text(parse_message(text), "10001")
    try:
        frame = load_frame(text, LIMIT)
    except FrameError:
        return
    json.dumps(frame, allow_nan=False).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from("ab \n界😀"), max_size=600), st.integers(min_value=10, max_value=200))
def test_split_parts_fit_and_keep_every_word(text: str, limit: int) -> None:
    parts = split_text(text, limit)
    assert all(0 < len(p) <= limit for p in parts)
    assert "".join(parts).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")
