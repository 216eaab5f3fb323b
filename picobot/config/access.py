"""Who may talk on a channel (`allow_from`) and which agent answers there (`agent`), for every channel.

The socket channels (web, cli_chat) follow the same rules once `channels.web` / `channels.cli_chat`
is configured; unconfigured, everyone allowed (pairing guards them) and the default agent answers.
"""

from __future__ import annotations

from picobot.config.schema import Config

DEFAULT_AGENT = "default"


def allowed(config: Config, channel: str, sender_id: str) -> bool:
    """`allow_from` of the channel: ["*"] or empty means everyone, else the listed sender ids."""
    cfg = config.channels.get(channel)
    if cfg is None:
        return True
    allow = [entry.strip() for entry in cfg.allow_from]
    return not allow or "*" in allow or (sender_id or "") in allow


def agent_for(config: Config, channel: str) -> str:
    """The agent new dialogs of this channel get."""
    cfg = config.channels.get(channel)
    return (cfg.agent if cfg is not None else "") or DEFAULT_AGENT
