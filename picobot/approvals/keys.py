"""The approvals capability's Redis keys."""


def approval(approval_id: str) -> str:
    """The decision of one pending approval, pushed once it is written to SQL (the waiter BLPOPs it)."""
    return f"picobot:approval:{approval_id}"
