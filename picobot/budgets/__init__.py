"""Budgets: token and cost limits per dialog, user, scheduled job and day, enforced before each model call.

    plugin.py     the hooks: the gate before a model call, the ledger row and settle after it
    counters.py   Redis counters: atomic check-and-reserve across workers, seeded from the SQL ledger
    scopes.py     which limits a call falls under, their keys and when they reset
    prices.py     cost of a call from `prices`, and a request's estimated size

The ledger itself (`usage_records`) is written through picobot/storage/usage.py. See
docs/CONFIGURATION.md (`budgets`, `prices`) and docs/OPERATIONS.md (reading and resetting spend).
"""
