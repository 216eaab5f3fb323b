"""The observability capability's Redis keys: published metrics and each dialog's last trace."""

METRICS_PREFIX = "picobot:metrics:"  # + process name: its latest metric samples (JSON, with a TTL)
METRICS_INDEX = "picobot:metrics:index"  # sorted set: process name -> time of its last publish


def last_trace(session_id: str) -> str:
    """The trace id of the dialog's latest input (for /info); set by the web process when tracing is on."""
    return f"picobot:trace:last:{session_id}"
