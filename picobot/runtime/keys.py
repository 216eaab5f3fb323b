"""Redis key and channel names. Redis holds only what can be rebuilt from SQL."""


def lease(session_id: str) -> str:
    return f"picobot:lease:{session_id}"


def stop(turn_id: str) -> str:
    """The /stop flag of one turn (turn ids are unique, so an old flag never hits a later turn)."""
    return f"picobot:stop:{turn_id}"


def compacting(session_id: str) -> str:
    """Held while a background compaction of the session runs (so a second one is not started)."""
    return f"picobot:compacting:{session_id}"


def snapshot(session_id: str) -> str:
    return f"picobot:snapshot:{session_id}"


def events(session_id: str) -> str:
    return f"picobot:events:{session_id}"


EVENTS_PATTERN = "picobot:events:*"
CONTROL_CHANNEL = "picobot:control"
WORKER_PREFIX = "picobot:worker:"
MCP_PREFIX = "picobot:mcp:"  # + worker name: a hash of that worker's MCP server states
SWEEP_LAST = "picobot:sweep:last"


def run_requeued(run_id: str) -> str:
    """Set when the sweeper re-enqueued a queued sub-agent run, so it does so at most once a minute."""
    return f"picobot:subagent:requeued:{run_id}"
