"""The memory of sessions that run on this host: valid only within an unbroken run of fresh heartbeats."""

from __future__ import annotations

from picobot.runtime.pinned_here import PinnedHere


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_is_known_while_the_beats_go_on() -> None:
    clock = Clock()
    here = PinnedHere(fresh_secs=3.5, clock=clock)
    here.remember("alpha", "s1", clock())
    assert not here.knows("alpha", "s1")  # no beat yet: nothing is remembered
    here.beat("alpha")
    asked = clock()
    here.remember("alpha", "s1", asked)
    assert here.knows("alpha", "s1") and not here.knows("beta", "s1") and not here.knows("alpha", "s2")
    for _ in range(10):  # beats every 2 s keep it
        clock.now += 2
        here.beat("alpha")
        assert here.knows("alpha", "s1")


def test_a_late_beat_or_a_gap_forgets_everything_looked_up_before() -> None:
    clock = Clock()
    here = PinnedHere(fresh_secs=3.5, clock=clock)
    here.beat("alpha")
    here.remember("alpha", "s1", clock())
    clock.now += 3.6  # the beat is late: others may be about to judge this host dead
    assert not here.knows("alpha", "s1")
    here.beat("alpha")  # back, after a gap: a chat may have moved meanwhile
    assert not here.knows("alpha", "s1")
    here.remember("alpha", "s1", clock())
    assert here.knows("alpha", "s1")


def test_a_lookup_that_started_before_the_gap_does_not_count() -> None:
    clock = Clock()
    here = PinnedHere(fresh_secs=3.5, clock=clock)
    here.beat("alpha")
    asked = clock()  # route() read SQL here ...
    clock.now += 8
    here.beat("alpha")  # ... another host moved the chat during the gap ...
    here.remember("alpha", "s1", asked)  # ... and the old answer arrives now
    assert not here.knows("alpha", "s1")


def test_the_memory_is_bounded_oldest_first() -> None:
    clock = Clock()
    here = PinnedHere(fresh_secs=3.5, max_entries=3, clock=clock)
    here.beat("alpha")
    for s in ("s1", "s2", "s3"):
        here.remember("alpha", s, clock())
    here.remember("alpha", "s1", clock())  # used again: now the newest
    here.remember("alpha", "s4", clock())
    assert [here.knows("alpha", s) for s in ("s1", "s2", "s3", "s4")] == [True, False, True, True]
