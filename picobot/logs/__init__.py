"""A process's logging: its settings and its handlers.

    settings.py  PICOBOT_LOG_LEVEL / PICOBOT_LOG_FORMAT, checked before a process starts (light: no handlers)
    setup.py     the stderr handler with every secret redacted, the JSON formatter, the capture to the Logs page

The recent lines themselves (the Redis stream the Logs page reads) are picobot/logstream/. This file
imports nothing, so `picobot.logs.settings` stays light.
"""
