"""The CLI's in-process commands get a NoQueue: every port of TaskQueue is there and refuses by name."""

import inspect

import pytest

from picobot.cli.no_queue import NoQueue
from picobot.runtime.ports import TaskQueue


def _queue_methods() -> list[str]:
    return sorted(name for cls in TaskQueue.__mro__ if cls.__module__ == "picobot.runtime.ports"
                  for name in vars(cls) if name.startswith("enqueue_"))


def test_every_task_queue_port_refuses_naming_the_command():
    methods = _queue_methods()
    assert "enqueue_turn" in methods and "enqueue_background" in methods
    queue = NoQueue("memory maintenance")
    for name in methods:
        method = getattr(queue, name)  # a port missing here was an AttributeError, not this refusal
        params = [p for p in inspect.signature(getattr(TaskQueue, name)).parameters.values()
                  if p.name != "self" and p.default is inspect.Parameter.empty]
        with pytest.raises(RuntimeError, match="^memory maintenance enqueues no "):
            method(*["x"] * len(params))


def test_a_scheduled_turn_is_refused_not_a_type_error():
    # the TurnQueue port takes queue=; the CLI's old stand-in did not, so the call itself failed
    with pytest.raises(RuntimeError, match="`picobot jobs` enqueues no turns"):
        NoQueue("`picobot jobs`").enqueue_turn("s1", queue="scheduled")
