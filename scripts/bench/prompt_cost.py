"""Prompt cost: the fixed part of the request PicoBot sends for "hello" (system prompt + tool schemas).

Each case runs one real turn in process — the gateway records "hello", `drain_session` runs the turn
against a private Redis and SQLite, the provider posts to the fake LLM — and measures the request the
fake LLM received. Tokens are estimated as characters / 4 over the system messages' text and the
tool schemas as sent. Cases: no tools and no skills (the same-run baseline), every built-in tool with
0 skills, and every built-in tool with 32 skills in the index. Target: <= 3000 tokens with 32 skills.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from pathlib import Path
from typing import Any

from scripts.bench.common import Result, log, main

NAME = "prompt_cost"
TARGET_TOKENS = 3000
SKILLS = 32
# Descriptions of realistic length (60-200 characters, like published skills); the index shortens long ones.
_TOPICS = [
    ("pdf-forms", "Fill in, flatten and check PDF forms; use when the user sends a PDF form or asks to complete one."),
    ("release-notes", "Draft release notes from merged pull requests and commit messages when asked for a changelog."),
    ("sql-review", "Review SQL queries and migrations for correctness, locking and index use before they are run."),
    ("incident-report", "Write a blameless incident report with timeline, impact, root cause and follow-up actions."),
]


def _skill_description(i: int) -> tuple[str, str]:
    name, text = _TOPICS[i % len(_TOPICS)]
    filler = " Covers edge cases, the house checklist and the output format the team expects." * (i % 3)
    return f"{name}-{i:02d}", text + filler


def write_skills(root: Path, count: int) -> None:
    for i in range(count):
        name, description = _skill_description(i)
        folder = root / name
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "SKILL.md").write_text(f"---\ndescription: {json.dumps(description)}\n---\n\nSteps for {name}.\n")


def measure(tmp: Path, llm_url: str, redis_url: str, case: str) -> dict[str, Any]:
    return prompt_cost(request_body(tmp, llm_url, redis_url, case))


def request_body(tmp: Path, llm_url: str, redis_url: str, case: str) -> dict[str, Any]:
    """The chat request the fake LLM received for one "hello" turn of `case`."""
    from picobot.config.loader import load_config
    from picobot.gateway.inbound import InboundMessage
    from picobot.gateway.intake import Gateway
    from picobot.app import build_runtime
    from picobot.runtime.turn_runner import drain_session
    from picobot.tools import builtin_tools
    from tests.stack import base_config

    home = tmp / case / "home"
    home.mkdir(parents=True)
    cfg = base_config(llm_url, 1)
    if case == "baseline":  # every tool off: the core's and the capabilities' (memory, task, browser, ...)
        cfg["tools"] = {"disabled": sorted({t.name for t in builtin_tools()} | _offered_tools(tmp, llm_url, redis_url))}
        cfg["skills"] = {"enabled": False}
    elif case == "0 skills":
        cfg["skills"] = {"sources": []}  # tools on, nothing to list
    else:
        cfg["skills"] = {"sources": ["user"]}
        write_skills(home / "skills", SKILLS - 1)  # plus the built-in skill released at first use
    (home / "config.json").write_text(json.dumps(cfg))
    env = {**os.environ, "PICOBOT_HOME": str(home), "PICOBOT_TEST_KEY": "sk-bench", "REDIS_URL": redis_url,
           "PICOBOT_WORKSPACE": str(tmp / case / "workspace")}
    rt = build_runtime(load_config(environ=env), _NoQueue(), migrate=True)
    try:
        reply = Gateway(rt).submit(InboundMessage("cli_chat", "bench", "u", "hello"))
        drain_session(rt, reply.session_id)
    finally:
        rt.close()
    return _last_body(llm_url)


def _offered_tools(tmp: Path, llm_url: str, redis_url: str) -> set[str]:
    """Every tool a default PicoBot offers the model (the plugins' too)."""
    from picobot.app import build_runtime
    from picobot.config.loader import load_config
    from tests.stack import base_config

    home = tmp / "tool-names" / "home"
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.json").write_text(json.dumps(base_config(llm_url, 1)))
    env = {**os.environ, "PICOBOT_HOME": str(home), "PICOBOT_TEST_KEY": "sk-bench", "REDIS_URL": redis_url,
           "PICOBOT_WORKSPACE": str(tmp / "tool-names" / "workspace")}
    rt = build_runtime(load_config(environ=env), _NoQueue(), migrate=True)
    try:
        return set(rt.tools().names())
    finally:
        rt.close()


class _NoQueue:
    def enqueue_turn(self, session_id: str) -> None:  # this script drains by itself
        pass


def _last_body(llm_url: str) -> dict[str, Any]:
    import httpx

    reqs = httpx.get(llm_url + "/_fake/requests").json()["requests"]
    body = [r for r in reqs if r["path"].endswith("/chat/completions")][-1]["body"]
    httpx.delete(llm_url + "/_fake/rules")
    return body


def prompt_cost(body: dict[str, Any]) -> dict[str, Any]:
    system = "".join(m["content"] for m in body["messages"] if m["role"] == "system" and isinstance(m["content"], str))
    tools = json.dumps(body.get("tools") or [], ensure_ascii=False)
    tool_chars = len(tools) if body.get("tools") else 0
    return {"system_chars": len(system), "tool_chars": tool_chars, "tools": len(body.get("tools") or []),
            "tokens": (len(system) + tool_chars) // 4}


def run(args: argparse.Namespace) -> Result:
    from picobot.cli.embedded_redis import start_embedded
    from scripts.fake_llm import FakeLLM

    result = Result(NAME)
    llm = FakeLLM(host="127.0.0.1", port=0).start()
    with tempfile.TemporaryDirectory(prefix="picobot-bench-prompt-") as raw:
        tmp = Path(raw)
        redis_proc, redis_url = start_embedded(tmp / "redis")
        try:
            costs = {case: measure(tmp, llm.url, redis_url, case) for case in ("baseline", "0 skills", "32 skills")}
        finally:
            redis_proc.terminate()
            redis_proc.wait(timeout=10)
            llm.stop()
    for case, cost in costs.items():
        log(f"{case}: {cost['tokens']} tokens ({cost['system_chars']} system chars, {cost['tools']} tools in "
            f"{cost['tool_chars']} chars)")
    base = costs["baseline"]["tokens"]
    zero, full = costs["0 skills"]["tokens"], costs["32 skills"]["tokens"]
    result.add("fixed prompt, every tool, 0 skills", zero, "tokens", baseline=f"no tools {base}",
               ratio=f"+{zero - base}")
    result.add("fixed prompt, every tool, 32 skills", full, "tokens", target=f"<= {TARGET_TOKENS}",
               ok=full <= TARGET_TOKENS, baseline=f"no tools {base}", ratio=f"+{full - base}")
    result.raw["costs"] = costs
    result.notes.append("tokens = characters / 4 of the system messages and the tool schemas the fake LLM received")
    return result


if __name__ == "__main__":
    raise SystemExit(main(NAME, run, doc=__doc__))
