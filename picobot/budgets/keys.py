"""The budgets capability's Redis keys."""

BUDGET_PREFIX = "picobot:budget:"  # + scope: spend counters of budgets (re-seeded from usage_records)
