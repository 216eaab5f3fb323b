"""The channels capability's Redis keys: outbound lanes, the event inbox's claims, the live relay."""


def lane(channel: str, chat_id: str) -> str:
    """The lock of one outbound lane (channel, chat): one deliverer at a time, in order."""
    return f"picobot:lane:{channel}:{chat_id}"


def lane_kick(channel: str, chat_id: str) -> str:
    """Set when the sweeper re-enqueued the lane, so it does so at most every few seconds."""
    return f"picobot:lane-kick:{channel}:{chat_id}"


def channel_event(event_id: int | str) -> str:
    """Held while a task processes the recorded channel event."""
    return f"picobot:channel-event:{event_id}"


def channel_event_kick(event_id: int | str) -> str:
    """Set when the sweeper re-enqueued the event, so it does so at most every few seconds."""
    return f"picobot:channel-event-kick:{event_id}"


def live_claim(turn_id: str) -> str:
    """The live relay's claim on a turn (one relay streams it to its channel)."""
    return f"picobot:live:{turn_id}"
