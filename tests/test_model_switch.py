"""Switching a dialog's model (`/model`, `/provider`), `agents.<name>.models` and `profiles`.

The switch goes through a real stack (web, worker, Redis, SQLite) and the fake LLM's request log
shows which model id each turn asked for; the worker and web processes are restarted in between.
"""

from __future__ import annotations

import json
import uuid
from typing import Any, Iterator

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picobot.cli.embedded_redis import free_port
from picobot.config.model_refs import MAX_REF_CHARS
from picobot.config.schema import Config
from picobot.errors import ConfigError
from tests.conftest import add_rule
from tests.stack import Stack, WsClient, base_config
from tests.http_client import HTTP

# --- config ----------------------------------------------------------------------------


def _config(models: Any = (), profiles: Any = None, fallback: Any = ()) -> dict[str, Any]:
    return {
        "providers": {"default": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"},
                      "other": {"type": "openai", "base_url": "http://127.0.0.1:9/v1"}},
        "models": {"default": {"model_id": "a"}, "second": {"model_id": "b"}, "third": {"model_id": "c"}},
        "profiles": {"fast": {"provider": "other", "model": "second"}} if profiles is None else profiles,
        "agents": {"default": {"provider": "default", "model": "default", "fallback": list(fallback),
                               "models": models if isinstance(models, (str, int, dict)) or models is None
                               else list(models)}},
    }


def _rejected(raw: dict[str, Any]) -> str:
    from pydantic import ValidationError

    try:
        Config.model_validate(raw)
    except ConfigError as exc:
        return str(exc)
    except ValidationError as exc:
        return " ".join(".".join(str(p) for p in e["loc"]) + " " + e["msg"] for e in exc.errors())
    raise AssertionError("accepted")


def test_the_choices_are_the_agents_model_its_fallback_and_its_models_each_once() -> None:
    cfg = Config.model_validate(_config(models=["default:second", "fast", "default:default"],
                                        fallback=["fast", "default:third"]))
    assert [c.ref for c in cfg.model_choices("default")] == [
        "default:default", "other:second", "default:third", "default:second"]
    assert [c.ref for c in cfg.fallback_choices("default")] == ["other:second", "default:third"]  # a profile resolves
    assert cfg.resolve_model_ref("fast", "x").ref == "other:second"
    assert cfg.dialog_choice("default", "default", "third") is not None
    assert cfg.dialog_choice("default", "other", "default") is None  # not among the choices: ignored
    chosen = cfg.agent("default", cfg.resolve_model_ref("fast", "x"))
    assert (chosen.provider_key, chosen.model.model_id, chosen.chosen, chosen.ref) == ("other", "b", True, "other:second")
    assert cfg.agent("default").ref == "default:default" and not cfg.agent("default").chosen


@pytest.mark.parametrize("models, where, why", [
    (["nope:second"], "agents.default.models[0]", "unknown provider"),
    (["default:second", "default:nope"], "agents.default.models[1]", "unknown model"),
    (["slow"], "agents.default.models[0]", "unknown profile"),
    ([""], "agents.default.models[0]", "empty"),
    ([":"], "agents.default.models[0]", "<provider>:<model>"),
    (["default:"], "agents.default.models[0]", "<provider>:<model>"),
    (["x" * (MAX_REF_CHARS + 1)], "agents.default.models[0]", "at most"),
    (["default:sec\x00ond"], "agents.default.models[0]", "control characters"),
    (["default:\ud800"], "agents.default.models[0]", "control characters or invalid text"),
    ([" default:second"], "agents.default.models[0]", "spaces"),
])
def test_bad_models_entries_are_rejected_with_their_key_path(models: list[str], where: str, why: str) -> None:
    text = _rejected(_config(models=models))
    assert where in text and why in text, text


@pytest.mark.parametrize("models", ["default:second", 7, [7], [None], {"a": 1}, [["default:second"]],
                                    ["default:second"] * 65])
def test_wrong_models_types_are_rejected_with_their_key_path(models: Any) -> None:
    assert "agents.default.models" in _rejected(_config(models=models))


@pytest.mark.parametrize("profiles, where", [
    ({"fast": {"provider": "nope", "model": "second"}}, "profiles.fast.provider"),
    ({"fast": {"provider": "other", "model": "nope"}}, "profiles.fast.model"),
    ({"fast": {"provider": "other"}}, "profiles.fast.model"),
    ({"fast": {"provider": "other", "model": "second", "temperature": 1}}, "profiles.fast.temperature"),
    ({"fast": {"provider": "", "model": "second"}}, "profiles.fast.provider"),
    ({"fast": {"provider": 7, "model": "second"}}, "profiles.fast.provider"),
    ({"fast": "other:second"}, "profiles.fast"),
    ({"default": {"provider": "other", "model": "second"}}, "profiles.'default'"),
    ({"a:b": {"provider": "other", "model": "second"}}, "profiles.'a:b'"),
    ({"": {"provider": "other", "model": "second"}}, "profiles.''"),
    ({"x\ud800": {"provider": "other", "model": "second"}}, "profiles.'x\\\\ud800'"),
    ([], "profiles"),
])
def test_bad_profiles_are_rejected_with_their_key_path(profiles: Any, where: str) -> None:
    text = _rejected(_config(profiles=profiles))
    assert where in text, text


def test_a_fallback_entry_may_name_a_profile_and_an_unknown_one_is_rejected() -> None:
    assert Config.model_validate(_config(fallback=["fast"])).fallback_choices("default")[0].ref == "other:second"
    text = _rejected(_config(fallback=["slow"]))
    assert "agents.default.fallback[0]" in text and "unknown profile" in text


_GOOD = {"default:default", "default:second", "default:third", "other:default", "other:second", "other:third", "fast"}


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(st.text(max_size=40), st.sampled_from(sorted(_GOOD))), max_size=5))
def test_hostile_models_entries_never_crash_validation(entries: list[str]) -> None:
    raw = _config(models=entries)
    if all(e in _GOOD for e in entries):
        Config.model_validate(raw)
    else:
        assert "agents.default.models[" in _rejected(raw)


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.dictionaries(st.text(max_size=20), st.one_of(
    st.fixed_dictionaries({"provider": st.sampled_from(["default", "other", "nope", ""]),
                           "model": st.sampled_from(["default", "second", "nope", ""])}),
    st.text(max_size=10), st.integers(), st.none()), max_size=3))
def test_hostile_profiles_never_crash_validation(profiles: dict[str, Any]) -> None:
    from pydantic import ValidationError

    try:
        Config.model_validate(_config(profiles=profiles))
    except ConfigError as exc:
        assert exc.key_path.startswith("profiles.")
    except ValidationError as exc:
        assert all(e["loc"][0] == "profiles" for e in exc.errors())


# --- the whole stack -------------------------------------------------------------------


def _models_asked(llm, text: str) -> list[str]:  # type: ignore[no-untyped-def]
    """The model ids of the chat requests whose last user message contains `text`."""
    out = []
    for r in HTTP.get(llm.url + "/_fake/requests").json()["requests"]:
        users = [m for m in (r.get("body") or {}).get("messages", []) if m.get("role") == "user"]
        if users and text in json.dumps(users[-1].get("content")):
            out.append(r["body"]["model"])
    return out


def _headers_asked(llm, text: str) -> list[dict[str, str]]:  # type: ignore[no-untyped-def]
    out = []
    for r in HTTP.get(llm.url + "/_fake/requests").json()["requests"]:
        users = [m for m in (r.get("body") or {}).get("messages", []) if m.get("role") == "user"]
        if users and text in json.dumps(users[-1].get("content")):
            out.append({k.lower(): v for k, v in (r.get("headers") or {}).items()})
    return out


def switch_config(llm_url: str, port: int) -> dict[str, Any]:
    """Two providers on the fake (told apart by a header), three models, one profile; `third` not allowed."""
    cfg = base_config(llm_url, port)
    cfg["providers"]["other"] = {**cfg["providers"]["default"], "extra_headers": {"X-Picobot-Provider": "other"}}
    cfg["models"]["second"] = {"model_id": "second-model", "context_window_tokens": 64000}
    cfg["models"]["third"] = {"model_id": "third-model"}
    cfg["profiles"] = {"fast": {"provider": "other", "model": "second"}}
    cfg["agents"]["default"]["models"] = ["default:second", "fast"]
    return cfg


@pytest.fixture(scope="module")
def switch_stack(tmp_path_factory: pytest.TempPathFactory, fake_llm) -> Iterator[Stack]:  # type: ignore[no-untyped-def]
    port = free_port()
    s = Stack(tmp_path_factory.mktemp("modelswitch"), fake_llm.url, config=switch_config(fake_llm.url, port))
    s.port = port
    s.start(workers=1, beat=False)
    yield s
    s.stop()


def _ask(client: WsClient, llm, tag: str) -> list[str]:  # type: ignore[no-untyped-def]
    text = f"{tag}-{uuid.uuid4().hex[:8]}"
    add_rule(llm, text, {"content": f"answer to {text}"})
    done = client.ask(text)
    assert done["status"] == "completed", done
    return _models_asked(llm, text)


def test_model_switches_the_dialog_and_survives_worker_and_web_restarts(switch_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    chat = "t-" + uuid.uuid4().hex[:10]
    client = switch_stack.client(chat)
    try:
        listed = client.command("/model")
        assert [c["ref"] for c in listed["data"]["choices"]] == ["default:default", "default:second", "other:second"]
        assert listed["data"]["model"] == "default:default" and not listed["data"]["model_chosen"]
        assert "* default:default" in listed["text"] and "profile: fast" in listed["text"]
        assert _ask(client, llm, "before") == ["fake-model"]

        switched = client.command("/model default:second")
        assert "code" not in switched and switched["data"]["model"] == "default:second", switched
        info = client.command("/info --json")["data"]
        assert (info["model"], info["model_id"], info["model_chosen"]) == ("default:second", "second-model", True)
        assert info["context_window_tokens"] == 64000  # the chosen model's window
        assert _ask(client, llm, "switched") == ["second-model"]
        other_dialog = client.command("/new")  # a new dialog starts on the agent's default
        assert _ask(client, llm, "new-dialog") == ["fake-model"]
        client.command(f"/switch {listed['data']['dialog_id']}")
    finally:
        client.close()

    switch_stack.kill("w1")
    switch_stack.kill("web")
    switch_stack.start_web(wait=False)  # started together, then waited for
    switch_stack.start_worker("w1", wait=False)
    switch_stack.wait_web()
    switch_stack.wait_workers("w1")

    client = switch_stack.client(chat)
    try:
        assert client.command("/info")["text"].count("default:second (second-model, chosen for this dialog") == 1
        assert _ask(client, llm, "restarted") == ["second-model"]
        by_profile = client.command("/model fast")
        assert by_profile["data"]["model"] == "other:second"
        text = f"profile-{uuid.uuid4().hex[:8]}"
        add_rule(llm, text, {"content": "ok"})
        assert client.ask(text)["status"] == "completed"
        assert [h.get("x-picobot-provider") for h in _headers_asked(llm, text)] == ["other"]
        assert _models_asked(llm, text) == ["second-model"]
        back = client.command("/model default")
        assert back["data"]["model"] == "default:default" and not back["data"]["model_chosen"]
        assert _ask(client, llm, "back") == ["fake-model"]
        assert other_dialog["data"]["session_id"] != client.session_id
    finally:
        client.close()


def test_provider_switches_provider_keeping_the_model_or_says_why_not(switch_stack: Stack, llm) -> None:  # type: ignore[no-untyped-def]
    client = switch_stack.client()
    try:
        listed = client.command("/provider")
        assert listed["data"]["providers"] == ["default", "other"] and "* default" in listed["text"]
        refused = client.command("/provider other")  # other:default is not among the choices
        assert refused["code"] == "model_not_allowed" and "other:second" in refused["text"]
        assert client.command("/info --json")["data"]["model"] == "default:default"  # nothing changed
        client.command("/model default:second")
        moved = client.command("/provider other")
        assert "code" not in moved and moved["data"]["model"] == "other:second"
        text = f"provider-{uuid.uuid4().hex[:8]}"
        add_rule(llm, text, {"content": "ok"})
        assert client.ask(text)["status"] == "completed"
        assert [h.get("x-picobot-provider") for h in _headers_asked(llm, text)] == ["other"]
        unknown = client.command("/provider nope")
        assert unknown["code"] == "bad_provider" and "default, other" in unknown["text"]
        assert client.command("/info --json")["data"]["model"] == "other:second"
    finally:
        client.close()


JUNK = ["", ":", "default:", ":second", "default:third", "third", "nope:second", "default:nope", "x" * 100_000,
        "default:second\x00", "default:\x07second", "\ud800", "default:\udfff", "default:second:extra",
        "../../etc/passwd", "'; DROP TABLE sessions; --", "fast:", "DEFAULT:SECOND", "\u202edefault:second"]


def _frame(text: str) -> str:
    # json.dumps keeps lone surrogates as \\ud800 escapes, as a misbehaving browser would send them
    return json.dumps({"type": "command", "command": text, "id": "junk"})


def _junk_reply(client: WsClient, arg: str) -> dict[str, Any]:
    client.send(_frame(f"/model {arg}" if arg else "/model :"))
    return client.recv_until(lambda f: f.get("id") == "junk")


@pytest.mark.parametrize("arg", JUNK)
def test_model_with_junk_is_refused_and_changes_nothing(switch_stack: Stack, arg: str) -> None:
    client = switch_stack.client()
    try:
        client.command("/model default:second")
        reply = _junk_reply(client, arg)
        assert reply["type"] == "command" and reply["code"] in ("bad_model", "model_not_allowed"), reply
        assert "Nothing changed" in reply["text"] and len(reply["text"]) < 2000
        assert reply["data"]["model"] == "default:second"
        assert client.command("/info --json")["data"]["model"] == "default:second"
    finally:
        client.close()


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(arg=st.text(min_size=1, max_size=300).filter(lambda t: t.strip() and t.strip() not in
                                                    {"default", "default:default", "default:second", "other:second",
                                                     "fast"}))
def test_hostile_model_arguments_are_refused(switch_stack: Stack, arg: str) -> None:
    client = switch_stack.client()
    try:
        reply = _junk_reply(client, arg)  # "/model <arg>": always the /model command, whatever arg holds
        assert reply["type"] == "command" and reply.get("code") in ("bad_model", "model_not_allowed"), reply
        assert reply["data"]["command"] == "/model" and "Nothing changed" in reply["text"]
        assert client.command("/info --json")["data"]["model"] == "default:default"
    finally:
        client.close()


@pytest.mark.parametrize("arg", [":", "nope", "x" * 100_000, "\ud800", "other\x00", "default:default", "fast"])
def test_provider_with_junk_is_refused_and_changes_nothing(switch_stack: Stack, arg: str) -> None:
    client = switch_stack.client()
    try:
        client.send(json.dumps({"type": "command", "command": f"/provider {arg}", "id": "junk"}))
        reply = client.recv_until(lambda f: f.get("id") == "junk")
        assert reply["code"] == "bad_provider" and "Nothing changed" in reply["text"], reply
        assert len(reply["text"]) < 2000
        assert client.command("/info --json")["data"]["model"] == "default:default"
    finally:
        client.close()


def test_a_choice_the_config_drops_gives_way_to_the_agents_model(tmp_path, fake_llm, llm) -> None:  # type: ignore[no-untyped-def]
    port = free_port()
    cfg = switch_config(fake_llm.url, port)
    stack = Stack(tmp_path, fake_llm.url, config=cfg)
    stack.port = port
    try:
        stack.start(workers=1, beat=False)
        client = stack.client("t-dropped")
        assert client.command("/model default:second")["data"]["model_chosen"]
        client.close()
        stack.kill("w1")
        stack.kill("web")
        cfg["agents"]["default"]["models"] = ["fast"]  # default:second is no longer allowed
        (stack.home / "config.json").write_text(json.dumps(cfg))
        stack.start_web(wait=False)  # started together, then waited for
        stack.start_worker("w1", wait=False)
        stack.wait_web()
        stack.wait_workers("w1")
        client = stack.client("t-dropped")
        info = client.command("/info --json")["data"]
        assert (info["model"], info["model_chosen"]) == ("default:default", False)
        assert _ask(client, llm, "dropped") == ["fake-model"]
        client.close()
        assert "which agent default may no longer use" in stack.all_logs()
    finally:
        stack.stop()
