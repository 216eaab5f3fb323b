"""The daemon thread pool behind model streams: jobs run, threads are reused, failures stay local."""

from __future__ import annotations

import threading
import time

from picobot.threadpool import DaemonPool


def test_jobs_run_and_idle_threads_are_reused() -> None:
    p = DaemonPool("t")
    names: list[str] = []
    for _ in range(20):
        done = threading.Event()
        p.submit(lambda: (names.append(threading.current_thread().name), done.set()))
        assert done.wait(5)
    assert len(set(names)) < 5  # one after another: the same idle thread takes the next job


def test_concurrent_jobs_get_their_own_threads() -> None:
    p = DaemonPool("c")
    gate = threading.Barrier(6)  # all six must run at once, or the barrier times out
    done = threading.Semaphore(0)

    def job() -> None:
        gate.wait(timeout=5)
        done.release()

    for _ in range(6):
        p.submit(job)
    assert all(done.acquire(timeout=10) for _ in range(6))


def test_a_failing_job_does_not_kill_its_thread() -> None:
    p = DaemonPool("f")

    def boom() -> None:
        raise RuntimeError("job failed on purpose")

    p.submit(boom)
    ran = threading.Event()
    p.submit(ran.set)
    assert ran.wait(5)


def test_idle_threads_end_and_new_jobs_still_run() -> None:
    p = DaemonPool("i", idle_secs=0.05)
    first = threading.Event()
    p.submit(first.set)
    assert first.wait(5)
    threading.Event().wait(0.3)  # the idle thread has gone by now
    again = threading.Event()
    p.submit(again.set)
    assert again.wait(5)


def test_watchdog_fires_unless_disarmed() -> None:
    from picobot.threadpool import Watchdog

    dog = Watchdog()
    fired = threading.Event()
    kept = threading.Event()
    dog.arm(0.05, fired.set)
    disarm = dog.arm(0.05, kept.set)
    disarm()
    assert fired.wait(5)
    assert not kept.wait(0.3)


def test_watchdog_wakes_for_an_earlier_deadline_and_not_for_a_later_one() -> None:
    from picobot.threadpool import Watchdog

    dog = Watchdog()
    late, early, later = threading.Event(), threading.Event(), threading.Event()
    dog.arm(30, late.set)  # the thread now sleeps until this one ...
    time.sleep(0.05)
    dog.arm(0.05, early.set)  # ... so this one must wake it
    assert early.wait(5) and not late.is_set()
    dog.arm(0.2, later.set)  # armed while the thread sleeps towards the 30 s deadline again
    assert later.wait(5)
