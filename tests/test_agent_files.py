"""Named agents defined as files (`$PICOBOT_HOME/agents/<id>.md`).

The loader against real files (every error names the file, line and key; a bad file is skipped, the
others load; an edit makes a new generation), hostile files, and a whole stack: a channel bound to a
file agent talks with its model, instructions and tools; an edit applies at the next turn; `task`
hands work to a named agent within `delegates`; /api/agents and `picobot agents list` show errors.
"""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.cli.embedded_redis import free_port
from picobot.config.agent_files import AgentFiles, Known, read_agent, report
from picobot.config.schema import Config
from picobot.domain.definition import DefinitionError
from picobot.errors import ConfigError, SkillError
from picobot.openai_api.models import agent_of
from picobot.scheduler.jobs import JobError, parse_job
from picobot.skills.frontmatter import parse as parse_skill
from picobot.subagents.definitions import parse as parse_subagent
from tests.conftest import add_rule
from tests.stack import Stack, base_config
from tests.http_client import HTTP

KNOWN = Known(frozenset({"default", "other"}), frozenset({"default", "big"}), frozenset({"default"}),
              "default", "default")


def _config(home: Path, **more: Any) -> Config:
    raw = {"providers": {"default": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"},
                         "other": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
           "models": {"default": {"model_id": "m-default"}, "big": {"model_id": "m-big"}},
           "agents": {"default": {"provider": "default", "model": "default"}}, "home": home, **more}
    return Config.model_validate(raw)


def _write(home: Path, name: str, text: str | bytes) -> Path:
    path = home / "agents" / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return path


# --- the loader ------------------------------------------------------------------------


def test_a_file_agent_resolves_with_its_model_instructions_and_allowlists(tmp_path: Path) -> None:
    _write(tmp_path, "coder.md", "---\ndescription: writes code\nmodel: other:big\ntools: [read, bash]\n"
                                 "skills: [pdf]\ndelegates: [tester]\nmax_tool_iterations: 7\ntimeout_secs: 30\n"
                                 "---\n\nYou write code.\n")
    resolved = _config(tmp_path).agent("coder")
    assert (resolved.source, resolved.provider_key, resolved.model.model_id) == ("file", "other", "m-big")
    assert resolved.instructions == "You write code." and resolved.agent.system_prompt is None
    assert resolved.tools == ("read", "bash") and resolved.skills == ("pdf",) and resolved.delegates == ("tester",)
    assert resolved.agent.max_tool_iterations == 7 and resolved.timeout_secs == 30.0
    _write(tmp_path, "plain.md", "---\ndescription: x\n---\nbody")  # no model: the default agent's
    plain = _config(tmp_path).agent("plain")
    assert plain.model.model_id == "m-default" and plain.tools is None and plain.delegates is None


def test_a_file_agents_model_may_be_a_profile_and_a_dialog_choice_applies_to_it(tmp_path: Path) -> None:
    from picobot.config.model_refs import ModelChoice

    _write(tmp_path, "fast.md", "---\nmodel: quick\n---\nBe quick.\n")
    cfg = _config(tmp_path, profiles={"quick": {"provider": "other", "model": "big"}})
    resolved = cfg.agent("fast")
    assert (resolved.provider_key, resolved.model.model_id, resolved.chosen) == ("other", "m-big", False)
    assert cfg.model_choices("fast") == [ModelChoice("other", "big")]  # its own model is its one choice
    assert cfg.dialog_choice("fast", "other", "big") == ModelChoice("other", "big")
    assert cfg.dialog_choice("fast", "default", "default") is None  # not the file agent's to choose
    chosen = cfg.agent("fast", ModelChoice("default", "default"))
    assert (chosen.provider_key, chosen.model.model_id, chosen.chosen) == ("default", "m-default", True)
    _write(tmp_path, "both.md", "---\nprovider: other\nmodel: quick\n---\n")
    with pytest.raises(ConfigError, match="names a profile"):
        _config(tmp_path, profiles={"quick": {"provider": "other", "model": "big"}}).agent("both")


@pytest.mark.parametrize("text, line, key, why", [
    ("---\ndescription: x\ntools: 5\n---\n", 3, "tools", "must be a list of tool names"),
    ("---\ntools: [read, 7]\n---\n", 2, "tools", "holds int"),
    ("---\ndescription: x\n\nmodel: nope\n---\n", 4, "model", "unknown model 'nope' (known: big, default)"),
    ("---\nmodel: ghost:big\n---\n", 2, "model", "unknown provider 'ghost'"),
    ("---\nprovider: ghost\n---\n", 2, "provider", "unknown provider 'ghost'"),
    ("---\nprovider: other\nmodel: other:big\n---\n", 3, "model", "drop the 'provider' key"),
    ("---\ntoolz: [read]\n---\n", 2, "toolz", "unknown key 'toolz'"),
    ("---\nmax_tool_iterations: -1\n---\n", 2, "max_tool_iterations", "whole number"),
    ("---\nmax_tool_iterations: .nan\n---\n", 2, "max_tool_iterations", "whole number"),
    ("---\ntimeout_secs: 1e99\n---\n", 2, "timeout_secs", "at most 86400"),
    ("---\ntimeout_secs: true\n---\n", 2, "timeout_secs", "true/false"),
    ("---\ndelegates: [agent]\n---\n", 2, "delegates", "itself"),
    ("---\ndelegates: [Not-An-Id]\n---\n", 2, "delegates", "not one of agent ids"),
    ("---\ndescription: [a]\n---\n", 2, "description", "is a list"),
    ("---\na: [\n---\n", 3, None, "not valid YAML"),
])
def test_every_error_names_the_file_the_line_and_the_key(tmp_path: Path, text: str, line: int,
                                                        key: str | None, why: str) -> None:
    path = _write(tmp_path, "agent.md", text)
    with pytest.raises(DefinitionError) as e:
        read_agent(path, "agent", KNOWN)
    assert (e.value.path, e.value.line) == (str(path), line) and why in str(e.value)
    assert str(e.value).startswith(f"{path}: line {line}: ")
    if key is not None:
        assert e.value.key == key and f"'{key}'" in str(e.value)


def test_a_bad_file_is_listed_and_skipped_and_the_others_load(tmp_path: Path) -> None:
    _write(tmp_path, "good.md", "---\ndescription: fine\n---\nok")
    _write(tmp_path, "broken.md", "---\ntools: nope\n---\n")
    _write(tmp_path, "default.md", "---\ndescription: mine\n---\n")  # a config agent has that name
    _write(tmp_path, "Upper.md", "---\ndescription: x\n---\n")
    _write(tmp_path, "bin.md", b"\x00\x01\x02\xff")
    _write(tmp_path, "huge.md", "---\ndescription: x\n---\n" + "y" * 70_000)
    (tmp_path / "agents" / "dir.md").mkdir()
    with open(os.fsencode(tmp_path / "agents") + b"/caf\xe9.md", "wb") as fh:  # a name that is not UTF-8
        fh.write(b"---\ndescription: x\n---\n")
    cfg = _config(tmp_path)
    generation = cfg.agent_files().current()
    assert list(generation.agents) == ["good"]
    errors = {e.id: e.error for e in generation.errors}
    assert set(errors) == {"broken", "default", "Upper", "bin", "huge", "dir", "caf?"}
    assert "caf?.md: its file name is not UTF-8" in errors["caf?"]
    json.dumps(report(cfg), ensure_ascii=False).encode("utf-8")  # every error can be sent and printed
    assert "line 2: 'tools' must be a list" in errors["broken"]
    assert "shadowed by agents.default in config" in errors["default"]
    assert "no valid agent id" in errors["Upper"] and "NUL" in errors["bin"] and "over 64 KiB" in errors["huge"]
    assert cfg.agent("default").source == "config"  # the config one wins
    with pytest.raises(ConfigError) as e:
        cfg.agent("broken")
    assert e.value.key_path == "agents/broken.md" and "'tools' must be a list" in e.value.reason


def test_an_edit_makes_a_new_generation_and_a_held_one_stays_as_it_was(tmp_path: Path) -> None:
    path = _write(tmp_path, "coder.md", "---\nmodel: default\n---\nversion one")
    files = AgentFiles(tmp_path, KNOWN)
    first = files.current()
    assert files.current() is first  # nothing changed: no re-read
    path.write_text("---\nmodel: big\n---\nversion two, longer")
    second = files.current()
    assert second.number == first.number + 1 and second.agents["coder"].model == "big"
    assert first.agents["coder"].instructions == "version one"  # a turn holding it keeps it
    path.unlink()
    assert files.current().agents == {}


def test_config_references_may_name_file_agents_and_unknown_ones_still_fail(tmp_path: Path) -> None:
    _write(tmp_path, "coder.md", "---\ndescription: x\n---\n")
    _write(tmp_path, "broken.md", "---\ntools: 1\n---\n")
    cfg = _config(tmp_path, channels={"cli_chat": {"agent": "coder"}, "web": {"agent": "broken"}})
    assert cfg.channels["cli_chat"].agent == "coder" and cfg.agent_names() == ["default", "coder"]
    with pytest.raises(ConfigError) as e:
        _config(tmp_path, channels={"cli_chat": {"agent": "ghost"}})
    assert e.value.key_path == "channels.cli_chat.agent" and "coder" in e.value.reason
    # a job made at run time (/api/jobs, `picobot jobs add`) and the OpenAI API's model names
    job = {"id": "j", "kind": "agent_task", "schedule": {"type": "interval", "seconds": 3600},
           "target": {"channel": "web", "chat_id": "c"}, "payload": {"prompt": "p", "agent": "coder"}}
    assert parse_job(job, cfg, now=0).payload["agent"] == "coder"
    with pytest.raises(JobError) as bad:
        parse_job({**job, "payload": {"prompt": "p", "agent": "broken"}}, cfg, now=0)
    assert bad.value.field == "payload.agent" and "coder" in str(bad.value)
    assert agent_of(cfg, "coder") == "coder" and agent_of(cfg, "broken") is None


def test_skills_sub_agents_and_agent_files_share_one_parser_and_its_errors() -> None:
    from picobot.config import agent_files
    from picobot.domain import definition
    from picobot.skills import frontmatter as skill_frontmatter
    from picobot.subagents import definitions as subagent_definitions

    assert skill_frontmatter.parse_definition is definition.parse is subagent_definitions.parse_definition
    assert agent_files.parse is definition.parse
    with pytest.raises(SkillError, match=r"line 3: 'description' is a list"):
        parse_skill("---\nname: x\ndescription: [a]\n---\n")
    with pytest.raises(DefinitionError) as e:
        parse_subagent("---\ndescription: d\nprompt_template: p\nallowed_tools: read\n---\n", "sub", "user", "S.md")
    assert str(e.value).startswith("S.md: line 4: 'allowed_tools' must be a list of tool names")


_HOSTILE = st.one_of(
    st.binary(max_size=2000),
    st.text(max_size=2000).map(lambda t: ("---\n" + t + "\n---\nbody").encode("utf-8", "surrogatepass")),
    st.integers(1, 3000).map(lambda n: ("---\nmodel: " + "[" * n + "]" * n + "\n---\n").encode()),
    st.integers(1, 3000).map(lambda n: ("---\ntools:\n" + "".join(" " * i + "- \n" for i in range(n))
                                        + "---\n").encode()),
    st.sampled_from([b"---\ntools: !!python/object:os.system x\n---\n", b"---\na: &a [*a]\ntools: *a\n---\n",
                     b"---\nmodel: \xed\xa0\x80\n---\n", b"---\ndescription: \"\\ud800\"\n---\n",
                     b"---\nmax_tool_iterations: 1e400\n---\n", b"---\n? [a]\n: b\n---\n"]),
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(data=_HOSTILE)
def test_hostile_files_never_crash_the_loader(tmp_path: Path, data: bytes) -> None:
    name = f"h{uuid.uuid4().hex[:8]}.md"
    path = _write(tmp_path, name, data)
    try:
        generation = AgentFiles(tmp_path, KNOWN).current()
        assert name[:-3] in generation.agents or generation.error_of(name[:-3]) is not None
        json.dumps([e.error for e in generation.errors])  # every error can be shown
    finally:
        path.unlink()


# --- the whole stack -------------------------------------------------------------------

CODER_V1 = "---\ndescription: writes code\nmodel: default:big\ntools: [read, task]\ndelegates: [helper]\n---\n" \
           "CODER-INSTRUCTIONS-V1: you write code.\n"
HELPER = "---\ndescription: helps\nmodel: helper\ntools: [calculator]\n---\nHELPER-INSTRUCTIONS: you help.\n"
OUTSIDER = "---\ndescription: not a delegate\n---\nOUTSIDER-INSTRUCTIONS\n"


@pytest.fixture(scope="module")
def agents_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    tmp = tmp_path_factory.mktemp("agent-files")
    port = free_port()
    cfg = base_config(fake_llm.url, port)
    cfg["models"]["big"] = {"model_id": "big-model"}
    cfg["models"]["helper"] = {"model_id": "helper-model"}
    cfg["channels"] = {"cli_chat": {"agent": "coder"}}
    for name, text in (("coder.md", CODER_V1), ("helper.md", HELPER), ("outsider.md", OUTSIDER),
                       ("broken.md", "---\ndescription: x\ntools: nope\n---\n")):
        _write(tmp / "home", name, text)  # before the stack's first config load: the channel names one
    s = Stack(tmp, fake_llm.url, config=cfg)
    s.port = port
    s.start(workers=1, beat=False)
    yield s
    s.stop()


def _bodies(llm, text: str) -> list[dict[str, Any]]:  # type: ignore[no-untyped-def]
    """The chat requests whose last user message holds `text`, oldest first."""
    found = HTTP.get(llm.url + "/_fake/requests").json()["requests"]
    out = []
    for r in found:
        body = r.get("body") or {}
        users = [m for m in body.get("messages", []) if m.get("role") == "user"]
        if r["path"].endswith("/chat/completions") and users and text in json.dumps(users[-1].get("content")):
            out.append(body)
    return out


def _system(body: dict[str, Any]) -> str:
    return "\n".join(json.dumps(m["content"]) for m in body["messages"] if m["role"] == "system")


def _tools(body: dict[str, Any]) -> set[str]:
    return {t["function"]["name"] for t in body.get("tools") or []}


def _ask(stack: Stack, text: str) -> dict[str, Any]:
    client = stack.client()
    try:
        return client.ask(text)
    finally:
        client.close()


def test_a_channel_bound_to_a_file_agent_uses_its_model_instructions_and_tools(agents_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    text = f"coder-turn-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"content": "coded"})
    assert _ask(agents_stack, text)["final_text"] == "coded"
    [body] = _bodies(llm, text)
    assert body["model"] == "big-model" and "CODER-INSTRUCTIONS-V1" in _system(body)
    assert _tools(body) == {"read", "task"}


def test_an_edited_file_applies_at_the_next_turn_without_a_restart(agents_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    path = agents_stack.home / "agents" / "coder.md"
    path.write_text(CODER_V1.replace("model: default:big", "model: default").replace("V1", "V2")
                    .replace("[read, task]", "[read, calculator, task]"))
    try:
        text = f"coder-edited-{uuid.uuid4().hex[:6]}"
        add_rule(llm, text, {"content": "coded again"})
        assert _ask(agents_stack, text)["final_text"] == "coded again"
        [body] = _bodies(llm, text)
        assert body["model"] == "fake-model" and "CODER-INSTRUCTIONS-V2" in _system(body)
        assert "CODER-INSTRUCTIONS-V1" not in _system(body) and _tools(body) == {"read", "calculator", "task"}
    finally:
        path.write_text(CODER_V1)
        os.utime(path, ns=(1, 1))  # a different mtime even within the clock's resolution


def test_task_to_a_delegate_runs_with_that_agents_model_and_a_non_delegate_is_refused(agents_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    tag = uuid.uuid4().hex[:6]
    call = {"name": "task", "arguments": {"description": "sum", "prompt": f"helper-child-{tag} add 2 and 2",
                                          "subagent_type": "helper"}}
    add_rule(llm, f"delegate-parent-{tag}", {"tool_calls": [call]}, {"content": "parent done"})
    add_rule(llm, f"helper-child-{tag}", {"content": "it is 4"})
    assert _ask(agents_stack, f"delegate-parent-{tag}")["final_text"] == "parent done"
    [child] = _bodies(llm, f"helper-child-{tag}")
    assert child["model"] == "helper-model" and "HELPER-INSTRUCTIONS" in _system(child)
    assert _tools(child) == {"calculator"} and "CODER-INSTRUCTIONS" not in _system(child)
    parent_after = _bodies(llm, f"delegate-parent-{tag}")[-1]
    assert "it is 4" in json.dumps(parent_after["messages"][-1])

    refused = {"name": "task", "arguments": {"description": "x", "prompt": f"outsider-child-{tag}",
                                             "subagent_type": "outsider"}}
    add_rule(llm, f"refused-parent-{tag}", {"tool_calls": [refused]}, {"content": "did it myself"})
    assert _ask(agents_stack, f"refused-parent-{tag}")["final_text"] == "did it myself"
    assert _bodies(llm, f"outsider-child-{tag}") == []  # never ran
    result = json.dumps(_bodies(llm, f"refused-parent-{tag}")[-1]["messages"][-1])
    assert "may not hand work to 'outsider'" in result and "helper" in result


def test_api_and_cli_list_every_agent_and_the_broken_files_error(agents_stack: Stack) -> None:
    http = httpx.Client(base_url=agents_stack.http, headers={"Authorization": f"Bearer {agents_stack.token}"},
                        timeout=10)
    assert HTTP.get(agents_stack.http + "/api/agents", timeout=10).status_code == 401  # like every /api route
    found = http.get("/api/agents").json()
    by_name = {a["name"]: a for a in found["agents"]}
    assert by_name["default"]["source"] == "config" and by_name["coder"]["source"] == "file"
    assert by_name["coder"]["model"] == "big" and by_name["coder"]["tools"] == ["read", "task"]
    assert by_name["coder"]["delegates"] == ["helper"] and by_name["helper"]["model"] == "helper"
    [error] = found["errors"]
    assert error["name"] == "broken" and "line 3: 'tools' must be a list" in error["error"]

    listed = agents_stack.cli("agents", "list", "--json")
    assert listed.returncode == 1  # a file has an error
    assert json.loads(listed.stdout)["errors"] == found["errors"]
    text = agents_stack.cli("agents", "list").stdout
    assert "coder" in text and "default:big" in text and "error  broken:" in text


def test_a_turn_of_a_broken_file_agent_fails_with_its_error_and_others_still_work(agents_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    path = agents_stack.home / "agents" / "coder.md"
    path.write_text("---\nmodel: nope\n---\nbroken now")
    try:
        done = _ask(agents_stack, f"broken-coder-{uuid.uuid4().hex[:6]}")
        assert done["status"] == "failed" and "'coder' cannot run" in done["error"]
        assert "unknown model 'nope'" in done["error"]
    finally:
        path.write_text(CODER_V1)
        os.utime(path, ns=(2, 2))
    text = f"coder-back-{uuid.uuid4().hex[:6]}"
    add_rule(llm, text, {"content": "back"})
    assert _ask(agents_stack, text)["final_text"] == "back"


def test_an_agents_skill_allowlist_limits_its_index_and_skill_activate(tmp_path: Path) -> None:
    from picobot.config.schema import SkillsConfig
    from picobot.domain.messages import ToolCall
    from picobot.skills import SkillCatalog, SkillPaths
    from picobot.skills.tools import skill_tools
    from picobot.tools import build_registry
    from picobot.tools.base import ToolContext

    paths = SkillPaths(home=tmp_path / "home", user_home=tmp_path / "user", workspace=tmp_path / "ws")
    for name in ("pdf-forms", "secret-ops"):
        skill = paths.home / "skills" / name / "SKILL.md"
        skill.parent.mkdir(parents=True)
        skill.write_text(f"---\ndescription: about {name}\n---\nSteps of {name}.\n")
    catalog = SkillCatalog(paths, SkillsConfig(sources=["user"]))
    assert "secret-ops" in catalog.index_text() and "pdf-forms" in catalog.index_text()
    limited = catalog.index_text(("pdf-forms",))
    assert "pdf-forms" in limited and "secret-ops" not in limited
    registry = build_registry(extra=skill_tools(catalog, None))

    def activate(name: str) -> Any:
        ctx = ToolContext(session_id="s", channel="cli_chat", chat_id="c", sender_id="u", turn_id="t",
                          workspace=tmp_path / "ws", skills=("pdf-forms",))
        return registry.execute(ToolCall(id="c1", name="skill_activate", arguments=json.dumps({"name": name})), ctx, 0)

    assert "Steps of pdf-forms" in activate("pdf-forms").content
    refused = activate("secret-ops")
    assert refused.is_error and "not among this agent's skills (pdf-forms)" in refused.content


def test_a_background_task_to_a_named_agent_runs_with_its_model_and_tools(agents_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    from tests.stack import wait_for

    tag = uuid.uuid4().hex[:6]
    call = {"name": "task", "arguments": {"description": "sum later", "prompt": f"bg-helper-{tag} add 3 and 4",
                                          "subagent_type": "helper", "background": True}}
    add_rule(llm, f"bg-parent-{tag}", {"tool_calls": [call]}, {"content": "started it"})
    # the helper answers after the parent's turn has ended: a report that lands while the turn still runs is
    # steered into it (and the parent's answer would be the report's), which is not what this test is about
    add_rule(llm, f"bg-helper-{tag}", {"content": "it is 7", "delay_ms": 3000})
    add_rule(llm, "sum later", {"content": "the helper says 7"})  # the turn the report starts
    assert _ask(agents_stack, f"bg-parent-{tag}")["final_text"] == "started it"
    wait_for(lambda: _bodies(llm, f"bg-helper-{tag}"), 60, "the background run did not call its model")
    [child] = _bodies(llm, f"bg-helper-{tag}")
    assert child["model"] == "helper-model" and "HELPER-INSTRUCTIONS" in _system(child)
    assert _tools(child) == {"calculator"}
