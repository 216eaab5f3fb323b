"""Every Redis key, key prefix and channel name the kernel uses, in one place.

Capabilities keep their keys in their own packages (`picobot/<capability>/keys.py`, e.g.
picobot/channels/feishu/keys.py) under their own prefixes (picobot:<capability>:…): this file names none.

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
SWEEP_LAST = "picobot:sweep:last"


# --- edge limits -------------------------------------------------------------------------

RATE_LIMIT_PREFIX = "picobot:rl:"  # gateway rate limits
PAIRING_FAILURES_PREFIX = "picobot:pairfail:"  # + client address: failed pairing attempts in the window

# --- plugin processes (runtime/processes.py) ---------------------------------------------------

PROCESS_PREFIX = "picobot:process:"


def plugin_process(plugin: str, name: str, instance: str) -> str:
    """A plugin process's last status (JSON, short TTL refreshed while it runs): /health lists them."""
    return f"{PROCESS_PREFIX}{plugin}:{name}:{instance}"
