"""The event bus: plugins subscribe (`picobot_subscriptions`), PicoBot publishes turn.started, model.round,
turn.ended and message.delivered. Subscribers run on the bus's thread, in publish order, never in the
turn's: a slow one delays nothing, a failing one is reported and the others still hear. Real PluginHost,
real plugin objects; the whole path through a worker is in tests/test_plugins_e2e.py."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest

from picobot.config import Config
from picobot.plugins import ModelResponse, PluginHost, StageContext, ToolCallView, hookimpl
from picobot.plugins.contributions import ContributionError
from picobot.plugins.events import EventBus, Subscription, check_subscription

CTX = StageContext(session_id="s1", channel="qq", chat_id="private:7", sender_id="7", turn_id="t1", agent="default")


class Listener:
    def __init__(self, *events: str) -> None:
        self.seen: list[dict[str, Any]] = []
        self.events = events or ("turn.started", "model.round", "turn.ended", "message.delivered")

    @hookimpl
    def picobot_subscriptions(self, subscribe: Any) -> None:
        for event in self.events:
            subscribe(event, lambda e, name=event: self.seen.append({"event": name, **e}))


class Broken:
    @hookimpl
    def picobot_subscriptions(self, subscribe: Any) -> None:
        subscribe("model.round", self.boom)
        subscribe("no.such.event", self.boom)

    def boom(self, event: dict[str, Any]) -> None:
        raise RuntimeError("subscriber broke")


class Slow:
    def __init__(self) -> None:
        self.release = threading.Event()

    @hookimpl
    def picobot_subscriptions(self, subscribe: Any) -> None:
        subscribe("turn.started", lambda e: self.release.wait(10))


def _host(tmp_path: Path, *plugins: Any) -> PluginHost:
    host = PluginHost(Config(home=tmp_path), discover=False)
    for i, plugin in enumerate(plugins):
        assert host.register(f"p{i}", plugin, source="entry_point")
    return host


def _turn(host: PluginHost) -> None:
    """What a worker's turn calls, in order (runtime/turn_runner.py, agent/loop.py)."""
    assert host.has("picobot_turn_started") and host.has("post_action")
    host.call("picobot_turn_started", ctx=CTX, queued_at=None)
    host.post_action(CTX, ModelResponse(text="", tool_calls=(ToolCallView("c1", "calculator", {"expr": "2+2"}),)))
    host.post_action(CTX, ModelResponse(text="4", input_tokens=10, output_tokens=1))
    host.call("picobot_turn_ended", ctx=CTX, status="completed")


def test_a_turns_events_arrive_in_order_with_their_fields(tmp_path: Path) -> None:
    listener = Listener()
    host = _host(tmp_path, listener)
    _turn(host)
    host.publish("message.delivered", channel="qq", chat_id="private:7", delivery_id=3, kind="reply",
                 session_id="s1", turn_id="t1")
    assert host.events.drain(5)
    assert [e["event"] for e in listener.seen] == ["turn.started", "model.round", "model.round", "turn.ended",
                                                   "message.delivered"]
    started, call, answer, ended, delivered = listener.seen
    assert started["session_id"] == "s1" and started["chat_id"] == "private:7" and started["agent"] == "default"
    assert call["tool_calls"] == [{"name": "calculator", "arguments": {"expr": "2+2"}}] and call["text"] == ""
    assert answer["text"] == "4" and answer["input_tokens"] == 10
    assert ended["status"] == "completed"
    assert delivered["delivery_id"] == 3


def test_nothing_is_published_or_built_for_events_nobody_heard(tmp_path: Path) -> None:
    host = _host(tmp_path, Listener("turn.ended"))
    assert not host.has("post_action") and host.has("picobot_turn_ended")
    host.post_action(CTX, ModelResponse(text="x"))  # no subscriber for model.round: nothing queued
    assert host.events.drain(5)
    assert not _host(tmp_path).has("picobot_turn_started")


def test_a_failing_subscriber_is_reported_and_the_others_still_hear(tmp_path: Path) -> None:
    listener = Listener("model.round")
    host = _host(tmp_path, listener, Broken())
    host.post_action(CTX, ModelResponse(text="hello"))
    host.post_action(CTX, ModelResponse(text="again"))
    assert host.events.drain(5)
    assert [e["text"] for e in listener.seen] == ["hello", "again"]
    broken = next(s for s in host.statuses() if s["name"] == "p1")
    assert "RuntimeError: subscriber broke" in broken["error"] and broken["errors"] >= 3  # the bad name too


def test_a_slow_subscriber_delays_no_turn_and_a_full_queue_drops(tmp_path: Path) -> None:
    slow = Slow()
    bus = EventBus([Subscription("slow", "turn.started", lambda e: slow.release.wait(10))], lambda *a: None, size=3)
    started = time.monotonic()
    for i in range(10):
        bus.publish("turn.started", {"n": i})
    assert time.monotonic() - started < 1.0  # publish never waits for a subscriber
    assert bus.dropped >= 6
    slow.release.set()
    assert bus.drain(5)
    bus.close()
    host = _host(tmp_path, slow)
    started = time.monotonic()
    for _ in range(5):
        host.call("picobot_turn_started", ctx=CTX, queued_at=None)
    assert time.monotonic() - started < 1.0


@pytest.mark.parametrize("event", ["", "turn", "turn.started ", None, 3, "TURN.STARTED"])
def test_an_unknown_event_is_refused(event: Any) -> None:
    with pytest.raises(ContributionError):
        check_subscription("p", event, print)
    with pytest.raises(ContributionError):
        check_subscription("p", "turn.ended", "not callable")
