"""The Feishu channel's Redis keys (picobot:feishu:*)."""


def ws(app_id: str) -> str:
    """The holder of the app's long connection: one `picobot feishu` process at a time."""
    return f"picobot:feishu:ws:{app_id}"


def token(app_id: str) -> str:
    """The app's cached tenant access token."""
    return f"picobot:feishu:token:{app_id}"


def card(turn_id: str) -> str:
    """The streaming card of a turn: "pending" while it is created, then JSON {card_id, message_id}."""
    return f"picobot:feishu:card:{turn_id}"


def card_lock(card_id: str) -> str:
    return f"picobot:feishu:cardlock:{card_id}"


def card_seq(card_id: str) -> str:
    return f"picobot:feishu:cardseq:{card_id}"


def reaction(turn_id: str) -> str:
    return f"picobot:feishu:reaction:{turn_id}"
