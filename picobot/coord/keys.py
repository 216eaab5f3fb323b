"""Every Redis key, key prefix and channel name PicoBot uses, in one place.

Redis holds only what can be rebuilt from SQL (leases, flags, caches, wake-up throttles): a
FLUSHALL loses no data. Grep this file to see what lives in Redis and who may be holding it.
"""

# --- turns and sessions (runtime) ------------------------------------------------------


def lease(session_id: str) -> str:
    """The session's lease: one turn at a time per session, across all workers."""
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
# Sorted set: worker host id -> time of its workers' last heartbeat (hosts that take turns; placement)
HOSTS = "picobot:hosts"
# Hash: "<host> <worker>" -> "<running turns> <turn slots> <time>" of each turn-taking worker (placement)
HOST_LOAD = "picobot:hosts:load"
# Hash: host -> chats pinned to it since its last load report (so the reports' age does not herd new chats)
HOST_ASSIGNED = "picobot:hosts:assigned"
HOSTS_SINCE = "picobot:hosts:since"  # time of the host set's first beat (again after a flush)
MCP_PREFIX = "picobot:mcp:"  # + worker name: a hash of that worker's MCP server states
SWEEP_LAST = "picobot:sweep:last"


def run_requeued(run_id: str) -> str:
    """Set when the sweeper re-enqueued a queued sub-agent run, so it does so at most once a minute."""
    return f"picobot:subagent:requeued:{run_id}"


# --- background work ---------------------------------------------------------------------

MEMORY_MAINTENANCE_LOCK = "picobot:memory_maintenance"  # one maintenance run at a time
SCHEDULER_RUN_PREFIX = "picobot:scheduler:run:"  # + run id -> the worker running a non-agent run (liveness)

# --- edge limits -------------------------------------------------------------------------

RATE_LIMIT_PREFIX = "picobot:rl:"  # gateway rate limits
BUDGET_PREFIX = "picobot:budget:"  # + scope: spend counters of budgets (re-seeded from usage_records)
PAIRING_FAILURES_PREFIX = "picobot:pairfail:"  # + client address: failed pairing attempts in the window

# --- channels: delivery, event inbox, live relay -------------------------------------------


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


# --- Feishu ------------------------------------------------------------------------------


def feishu_ws(app_id: str) -> str:
    """The holder of the app's long connection: one `picobot feishu` process at a time."""
    return f"picobot:feishu:ws:{app_id}"


def feishu_token(app_id: str) -> str:
    """The app's cached tenant access token."""
    return f"picobot:feishu:token:{app_id}"


def feishu_card(turn_id: str) -> str:
    """The streaming card of a turn: "pending" while it is created, then JSON {card_id, message_id}."""
    return f"picobot:feishu:card:{turn_id}"


def feishu_card_lock(card_id: str) -> str:
    return f"picobot:feishu:cardlock:{card_id}"


def feishu_card_seq(card_id: str) -> str:
    return f"picobot:feishu:cardseq:{card_id}"


def feishu_reaction(turn_id: str) -> str:
    return f"picobot:feishu:reaction:{turn_id}"


# --- Telegram ----------------------------------------------------------------------------


def telegram_poll(bot_id: str) -> str:
    """The holder of the bot's getUpdates long poll: one poller per bot token, across all processes."""
    return f"picobot:telegram:poll:{bot_id}"


def telegram_status(channel: str) -> str:
    """The channel's intake heartbeat (poller state, last update, last error), read by /health."""
    return f"picobot:telegram:status:{channel}"


def telegram_me(bot_id: str) -> str:
    """getMe of the bot (its username, for commands and mentions in groups), cached."""
    return f"picobot:telegram:me:{bot_id}"


def telegram_live(turn_id: str) -> str:
    """The turn's live message: "none", or {"message_id", "final"} once sent."""
    return f"picobot:telegram:live:{turn_id}"


def telegram_setup(bot_id: str, what: str) -> str:
    """Set for a few minutes once a process registered the bot's `what` (commands, webhook): others skip it."""
    return f"picobot:telegram:setup:{bot_id}:{what}"


def telegram_live_lock(turn_id: str) -> str:
    """Held during one edit of the turn's live message (the answer's edit waits for it)."""
    return f"picobot:telegram:livelock:{turn_id}"


def wechat_poll(channel: str) -> str:
    """The lease of the one process that long-polls a WeChat channel's account (getupdates)."""
    return f"picobot:wechat:poll:{channel}"


def wechat_status(channel: str) -> str:
    """JSON {state, detail, at} of a WeChat channel, written by its poller and its adapter; read by /health."""
    return f"picobot:wechat:status:{channel}"


def wechat_typing(channel: str, user_id: str) -> str:
    """A WeChat user's typing_ticket from getconfig (cached, ≤ 24 h)."""
    return f"picobot:wechat:typing:{channel}:{user_id}"


# --- observability (picobot/observability) ---------------------------------------------------

METRICS_PREFIX = "picobot:metrics:"  # + process name: its latest metric samples (JSON, with a TTL)
METRICS_INDEX = "picobot:metrics:index"  # sorted set: process name -> time of its last publish


def last_trace(session_id: str) -> str:
    """The trace id of the dialog's latest input (for /info); set by the web process when tracing is on."""
    return f"picobot:trace:last:{session_id}"


# --- approvals (the approvals capability) ------------------------------------------------


def approval(approval_id: str) -> str:
    """The decision of one pending approval, pushed once it is written to SQL (the waiter BLPOPs it)."""
    return f"picobot:approval:{approval_id}"


# --- plugin processes (runtime/processes.py) ---------------------------------------------------

PROCESS_PREFIX = "picobot:process:"


def plugin_process(plugin: str, name: str, instance: str) -> str:
    """A plugin process's last status (JSON, short TTL refreshed while it runs): /health lists them."""
    return f"{PROCESS_PREFIX}{plugin}:{name}:{instance}"
