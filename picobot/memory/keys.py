"""The memory capability's Redis keys (a running compaction's flag stays in coord/keys.py: /info reads it)."""

MAINTENANCE_LOCK = "picobot:memory_maintenance"  # one maintenance run at a time
