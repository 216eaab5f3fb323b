"""CQ codes and segment arrays, the @ and reply checks, splitting, signatures and tokens."""

from __future__ import annotations

import hashlib
import hmac

from picobot_qq.message import (Segment, bearer_ok, mentions, parse_cq, parse_message, plain_text, reply_id,
                                signature, signature_ok, split_text, unescape)


def test_cq_string_becomes_segments_with_text_between() -> None:
    segments = parse_cq("[CQ:reply,id=77][CQ:at,qq=10001] look &#91;here&#93; [CQ:image,file=a.png,url=https://x/a?b=1&amp;c=2]")
    assert segments == [Segment("reply", {"id": "77"}), Segment("at", {"qq": "10001"}),
                        Segment("text", {"text": " look [here] "}),
                        Segment("image", {"file": "a.png", "url": "https://x/a?b=1&c=2"})]


def test_escapes_are_undone_once() -> None:
    assert unescape("a&amp;#91;b &#44; &#91;&#93; &amp;amp;") == "a&#91;b , [] &amp;"
    assert parse_cq("[CQ:text,text=1&#44;2]") == [Segment("text", {"text": "1,2"})]


def test_text_that_only_looks_like_a_code_stays_text() -> None:
    assert parse_cq("[CQ:] [cq:at,qq=1] [CQ:at,qq=1") == [Segment("text", {"text": "[CQ:] [cq:at,qq=1] [CQ:at,qq=1"})]


def test_segment_array_keeps_string_and_integer_data_only() -> None:
    message = [{"type": "at", "data": {"qq": 10001}}, {"type": "text", "data": {"text": "hi", "x": [1]}},
               {"type": "image", "data": None}, {"data": {"text": "no type"}}, "junk", {"type": 5}]
    assert parse_message(message) == [Segment("at", {"qq": "10001"}), Segment("text", {"text": "hi"}),
                                      Segment("image", {})]
    assert parse_message(None) == [] and parse_message({"type": "text"}) == []


def test_mentions_and_reply_and_plain_text() -> None:
    segments = parse_message("[CQ:reply,id=5][CQ:at,qq=10001] hello [CQ:at,qq=30003,name=bob][CQ:face,id=14]!")
    assert mentions(segments, "10001") and not mentions(segments, "10002") and not mentions(segments, "")
    assert reply_id(segments) == "5"
    assert plain_text(segments, "10001") == "hello @bob[face 14]!"
    assert plain_text(parse_message("[CQ:at,qq=all] news"), "10001") == "@all news"


def test_split_at_paragraphs_then_lines_then_anywhere() -> None:
    text = "a" * 60 + "\n\n" + "b" * 60 + "\n" + "c" * 30
    assert split_text(text, 100) == ["a" * 60, "b" * 60 + "\n" + "c" * 30]
    assert split_text("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]
    assert split_text("   ", 100) == []
    assert split_text("short", 4500) == ["short"]


def test_signature_is_hmac_sha1_of_the_body() -> None:
    body = b'{"post_type":"message"}'
    expected = "sha1=" + hmac.new(b"s3cret", body, hashlib.sha1).hexdigest()
    assert signature("s3cret", body) == expected
    assert signature_ok("s3cret", body, expected) and signature_ok("s3cret", body, expected.upper().replace("SHA1", "sha1"))
    assert not signature_ok("s3cret", body + b" ", expected)
    assert not signature_ok("other", body, expected)
    assert not signature_ok("s3cret", body, None) and not signature_ok("s3cret", body, "")


def test_bearer_token() -> None:
    assert bearer_ok("tok", "Bearer tok") and bearer_ok("tok", "Token tok") and bearer_ok("tok", None, "tok")
    assert not bearer_ok("tok", "Bearer nope") and not bearer_ok("tok", "tok") and not bearer_ok("", "Bearer ")
    assert not bearer_ok("tok", "Bearer to\udcffk")
