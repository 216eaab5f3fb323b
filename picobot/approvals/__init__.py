"""Approvals: a tool call that matches a rule waits for a person's yes or no (`tools.approval`).

    rules.py     which calls need a decision: configured rules, then the built-in ones
    waiting.py   one approval's life: asked (SQL, socket frame, chat message), waited on, decided
    plugin.py    the hooks: before_toolcall pauses the call; /approve, /deny, /approvals; /info lines

The rows live in `approvals` (picobot/storage/approvals.py). See docs/APPROVALS.md.
"""
