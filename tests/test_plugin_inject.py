"""A plugin that brings input from outside and listens to what happens, through real processes: a sensor
POSTs to the plugin's route, the plugin injects the reading into a chat (`ports.inject_input`), the worker runs
the turn, the chat's socket sees the answer, and the plugin's event subscriber (on the worker) writes the turn's
model rounds and end. `inject_interrupt` stops a running turn. An untrusted plugin may not inject into a chat of
a channel it does not offer."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any, Iterator

import pytest

from picobot.cli.embedded_redis import free_port
from scripts.fake_llm import FakeLLM
from tests.conftest import add_rule
from tests.http_client import HTTP
from tests.stack import Stack, base_config, wait_for

SENSOR = '''
import json
import os

from picobot.plugins import HttpResponse, hookimpl

LOG = os.environ["PICOBOT_SENSOR_LOG"]


def reading(request, ports):
    body = request.json()
    if body.get("stop"):
        return HttpResponse.json(ports.inject_interrupt("cli_chat", request.params["chat"], "sensor"))
    answer = ports.inject_input("cli_chat", request.params["chat"], body["text"], "sensor", key=body.get("id"))
    return HttpResponse.json(answer)


def note(event):
    with open(LOG, "a") as out:
        out.write(json.dumps(event) + "\\n")


@hookimpl
def picobot_routes(register):
    register("POST", "/sensor/<chat>", reading)


@hookimpl
def picobot_subscriptions(subscribe):
    subscribe("model.round", lambda e: note({"event": "model.round", **e}))
    subscribe("turn.ended", lambda e: note({"event": "turn.ended", **e}))
'''

INTRUDER = '''
from picobot.plugins import HttpResponse, hookimpl


def push(request, ports):
    return HttpResponse.json(ports.inject_input("cli_chat", request.params["chat"], "hi", "intruder"))


@hookimpl
def picobot_routes(register):
    register("POST", "/intruder/<chat>", push)
'''


@pytest.fixture(scope="module")
def sstack(tmp_path_factory: pytest.TempPathFactory, fake_llm: FakeLLM) -> Iterator[Stack]:
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["plugins"] = {"trusted": ["sensor"]}  # the intruder stays untrusted
    s = Stack(tmp_path_factory.mktemp("inject"), fake_llm.url, config=cfg)
    s.port = port
    folder = s.home / "plugins"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sensor.py").write_text(textwrap.dedent(SENSOR))
    (folder / "intruder.py").write_text(textwrap.dedent(INTRUDER))
    s.env["PICOBOT_SENSOR_LOG"] = str(s.cwd / "sensor.jsonl")
    try:
        s.start(beat=False)
        yield s
    finally:
        s.stop()


def _events(stack: Stack) -> list[dict[str, Any]]:
    path = Path(stack.env["PICOBOT_SENSOR_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_sensor_reading_becomes_a_turn_in_the_chat_and_its_events_are_heard(sstack: Stack, fake_llm: FakeLLM) -> None:
    add_rule(fake_llm, "temperature is 31", {"content": "It is hot: open the window."})
    client = sstack.client()
    try:
        answer = HTTP.post(f"{sstack.http}/sensor/{client.chat_id}", json={"text": "temperature is 31", "id": "r-1"},
                           timeout=30)
        assert answer.status_code == 200, answer.text
        accepted = answer.json()
        assert accepted["type"] == "accepted" and accepted["session_id"] == client.session_id
        done = client.wait_completed(accepted["seq"], 60)
        assert done["final_text"] == "It is hot: open the window."
        again = HTTP.post(f"{sstack.http}/sensor/{client.chat_id}", json={"text": "temperature is 31", "id": "r-1"},
                          timeout=30).json()
        assert again.get("fate") != "started" or again.get("seq") == accepted["seq"]  # a redelivery runs no new turn
        events = wait_for(lambda: [e for e in _events(sstack) if e["event"] == "turn.ended"
                                   and e["session_id"] == client.session_id] and _events(sstack), 30,
                          "the subscriber's events")
        rounds = [e for e in events if e["event"] == "model.round" and e["session_id"] == client.session_id]
        assert rounds and rounds[-1]["text"] == "It is hot: open the window."
        ended = [e for e in events if e["event"] == "turn.ended" and e["session_id"] == client.session_id]
        assert ended[0]["status"] == "completed" and ended[0]["sender_id"] == "sensor"
    finally:
        client.close()


def test_an_interrupt_stops_the_running_turn(sstack: Stack, fake_llm: FakeLLM) -> None:
    add_rule(fake_llm, "a slow reading", {"content": "too late", "delay_ms": 20000})
    client = sstack.client()
    try:
        accepted = HTTP.post(f"{sstack.http}/sensor/{client.chat_id}", json={"text": "a slow reading"},
                             timeout=30).json()
        wait_for(lambda: any("a slow reading" in json.dumps(r["body"]) for r in fake_llm.requests()), 30,
                 "the model call of the slow reading")
        stopped = HTTP.post(f"{sstack.http}/sensor/{client.chat_id}", json={"stop": True}, timeout=30).json()
        assert stopped["type"] == "command", stopped
        done = client.wait_completed(accepted["seq"], 15)
        assert done["status"] == "cancelled"
    finally:
        client.close()


def test_an_untrusted_plugin_may_not_inject_into_another_channels_chat(sstack: Stack) -> None:
    answer = HTTP.post(f"{sstack.http}/intruder/some-chat", json={}, timeout=30)
    assert answer.status_code == 500
    plugins = {p["name"]: p for p in sstack.health()["checks"]["plugins"]["plugins"]}
    assert "plugins.trusted" in (plugins["intruder"]["error"] or "")
