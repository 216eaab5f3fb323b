"""/model and /provider: which of its agent's models the current dialog uses, stored with the dialog.

The choices are the agent's own model, its `fallback` entries and its `models` list
(`Config.model_choices`). A choice is kept on the session row, so it outlives web and worker
restarts; a choice the config no longer allows is ignored (the agent's own model answers).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from picobot.config.access import agent_for
from picobot.config.model_refs import DEFAULT_WORD, ModelChoice, shown
from picobot.config.schema import Config
from picobot.errors import ConfigError
from picobot.gateway.inbound import Reply
from picobot.storage import sessions
from picobot.storage.models import SessionRow

if TYPE_CHECKING:
    from picobot.gateway.commands import CommandContext

MODEL_USAGE = ("/model lists this dialog's models; /model <provider>:<model> or /model <profile> switches; "
               "/model default goes back to the agent's own model.")
STORED_KEY_CHARS = 256  # sessions.model_provider / model_key
PROVIDER_USAGE = "/provider lists the providers; /provider <key> switches provider, keeping the model."


def agent_default(config: Config, agent: str) -> ModelChoice | None:
    """The agent's own provider and model, when both are configured."""
    cfg = config.agents.get(agent)
    if cfg is None or cfg.provider not in config.providers or cfg.model not in config.models:
        return None
    return ModelChoice(cfg.provider, cfg.model)


def dialog_model(config: Config, row: SessionRow) -> dict[str, Any]:
    """The model a dialog's next turn uses, the agent's default, and whether the dialog chose it."""
    chosen = config.dialog_choice(row.agent, row.model_provider, row.model_key)
    default = agent_default(config, row.agent)
    used = chosen or default
    return {"model": used.ref if used else None,
            "model_id": config.models[used.model].model_id if used else None,
            "model_default": default.ref if default else None, "model_chosen": chosen is not None}


def _state(config: Config, row: SessionRow) -> dict[str, Any]:
    info = dialog_model(config, row)
    by_pair: dict[str, list[str]] = {}
    for name, p in sorted(config.profiles.items()):
        by_pair.setdefault(f"{p.provider}:{p.model}", []).append(name)
    choices = [{"ref": c.ref, "provider": c.provider, "model": c.model, "model_id": config.models[c.model].model_id,
                "profiles": by_pair.get(c.ref, []), "current": c.ref == info["model"],
                "default": c.ref == info["model_default"]} for c in config.model_choices(row.agent)]
    providers = list(dict.fromkeys(c["provider"] for c in choices))
    return {**info, "agent": row.agent, "session_id": row.id, "dialog_id": row.dialog_id, "choices": choices,
            "providers": providers}


def _listing(state: dict[str, Any]) -> str:
    if not state["choices"]:
        return f"No model is configured for agent {state['agent']} (see providers, models and agents in config.json)."
    width = max(len(c["ref"]) for c in state["choices"])
    lines = [f"{'*' if c['current'] else ' '} {c['ref']:<{width}}  {c['model_id']}"
             + ("  (agent's default)" if c["default"] else "")
             + (f"  profile: {', '.join(c['profiles'])}" if c["profiles"] else "") for c in state["choices"]]
    how = "chosen for this dialog" if state["model_chosen"] else "the agent's default"
    return (f"Models of agent {state['agent']} (* = this dialog's, {how}):\n" + "\n".join(lines)
            + f"\n{MODEL_USAGE}")


def _dialog(ctx: "CommandContext", s: Any) -> SessionRow:
    return sessions.get_or_create_current(s, ctx.msg.channel, ctx.msg.chat_id,
                                          agent_for(ctx.rt.config, ctx.msg.channel))


def _refused(row_id: str, code: str, text: str, state: dict[str, Any]) -> Reply:
    return Reply("command", session_id=row_id, code=code, text=text, data=state)


def _switch(ctx: "CommandContext", pick: Any) -> Reply:
    """`pick(config, row, state)` returns the ModelChoice to use, None for the default, or a refusal Reply."""
    config = ctx.rt.config
    with ctx.rt.db.write() as s:
        row = _dialog(ctx, s)
        state = _state(config, row)
        choice = pick(config, row, state)
        if isinstance(choice, Reply):
            return choice
        if choice is not None and max(len(choice.provider), len(choice.model)) > STORED_KEY_CHARS:
            return _refused(row.id, "bad_model", f"/model: {shown(choice.ref)} has a key longer than "
                            f"{STORED_KEY_CHARS} characters, which a dialog cannot store. Nothing changed.", state)
        default = agent_default(config, row.agent)
        # the agent's own model is no choice: the dialog follows the agent's default when the config changes
        keep = choice if choice is not None and choice != default else None
        sessions.set_model(s, row, keep.provider if keep else None, keep.model if keep else None)
        state = _state(config, row)
    if state["model"] is None:
        return Reply("command", session_id=state["session_id"], data=state,
                     text="This dialog is back on the agent's own model, which is not configured yet.")
    how = "chosen for this dialog" if state["model_chosen"] else "the agent's default"
    return Reply("command", session_id=state["session_id"], data=state,
                 text=f"Dialog {state['dialog_id']} now uses {state['model']} ({state['model_id']}, {how}) "
                      "from its next turn on.")


def cmd_model(ctx: "CommandContext", arg: str) -> Reply:
    if not arg:
        with ctx.rt.db.write() as s:
            state = _state(ctx.rt.config, _dialog(ctx, s))
        return Reply("command", session_id=state["session_id"], data=state, text=_listing(state))
    return _switch(ctx, lambda config, row, state: _pick_model(config, row, state, arg))


def _pick_model(config: Config, row: SessionRow, state: dict[str, Any], arg: str) -> "ModelChoice | Reply | None":
    if arg == DEFAULT_WORD:
        return None
    try:
        choice = config.resolve_model_ref(arg, "model")
    except ConfigError as exc:
        return _refused(row.id, "bad_model", f"/model: {exc.reason}. Nothing changed; /model lists the choices.",
                        state)
    if choice.ref not in {c["ref"] for c in state["choices"]}:
        allowed = ", ".join(c["ref"] for c in state["choices"]) or "none"
        return _refused(row.id, "model_not_allowed",
                        f"/model: agent {row.agent} may not use {shown(choice.ref)} (its models: {allowed}; "
                        "agents.<name>.models adds more). Nothing changed.", state)
    return choice


def cmd_provider(ctx: "CommandContext", arg: str) -> Reply:
    if not arg:
        with ctx.rt.db.write() as s:
            state = _state(ctx.rt.config, _dialog(ctx, s))
        current = (state["model"] or "").partition(":")[0]
        lines = [f"{'*' if p == current else ' '} {p}" for p in state["providers"]]
        text = (f"Providers of agent {state['agent']}'s models (* = this dialog's):\n" + "\n".join(lines)
                + f"\n{PROVIDER_USAGE}") if lines else _listing(state)
        return Reply("command", session_id=state["session_id"], data=state, text=text)
    return _switch(ctx, lambda config, row, state: _pick_provider(row, state, arg))


def _pick_provider(row: SessionRow, state: dict[str, Any], arg: str) -> "ModelChoice | Reply | None":
    if arg not in state["providers"]:
        if arg == DEFAULT_WORD:  # no provider has that name: back to the agent's own model, as /model default
            return None
        known = ", ".join(state["providers"]) or "none"
        return _refused(row.id, "bad_provider", f"/provider: {shown(arg)} is not a provider of agent "
                        f"{row.agent}'s models (known: {known}). Nothing changed.", state)
    model = (state["model"] or ":").partition(":")[2]
    pair = ModelChoice(arg, model)
    if pair.ref not in {c["ref"] for c in state["choices"]}:
        there = ", ".join(c["ref"] for c in state["choices"] if c["provider"] == arg)
        return _refused(row.id, "model_not_allowed", f"/provider: agent {row.agent} may not use {pair.ref} "
                        f"(model {model} on provider {arg}); on {arg} it may use {there}: switch with /model. "
                        "Nothing changed.", state)
    return pair
