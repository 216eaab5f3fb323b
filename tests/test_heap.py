"""picobot/heap.py: a process's start-up objects frozen out of the collector's full passes."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def test_settle_freezes_what_is_alive_and_later_garbage_is_still_collected() -> None:
    """Run in a child interpreter: freezing the test process's own heap would keep its garbage."""
    code = textwrap.dedent("""
        import gc, weakref
        from picobot.heap import settle

        class Node:
            pass

        kept = [Node() for _ in range(1000)]
        before = gc.get_freeze_count()
        frozen = settle()
        assert frozen >= before + 1000 and gc.get_freeze_count() >= before + 1000, (before, frozen)
        a, b = Node(), Node()
        a.other, b.other = b, a  # a cycle made after the freeze
        gone = weakref.ref(a)
        del a, b
        gc.collect()
        assert gone() is None  # collected: only what was alive at settle() is exempt
        print("ok", frozen)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("ok ")
