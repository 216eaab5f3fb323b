"""Redis key and channel names. Redis holds only what can be rebuilt from SQL."""


def lease(session_id: str) -> str:
    return f"picobot:lease:{session_id}"


def stop(session_id: str) -> str:
    return f"picobot:stop:{session_id}"


def snapshot(session_id: str) -> str:
    return f"picobot:snapshot:{session_id}"


def events(session_id: str) -> str:
    return f"picobot:events:{session_id}"


EVENTS_PATTERN = "picobot:events:*"
CONTROL_CHANNEL = "picobot:control"
WORKER_PREFIX = "picobot:worker:"
SWEEP_LAST = "picobot:sweep:last"
