"""PicoBot: a multi-channel AI agent gateway (core library, free of Flask and Celery)."""

__version__ = "0.1.0"
