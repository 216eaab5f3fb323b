"""The sub-agents capability's Redis keys."""


def run_requeued(run_id: str) -> str:
    """Set when the sweeper re-enqueued a queued sub-agent run, so it does so at most once a minute."""
    return f"picobot:subagent:requeued:{run_id}"
