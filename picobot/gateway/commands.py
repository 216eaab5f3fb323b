"""Slash commands, handled at the gateway without a model call."""

from __future__ import annotations

import json
import logging
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

from picobot.config.access import agent_for
from picobot.domain.messages import text_of
from picobot.plugins.types import Command, StageContext
from picobot.gateway.inbound import InboundMessage, Reply
from picobot.gateway.limits import RateLimits
from picobot.gateway.model_commands import cmd_model, cmd_provider, dialog_model
from picobot.runtime import control, placement
from picobot.runtime.health import check_health
from picobot.storage import compaction as compaction_sql
from picobot.storage import inbound, messages, sessions, turns, usage_report
from picobot.storage.models import SessionRow

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from picobot.runtime.services import Runtime

log = logging.getLogger("picobot.gateway")

HELP = """Commands:
  /new [title]          start a new dialog
  /sessions             list this chat's dialogs
  /switch <dialog_id>   switch to a dialog (also /use)
  /rename <title>       rename the current dialog
  /archive              archive the current dialog
  /delete               delete the current dialog
  /info [--json]        dialog, model, token totals, context-window use, compaction
  /usage [--json]       tokens and estimated cost: this dialog, you today and this month
  /model [ref|default]  list this dialog's models, or switch (<provider>:<model> or a profile)
  /provider [key]       list the providers, or switch provider keeping the model
  /compact              fold older history into a summary now (in the background)
  /dump                 the current dialog as Markdown
  /health               check PicoBot's dependencies
  /queue <message>      run the message after the current turn
  /stop                 stop the current turn and clear waiting input
  /help, /?             this help"""


@dataclass
class CommandContext:
    rt: "Runtime"
    # how /queue hands its message back to the gateway (a callable, so this module needs no Gateway)
    submit: Callable[[InboundMessage], Reply]
    msg: InboundMessage
    limits: RateLimits | None = None


Handler = Callable[[CommandContext, str], Reply]


def is_command(text: str) -> bool:
    stripped = text.lstrip()
    return stripped.startswith("/") and not stripped.startswith("//")


def handle_command(ctx: CommandContext, text: str) -> Reply:
    name, _, arg = text.partition(" ")
    handler = COMMANDS.get(name.lower())
    if handler is None:
        command = ctx.rt.commands().get(name.lower().lstrip("/"))
        if command is None:
            return Reply("command", code="unknown_command", text=f"Unknown command {name}.\n\n{help_text(ctx)}",
                         data={"command": name})
        handler = _plugin_handler(command)
    reply = handler(ctx, arg.strip())
    if reply.data is None:
        reply.data = {}
    reply.data.setdefault("command", name.lower())
    return reply


def _current(ctx: CommandContext, s: "Session") -> SessionRow:
    return sessions.get_or_create_current(s, ctx.msg.channel, ctx.msg.chat_id, agent_for(ctx.rt.config, ctx.msg.channel))


def _describe(row: SessionRow) -> dict:
    return {"session_id": row.id, "dialog_id": row.dialog_id, "title": row.title, "title_source": row.title_source,
            "archived": row.archived_at is not None, "updated_at": row.updated_at}


def cmd_new(ctx: CommandContext, arg: str) -> Reply:
    limited = ctx.limits.new_dialog(f"{ctx.msg.channel}:{ctx.msg.chat_id}") if ctx.limits else None
    if limited is not None:
        return Reply("rejected", fate="rejected", code="rate_limited", text=limited.text,
                     retry_after=limited.retry_after)
    with ctx.rt.db.write() as s:
        row = sessions.create(s, ctx.msg.channel, ctx.msg.chat_id, title=arg[:256],
                              agent=agent_for(ctx.rt.config, ctx.msg.channel))
        info = _describe(row)
    return Reply("command", session_id=info["session_id"], session_changed=True, data=info,
                 text=f"New dialog {info['dialog_id']}" + (f": {arg}" if arg else "") + ".")


def cmd_sessions(ctx: CommandContext, arg: str) -> Reply:
    with ctx.rt.db.write() as s:
        current = _current(ctx, s)
        rows = sessions.list_for_chat(s, ctx.msg.channel, ctx.msg.chat_id, include_archived="--all" in arg)
        previews = sessions.previews(s, [r.id for r in rows if not r.title])  # what names an untitled one
        items = [{**_describe(r), "current": r.id == current.id, "preview": previews.get(r.id, "")} for r in rows]
    lines = [f"{'*' if i['current'] else ' '} {i['dialog_id']:<12} {_name(i)}"
             + (" [archived]" if i["archived"] else "") for i in items]
    return Reply("command", session_id=current.id, data={"sessions": items},
                 text="Dialogs (* = current):\n" + "\n".join(lines))


def _name(item: dict) -> str:
    """A dialog's title; else its first message, quoted; else `(untitled)`."""
    if item["title"]:
        return item["title"]
    return f"“{item['preview']}”" if item["preview"] else "(untitled)"


def cmd_switch(ctx: CommandContext, arg: str) -> Reply:
    if not arg:
        return Reply("command", code="usage", text="Usage: /switch <dialog_id> (see /sessions)")
    with ctx.rt.db.write() as s:
        row = sessions.switch(s, ctx.msg.channel, ctx.msg.chat_id, arg)
        if row is None:
            return Reply("command", code="not_found", text=f"No dialog {arg!r} in this chat (see /sessions).")
        info = _describe(row)
    return Reply("command", session_id=info["session_id"], session_changed=True, data=info,
                 text=f"Switched to {arg}" + (f": {info['title']}" if info["title"] else "") + ".")


def cmd_rename(ctx: CommandContext, arg: str) -> Reply:
    if not arg:
        return Reply("command", code="usage", text="Usage: /rename <title>")
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        sessions.rename(s, row, arg[:256])
        info = _describe(row)
    return Reply("command", session_id=info["session_id"], data=info, text=f"Renamed to {arg[:256]}.")


def _leave(ctx: CommandContext, action: Callable, verb: str) -> Reply:
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        old = row.dialog_id
        action(s, row)
        inbound.cancel_pending(s.connection(), row.id)
        running = turns.running_ids(s.connection(), row.id)
        nxt = (sessions.current(s, ctx.msg.channel, ctx.msg.chat_id)
               or sessions.create(s, ctx.msg.channel, ctx.msg.chat_id, agent=agent_for(ctx.rt.config, ctx.msg.channel)))
        sessions.set_current(s, nxt)
        info = _describe(nxt)
    control.request_stop(ctx.rt.redis, running)
    return Reply("command", session_id=info["session_id"], session_changed=True, data=info,
                 text=f"{verb} {old}. Now in {info['dialog_id']}.")


def cmd_archive(ctx: CommandContext, arg: str) -> Reply:
    return _leave(ctx, sessions.archive, "Archived")


def cmd_delete(ctx: CommandContext, arg: str) -> Reply:
    return _leave(ctx, sessions.delete, "Deleted")


def session_info(rt: "Runtime", row: SessionRow, message_count: int) -> dict:
    model = dialog_model(rt.config, row)
    used = rt.config.models.get((model["model"] or ":").partition(":")[2])
    window = used.context_window_tokens if used is not None else 128000
    tokens = row.last_input_tokens or 0
    return {
        **{k: v for k, v in _describe(row).items()}, **model, "messages": message_count,
        "input_tokens": row.input_tokens, "output_tokens": row.output_tokens,
        "context_tokens": tokens, "context_window_tokens": window,
        "context_used_pct": round(100 * tokens / window, 1) if window else 0.0,
    }


def compaction_info(rt: "Runtime", s: "Session", row: SessionRow, window: int) -> dict[str, Any]:
    """How often the dialog was compacted, when last, whether one runs now, and where it would start."""
    from picobot.coord.keys import compacting

    count, last = compaction_sql.summary_stats(s.connection(), row.id)
    try:
        running = bool(rt.redis.exists(compacting(row.id)))
    except Exception:  # Redis away: /info still answers from SQL
        running = False
    return {"compactions": count, "last_compacted_at": last, "active_from_position": row.compacted_before,
            "running": running, "threshold_tokens": int(window * compaction_sql.TRIGGER_FRACTION)}


def _compaction_line(c: dict) -> str:
    if c["compactions"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(c["last_compacted_at"] or 0))
        text = f"Compaction: {c['compactions']} so far, last at {when}"
    else:
        text = f"Compaction: none yet (runs after a turn above ~{c['threshold_tokens']} estimated tokens, or /compact)"
    return text + ("; one is running now" if c["running"] else "")


def cmd_info(ctx: CommandContext, arg: str) -> Reply:
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        info = session_info(ctx.rt, row, messages.count(s, row.id))
        info["answered_by"] = messages.last_answered_by(s, row.id)  # set when a fallback chain is in use
        info["compaction"] = compaction_info(ctx.rt, s, row, info["context_window_tokens"])
    info["worker_host"] = placement.where(ctx.rt, row.channel, row.chat_id) if placement.enabled(ctx.rt.config) else None
    extra = plugin_info(ctx.rt, info["session_id"], info)
    if "--json" in arg:
        return Reply("command", session_id=info["session_id"], data=info, text=json.dumps(info, indent=2))
    text = (f"Dialog {info['dialog_id']} ({info['title'] or 'untitled'}) — {info['session_id']}\n"
            f"Model: {_model_line(info)}\n"
            f"Messages: {info['messages']}\n"
            f"Tokens: {info['input_tokens']} in / {info['output_tokens']} out\n"
            f"Context window: {info['context_tokens']} / {info['context_window_tokens']} "
            f"({info['context_used_pct']}%)\n{_compaction_line(info['compaction'])}")
    if info["answered_by"]:
        text += f"\nLast answered by: {info['answered_by']}"
    if info["worker_host"]:
        text += f"\n{_host_line(info['worker_host'])}"
    text += "".join(f"\n{name}: {value}" for name, value in extra.items())
    return Reply("command", session_id=info["session_id"], data=info, text=text)


def _host_line(h: dict) -> str:
    """Where this chat's workspace lives (runtime/placement.py), and its last move."""
    state = {True: "", False: ", not answering now", None: ""}[h["alive"]]
    text = f"Worker host: {h['host']}{state} (this chat's files are there)"
    if h["moved_from"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(h["moved_at"] or 0))
        text += f"; moved from {h['moved_from']} at {when}, whose files are not reachable"
    return text


def cmd_usage(ctx: CommandContext, arg: str) -> Reply:
    if arg not in ("", "--json"):
        return Reply("command", code="usage", text="Usage: /usage [--json]")
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        dialog = usage_report.for_session(s.connection(), row.id).to_dict()
        data = {"session_id": row.id, "dialog_id": row.dialog_id, "dialog": dialog,
                **usage_report.for_user(s.connection(), f"{ctx.msg.channel}:{ctx.msg.sender_id}")}
    if arg == "--json":
        return Reply("command", session_id=row.id, data=data, text=json.dumps(data, indent=2, ensure_ascii=False))
    today, month = data["today"], data["month"]
    text = "\n".join(["Usage (estimated cost in USD)", _usage_line(f"This dialog ({row.dialog_id})", dialog),
                      _usage_line(f"You today ({today['day']})", today),
                      _usage_line(f"You this month ({month['month']})", month)])
    return Reply("command", session_id=row.id, data=data, text=text)


def _usage_line(label: str, t: dict) -> str:
    cached = f", {t['cached_input_tokens']:,} of them cached" if t["cached_input_tokens"] else ""
    return (f"{label}: {t['calls']:,} model call(s), {t['input_tokens']:,} in{cached} / "
            f"{t['output_tokens']:,} out tokens, ${t['cost_usd']:.4f}")


def _model_line(info: dict) -> str:
    if info["model"] is None:
        return "none configured"
    how = "chosen for this dialog with /model" if info["model_chosen"] else "the agent's default"
    return f"{info['model']} ({info['model_id']}, {how})"


def plugin_info(rt: "Runtime", session_id: str, info: dict) -> dict:
    """The plugins' extra /info fields (the last turn's trace id), added to `info` where not taken."""
    extra: dict = {}
    for found in rt.plugins.call("picobot_session_info", session_id=session_id, ports=rt):
        if isinstance(found, dict):
            extra.update({str(k): v for k, v in found.items() if str(k) not in info and str(k) not in extra})
    info.update(extra)
    return extra


def dump_markdown(row: SessionRow, rows: list) -> str:
    out = [f"# {row.title or row.dialog_id}", "", f"Session `{row.id}`", ""]
    for m in rows:
        if m.role == "system":
            continue
        if m.role == "tool":
            out += [f"**tool result** `{m.name}`:", "", "```", text_of(m.content)[:4000], "```", ""]
            continue
        if m.content:
            out += [f"**{m.role}**:", "", text_of(m.content), ""]
        for call in m.tool_calls or []:
            out += [f"**tool call** `{call['name']}` `{call['arguments']}`", ""]
    return "\n".join(out)


def cmd_dump(ctx: CommandContext, arg: str) -> Reply:
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        md = dump_markdown(row, messages.load_rows(s, row.id))
        sid, dialog = row.id, row.dialog_id
    path = ctx.rt.config.home / "dumps" / f"{ctx.msg.channel}_{ctx.msg.chat_id}_{dialog}_{int(time.time())}.md"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(md, encoding="utf-8")
    return Reply("command", session_id=sid, data={"markdown": md, "path": str(path)},
                 text=f"{md}\n\n(saved to {path.name} in the dumps folder)")


def cmd_compact(ctx: CommandContext, arg: str) -> Reply:
    with ctx.rt.db.write() as s:
        sid = _current(ctx, s).id
    ctx.rt.queue.enqueue_compaction(sid, force=True)
    return Reply("command", session_id=sid, data={"queued": True},
                 text="Compacting this dialog in the background: older messages become a [Compressed History] "
                      "summary and the last 3 user turns stay whole. The summary shows in the history when it is "
                      "done (/info shows the state). With 3 user turns or fewer there is nothing to fold.")


def help_text(ctx: CommandContext) -> str:
    """The built-in commands, then those plugins add (/mcp is the MCP capability's)."""
    extra = [f"  /{name:<20} {c.description}" for name, c in sorted(ctx.rt.commands().items())]
    return HELP if not extra else HELP + "\n" + "\n".join(extra)


def _plugin_handler(command: Command) -> Handler:
    """A plugin's command as a handler: its answer is text, or {"text", "data"}; a failure is said plainly."""
    def run(ctx: CommandContext, arg: str) -> Reply:
        stage = StageContext(session_id="", channel=ctx.msg.channel, chat_id=ctx.msg.chat_id,
                             sender_id=ctx.msg.sender_id, turn_id="")
        try:
            answer = command.handler(stage, arg)
        except Exception:
            log.exception("plugin command /%s failed", command.name)
            return Reply("command", code="command_failed", text=f"/{command.name} failed; the log has the details.")
        if isinstance(answer, dict):
            return Reply("command", data=dict(answer.get("data") or {}), text=str(answer.get("text") or ""))
        return Reply("command", text=str(answer))

    return run


def cmd_help(ctx: CommandContext, arg: str) -> Reply:
    return Reply("command", text=help_text(ctx))


def cmd_health(ctx: CommandContext, arg: str) -> Reply:
    report = check_health(ctx.rt)
    lines = [f"{'ok ' if v['ok'] else 'BAD'} {k}: {v.get('detail', '')}" for k, v in report["checks"].items()]
    return Reply("command", data=report, text=f"PicoBot is {report['status']}\n" + "\n".join(lines))


def cmd_queue(ctx: CommandContext, arg: str) -> Reply:
    if not arg:
        return Reply("command", code="usage", text="Usage: /queue <message>")
    msg = InboundMessage(ctx.msg.channel, ctx.msg.chat_id, ctx.msg.sender_id, arg,
                         ctx.msg.platform_message_id, mode="queue")
    return ctx.submit(msg) if not is_command(arg) else Reply(
        "command", code="usage", text="/queue takes a message, not a command.")


def cmd_stop(ctx: CommandContext, arg: str) -> Reply:
    with ctx.rt.db.write() as s:
        row = _current(ctx, s)
        # the turns running now, read with the clearing: a turn claimed a moment ago is stopped,
        # and input not yet claimed is cleared, so nothing slips between the two
        cleared = inbound.cancel_pending(s.connection(), row.id)
        running = turns.running_ids(s.connection(), row.id)
        sid = row.id
    control.request_stop(ctx.rt.redis, running)
    # what plugins run for the dialog (sub-agent runs, background ones too)
    ctx.rt.plugins.call("picobot_session_stopped", session_id=sid, ports=ctx.rt)
    return Reply("command", session_id=sid, data={"cleared": cleared},
                 text=f"Stopping the current turn; cleared {cleared} waiting message(s).")


COMMANDS: dict[str, Handler] = {
    "/new": cmd_new, "/sessions": cmd_sessions, "/switch": cmd_switch, "/use": cmd_switch,
    "/rename": cmd_rename, "/archive": cmd_archive, "/delete": cmd_delete, "/info": cmd_info,
    "/dump": cmd_dump, "/help": cmd_help, "/?": cmd_help, "/health": cmd_health, "/queue": cmd_queue,
    "/stop": cmd_stop, "/compact": cmd_compact, "/usage": cmd_usage, "/model": cmd_model, "/provider": cmd_provider,
}
