"""Feishu cards: Markdown card JSON and splitting long answers without breaking code blocks (property tests)."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, given, settings, strategies as st

from picobot.channels.feishu import cards

# Lines built from pieces that stress the splitter: fences, long runs, multi-byte and escaped characters.
_piece = st.sampled_from(["```", "```python", "~~~", "````", "  ```", "``` x`y", "a", "bb ", "中文", "\"\\",
                          "\x01", "| a | b |", "😀", " ", "x" * 50, "y" * 300])
_line = st.lists(_piece, max_size=8).map("".join)
_text = st.lists(_line, max_size=60).map("\n".join)


def _check(text: str, max_chars: int) -> None:
    parts = cards.plan_parts(text, max_chars)
    assert "".join(p.body for p in parts) == text
    for p in parts:
        assert p.body, "no empty parts"
        assert len(p.text) <= max_chars
        assert cards.json_bytes(cards.markdown_card(p.text)) <= cards.CARD_MAX_BYTES
        assert cards.fences_balanced(p.text, max_chars), p.text


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_text, st.integers(min_value=100, max_value=1500))
def test_every_part_within_limits_and_balanced(text, max_chars):
    _check(text, max_chars)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.text(min_size=0, max_size=3000), st.integers(min_value=100, max_value=100_000))
def test_arbitrary_unicode(text, max_chars):
    _check(text, max_chars)


def test_byte_limit_binds_before_the_char_limit():
    text = ("中" * 200 + "\n") * 200  # 40 200 chars, ~120 KB as JSON
    parts = cards.split_markdown(text, 100_000)
    assert len(parts) >= 4
    assert all(cards.json_bytes(cards.markdown_card(p)) <= cards.CARD_MAX_BYTES for p in parts)
    assert "".join(parts) == text


def test_code_block_is_closed_and_reopened_with_its_language():
    code = "".join(f"print({i})\n" for i in range(100))
    text = "Intro\n```python\n" + code + "```\nOutro\n"
    parts = cards.split_markdown(text, 300)
    assert len(parts) > 2
    assert parts[0].startswith("Intro\n```python\n") and parts[0].endswith("```")
    for p in parts[1:-1]:
        assert p.startswith("```python\n") and p.endswith("```")
    assert parts[-1].endswith("Outro\n")


def test_short_text_is_one_part_and_empty_text_none():
    assert cards.split_markdown("hello | a |", 4000) == ["hello | a |"]
    assert cards.split_markdown("", 4000) == []


def test_markdown_card_shape():
    card = cards.markdown_card("**hi**")
    assert card["schema"] == "2.0"
    assert card["body"]["elements"] == [{"tag": "markdown", "content": "**hi**"}]
    streaming = cards.streaming_card()
    assert streaming["config"]["streaming_mode"] is True
    assert streaming["body"]["elements"][0]["element_id"] == cards.STREAM_ELEMENT_ID
    json.dumps(card)


def test_plain_split_keeps_text_and_limits():
    text = "line\n" * 1000
    parts = cards.split_plain(text, 500)
    assert "".join(parts) == text and all(len(p) <= 500 for p in parts)


def test_tail_of_a_cut_line_is_never_read_as_a_fence():
    text = "```\n" + "y" * 72 + "```\n" + "z\n```\n"  # the cut leaves "```" alone unless the splitter avoids it
    for p in cards.plan_parts(text, 100):
        assert cards.fences_balanced(p.text, 100), p.text
