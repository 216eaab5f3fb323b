"""Delegation to coding CLIs: the `delegate_to_cli` tool runs a configured CLI (Claude Code, Codex, ...)
on a task, under `bash`'s rules (scrubbed environment, the sandbox when it is on), and answers with its
output, capped, the full log kept under the home.

    plugin.py   offers the tool only when config `delegates` names a CLI (it costs no prompt otherwise)
    tool.py     the tool: arguments, the run folder, the result text
    process.py  one run: start in its own process group, tee output to the log, stop it (TERM, then KILL)
"""
