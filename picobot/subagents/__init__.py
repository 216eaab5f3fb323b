"""Sub-agents: the `task` tool delegates work to a sub-agent with its own history and narrowed tools.

    definitions.py  built-in `general` / `explore` and the SUBAGENT.md format
    catalog.py      finding SUBAGENT.md files (user and project folders), cached by a stat fingerprint
    tool.py         the `task` tool: admit a run, run it in the foreground or queue it in the background
    runner.py       one run: an AgentLoop with the parent's provider, its own history and tools
    background.py   a background run as its Celery task executes it
    inbox.py        a background run's result becomes queued input of the parent session
    control.py      /stop and cancel: stopping runs, foreground and background
    manage.py       task actions get / list / get_result / cancel
    recovery.py     runs of dead workers: interrupted and reported (called by the sweeper)
"""
