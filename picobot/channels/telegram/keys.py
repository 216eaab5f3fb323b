"""The Telegram channel's Redis keys (picobot:telegram:*)."""


def poll(bot_id: str) -> str:
    """The holder of the bot's getUpdates long poll: one poller per bot token, across all processes."""
    return f"picobot:telegram:poll:{bot_id}"


def status(channel: str) -> str:
    """The channel's intake heartbeat (poller state, last update, last error), read by /health."""
    return f"picobot:telegram:status:{channel}"


def me(bot_id: str) -> str:
    """getMe of the bot (its username, for commands and mentions in groups), cached."""
    return f"picobot:telegram:me:{bot_id}"


def live(turn_id: str) -> str:
    """The turn's live message: "none", or {"message_id", "final"} once sent."""
    return f"picobot:telegram:live:{turn_id}"


def setup(bot_id: str, what: str) -> str:
    """Set for a few minutes once a process registered the bot's `what` (commands, webhook): others skip it."""
    return f"picobot:telegram:setup:{bot_id}:{what}"


def live_lock(turn_id: str) -> str:
    """Held during one edit of the turn's live message (the answer's edit waits for it)."""
    return f"picobot:telegram:livelock:{turn_id}"
