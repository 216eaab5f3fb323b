"""Celery side of PicoBot: the app, its queues and routes, and thin tasks that call picobot/."""
