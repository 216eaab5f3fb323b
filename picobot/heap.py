"""A long-running process's start-up objects, kept out of the cyclic garbage collector's full passes.

A worker or web process holds ~170,000 objects once its modules are imported (Celery, kombu, SQLAlchemy,
the SDKs, the tools' schemas), and nearly all of them live as long as the process. CPython's oldest
generation is collected now and then as new objects survive, and a full collection walks every object
with the interpreter lock held: ~80 ms here for the imports alone, longer with the runtime. Every thread
stops for it, the one holding SQLite's write lock or a socket's reply included, so a webhook's
acknowledgement waited behind a collection of the worker's start-up heap (docs/BENCHMARKS.md, "Feishu
webhook ack"). `settle()` collects once and moves what survived into the permanent generation
(`gc.freeze`), which later collections skip; objects made afterwards are collected as before.
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect once, then freeze what is alive; returns how many objects are frozen. Call it when the
    process has finished starting, once (a later call freezes what accumulated since, too)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
