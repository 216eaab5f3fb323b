"""Markdown -> Telegram HTML and the 4096-unit splitter, judged by the fake's parse_html (TDLib's rules).

The properties: whatever the model writes, every part parses as Telegram HTML (tags known, balanced,
nothing inside code), is at most 4096 UTF-16 units once parsed, is not blank, and the parts together
keep all of the text (only whitespace at the cuts may go).
"""

from __future__ import annotations

import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.channels.telegram.markup import to_html
from picobot.channels.telegram.split import MAX_UNITS, split_html, split_plain, units, visible
from scripts.fake_telegram.entities import EntityError, parse_html, u16


def parts_of(markdown: str, limit: int = MAX_UNITS) -> list[tuple[str, str, list]]:
    out = []
    for part in split_html(to_html(markdown), limit):
        plain, entities = parse_html(part)  # raises EntityError: the fake refuses it as Telegram would
        out.append((part, plain, entities))
    return out


def squeeze(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- the renderer, by example ---------------------------------------------------------------------


@pytest.mark.parametrize("markdown, html", [
    ("**bold** and *it* and ~~gone~~", "<b>bold</b> and <i>it</i> and <s>gone</s>"),
    ("`a<b>&c`", "<code>a&lt;b&gt;&amp;c</code>"),
    ("```python\nif a < b:\n    pass\n```", '<pre><code class="language-python">if a &lt; b:\n    pass</code></pre>'),
    ("```\nplain\n```", "<pre>plain</pre>"),
    ("[site](https://e.com/?a=1&b=2)", '<a href="https://e.com/?a=1&amp;b=2">site</a>'),
    ("[bad](javascript:alert(1))", "[bad](javascript:alert(1))"),
    ("- one\n- two\n  - deeper", "• one\n• two\n  • deeper"),
    ("1. a\n2. b", "1. a\n2. b"),
    ("> quoted **b**", "<blockquote>quoted <b>b</b></blockquote>"),
    ("# Title", "<b>Title</b>"),
    ("<script>x</script> & <b>", "&lt;script&gt;x&lt;/script&gt; &amp; &lt;b&gt;"),
    ("a\\\nb", "a\nb"),
])
def test_markdown_becomes_telegram_html(markdown: str, html: str) -> None:
    assert to_html(markdown) == html
    parse_html(html)


def test_nested_formatting_and_quotes_stay_valid() -> None:
    md = "> outer\n> > inner *x*\n> - item **b `c`**\n\n***both*** and **a *b* c**"
    plain, entities = parse_html(to_html(md))
    assert "inner" in plain and {"bold", "italic", "blockquote", "code"} <= {e["type"] for e in entities}


# --- the splitter, by example --------------------------------------------------------------------


def test_a_10000_character_answer_with_code_splits_into_parts_telegram_accepts() -> None:
    section = ("## Part {n}\n\nSome **bold with *nested italic* and `code`** and a [link](https://e.com/{n}) 😀.\n\n"
               "```python\n" + "\n".join(f"print({{n}}, {j})  # <&> ünïcødé" for j in range(12)) + "\n```\n\n"
               "- item ~~one~~\n- item **two**\n\n> a quote with *style*\n\n")
    md = "".join(section.format(n=n) for n in range(25))
    assert len(md) > 10_000
    parts = parts_of(md)
    assert len(parts) >= 3
    for part, plain, _ in parts:
        assert u16(plain) <= MAX_UNITS
    assert squeeze("".join(p for _, p, _ in parts)) == squeeze(visible(to_html(md)))


def test_a_long_code_block_is_reopened_with_its_language() -> None:
    md = "```js\n" + "\n".join(f"const x{j} = {j};" + "/" * 40 for j in range(300)) + "\n```"
    parts = parts_of(md)
    assert len(parts) > 1
    for part, _, entities in parts:
        assert part.startswith('<pre><code class="language-js">') and part.endswith("</code></pre>")
        assert any(e.get("language") == "js" for e in entities)


def test_cuts_fall_between_paragraphs_then_lines() -> None:
    paragraphs = ["word " * 150 + "end." for _ in range(12)]  # ~760 chars each
    parts = parts_of("\n\n".join(paragraphs))
    for _, plain, _ in parts:
        assert plain.rstrip().endswith("end.")


def test_astral_characters_count_two_units() -> None:
    parts = split_html("😀" * 5000)
    assert [units(p) for p in parts] == [4096, 4096, 1808]
    assert all(u16(parse_html(p)[0]) <= MAX_UNITS for p in parts)


def test_one_line_without_spaces_is_cut_anywhere_but_inside_an_entity() -> None:
    parts = split_html("&amp;" * 5000)
    assert [u16(parse_html(p)[0]) for p in parts] == [4096, 904]


def test_blank_text_has_no_parts() -> None:
    assert split_html(to_html("   \n\n  ")) == [] and split_plain("") == []


def test_plain_split_keeps_text_verbatim() -> None:
    text = "<b>not a tag</b> & " * 600
    parts = split_plain(text)
    assert all(units(p) <= MAX_UNITS for p in parts) and squeeze("".join(parts)) == squeeze(text)


def test_the_fake_refuses_what_telegram_refuses() -> None:
    for bad in ("<b>open", "<b><i>x</b></i>", "<div>x</div>", "a < b", "</b>", '<span class="x">y</span>',
                "<code><b>x</b></code>"):
        with pytest.raises(EntityError):
            parse_html(bad)
    assert parse_html("a &amp; b &lt; c &#128512; &nbsp;")[0] == "a & b < c 😀 &nbsp;"


# --- properties ----------------------------------------------------------------------------------

_pieces = st.sampled_from([
    "**", "*", "_", "__", "~~", "`", "```", "```python\n", "\n```\n", "[", "](", ")", "https://e.com/x?a=1&b=2",
    "<", ">", "&", "&amp;", "<b>", "</i>", "# ", "## ", "- ", "* ", "1. ", "> ", "> > ", "\n", "\n\n", "    ",
    "|a|b|\n|-|-|\n|1|2|\n", "---\n", "\\", "😀", "𝕏", "ü", "中文", "\u200b", " ", "word", "x" * 50,
])
markdown_text = st.lists(st.one_of(_pieces, st.text(max_size=20)), max_size=80).map("".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(markdown_text, st.sampled_from([MAX_UNITS, 200, 37]))
def test_any_markdown_renders_into_parts_telegram_accepts(markdown: str, limit: int) -> None:
    parts = parts_of(markdown, limit)
    for part, plain, _ in parts:
        assert 0 < u16(plain) <= limit and plain.strip()
    assert squeeze("".join(p for _, p, _ in parts)) == squeeze(visible(to_html(markdown)))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(markdown_text, min_size=20, max_size=60).map("\n\n".join))
def test_long_markdown_splits_at_4096_units(markdown: str) -> None:
    for _, plain, _ in parts_of(markdown):
        assert u16(plain) <= MAX_UNITS


@settings(max_examples=200, deadline=None)
@given(st.text(), st.sampled_from([MAX_UNITS, 50, 2]))
def test_any_plain_text_splits_within_the_limit(text: str, limit: int) -> None:
    parts = split_plain(text, limit)
    assert all(0 < units(p) <= limit for p in parts)
    assert squeeze("".join(parts)) == squeeze(text)
