"""Recent log lines of every PicoBot process, in one capped Redis stream, for the Logs page.

`capture` puts a handler on the root logger of each process (web, workers, beat, channel pollers)
that ships redacted records to the stream from a background thread; `query` reads them back,
newest first, filtered. Redis is a convenience here, never a dependency of logging: when it is down
lines are dropped and counted, and stderr keeps every line as before.
"""

from __future__ import annotations

STREAM_KEY = "picobot:logs"
LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
