"""The fixed prompt for "hello" stays inside its token budget, measured exactly as the benchmark does.

One real turn in process (gateway, `drain_session`, private Redis and SQLite, the fake LLM); the figure
is a count of characters in the request the fake LLM received, so machine load cannot change it.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.bench.prompt_cost import SKILLS, TARGET_TOKENS, _skill_description, prompt_cost, request_body
from scripts.fake_llm import FakeLLM

# The built-in tools that predate the skill tools took 7,719 characters as sent; they were cut by over
# 35 % so that the tools still to come fit the same prompt budget. Growing them again spends that room.
OLDER_TOOLS = ("calculator", "get_time", "read", "write", "edit", "bash", "http_request", "web_fetch",
               "send_session_message")
OLDER_TOOLS_MAX_CHARS = 5_000
# The agent's hands that are there by default: the budget holds with them in the prompt.
DEFAULT_NEWER = {"browser", "todo", "file_search", "content_search"}


def test_fixed_prompt_with_32_skills_fits_the_token_budget(tmp_path: Path, llm: FakeLLM, redis_url: str) -> None:
    body = request_body(tmp_path, llm.url, redis_url, f"{SKILLS} skills")
    system = "".join(m["content"] for m in body["messages"] if m["role"] == "system")
    missing = [name for name, _ in map(_skill_description, range(SKILLS - 1)) if name not in system]
    assert not missing, f"the skill index left out {missing}:\n{system}"
    assert set(OLDER_TOOLS) | DEFAULT_NEWER <= {t["function"]["name"] for t in body["tools"]}
    cost = prompt_cost(body)
    assert cost["tokens"] <= TARGET_TOKENS, cost


def test_older_builtin_tools_keep_their_shrunk_size(tmp_path: Path, llm: FakeLLM, redis_url: str) -> None:
    body = request_body(tmp_path, llm.url, redis_url, "0 skills")
    sizes = {t["function"]["name"]: len(json.dumps(t, ensure_ascii=False)) for t in body["tools"]}
    older = {name: sizes[name] for name in OLDER_TOOLS}
    assert sum(older.values()) <= OLDER_TOOLS_MAX_CHARS, older
