"""The WeChat channel's Redis keys (picobot:wechat:*)."""


def poll(channel: str) -> str:
    """The lease of the one process that long-polls a WeChat channel's account (getupdates)."""
    return f"picobot:wechat:poll:{channel}"


def status(channel: str) -> str:
    """JSON {state, detail, at} of a WeChat channel, written by its poller and its adapter; read by /health."""
    return f"picobot:wechat:status:{channel}"


def typing(channel: str, user_id: str) -> str:
    """A WeChat user's typing_ticket from getconfig (cached, ≤ 24 h)."""
    return f"picobot:wechat:typing:{channel}:{user_id}"
