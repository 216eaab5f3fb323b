"""`memory_search`, `memory_manage`, `timeline_recall`: the agent's long-term memory of the user.

Each works only in the calling user's scope, computed from the turn's channel and sender; no
argument can name another scope. Schemas and descriptions are sent with every model call: short.
"""

from __future__ import annotations

from typing import Any

from picobot.errors import MemoryRejected
from picobot.memory import Memory, MemoryHit, MemorySource, MemoryStore, scope_key_for
from picobot.tools.base import Tool, ToolContext

DEFAULT_NAMESPACE = "general"
# Arguments a model might use to reach into someone else's memories: refused by name, clearly.
_SCOPE_ARGS = frozenset({"scope", "scope_key", "user", "user_id", "sender_id", "channel", "chat_id"})
_STR = {"type": "string"}
_LIMIT = {"type": "integer"}  # clamped by the store; bounds here would cost tokens on every call
_CATEGORY = {"enum": ["knowledge", "timeline"]}


class _MemoryTool(Tool):
    allowed: frozenset[str] = frozenset()

    def __init__(self, store: MemoryStore):
        self.store = store

    def scope(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The caller's own scope; any argument naming a scope or other unknown argument is refused."""
        named = sorted(set(args) & _SCOPE_ARGS)
        if named:
            raise MemoryRejected(f"{self.name} works only on the current user's own memories; "
                                 f"remove {', '.join(named)} (another user's memories cannot be reached).")
        unknown = sorted(set(args) - self.allowed)
        if unknown:
            raise MemoryRejected(f"Unknown argument(s) {', '.join(unknown)[:200]}; "
                                 f"allowed: {', '.join(sorted(self.allowed))}.")
        return scope_key_for(ctx.channel, ctx.sender_id)


class MemorySearchTool(_MemoryTool):
    name = "memory_search"
    description = "Recall facts about this user from earlier chats. get needs key."
    parameters = {
        "type": "object",
        "properties": {"action": {"enum": ["search", "get", "list"]}, "query": _STR, "namespace": _STR,
                       "key": _STR, "category": _CATEGORY, "limit": _LIMIT},
        "required": ["action"],
    }
    allowed = frozenset(parameters["properties"])
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        scope = self.scope(args, ctx)
        action, namespace = args["action"], args.get("namespace")
        if action == "get":
            return self._get(scope, namespace or DEFAULT_NAMESPACE, args.get("key"))
        if action == "list":
            found = self.store.list(scope, namespace=namespace, category=args.get("category"),
                                    limit=args.get("limit", 20))
            return format_memories(found) or "No memories stored for this user yet."
        hits = self.store.search(scope, args.get("query") or "", namespace=namespace,
                                 category=args.get("category"), limit=args.get("limit", 10))
        return format_hits(hits) or "No matching memories."

    def _get(self, scope: str, namespace: str, key: Any) -> str:
        if not isinstance(key, str) or not key.strip():
            raise MemoryRejected("get needs key (and namespace, default general).")
        found = self.store.get(scope, namespace, key)
        return format_memories([found]) if found else f"No memory {namespace}/{key[:100]}."


class MemoryManageTool(_MemoryTool):
    name = "memory_manage"
    description = "Save, change or forget a lasting fact about this user (same key replaces)."
    parameters = {
        "type": "object",
        "properties": {"action": {"enum": ["put", "update", "delete"]}, "namespace": _STR, "key": _STR,
                       "content": _STR, "category": _CATEGORY,
                       "importance": {"type": "number"}},  # 0..1, checked with a clear error
        "required": ["action", "key"],
    }
    allowed = frozenset(parameters["properties"])

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        scope = self.scope(args, ctx)
        action, key = args["action"], args["key"]
        namespace = args.get("namespace") or DEFAULT_NAMESPACE
        with ctx.gate.side_effect():  # a stopped turn writes nothing more
            if action == "delete":
                gone = self.store.delete(scope, namespace, key)
                return f"Forgot {namespace}/{key}." if gone else f"No memory {namespace}/{key[:100]} to delete."
            source = _source(ctx)
            if action == "put":
                if "content" not in args:
                    raise MemoryRejected("put needs content.")
                saved = self.store.put(scope, namespace, key, args["content"], source=source,
                                       category=args.get("category", "knowledge"),
                                       importance=args.get("importance", 0.5))
            else:
                saved = self.store.update(scope, namespace, key, content=args.get("content"),
                                          category=args.get("category"), importance=args.get("importance"),
                                          source=source)
        return f"Saved {saved.namespace}/{saved.memory_key}."


class TimelineRecallTool(_MemoryTool):
    name = "timeline_recall"
    description = "Search summaries of this user's earlier conversations."
    parameters = {
        "type": "object",
        "properties": {"query": _STR, "limit": _LIMIT},
        "required": ["query"],
    }
    allowed = frozenset(parameters["properties"])
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        scope = self.scope(args, ctx)
        hits = self.store.search(scope, args["query"], category="timeline", limit=args.get("limit", 5))
        return format_hits(hits, with_dates=True) or "No matching history."


def _source(ctx: ToolContext) -> MemorySource:
    return MemorySource(session_id=ctx.session_id, seq=ctx.inbound_seq, turn_id=ctx.turn_id,
                        channel=ctx.channel, chat_id=ctx.chat_id, source_type="tool")


def format_memories(found: list[Memory], with_dates: bool = False) -> str:
    return "\n".join(_line(m, with_dates) for m in found)


def format_hits(hits: list[MemoryHit], with_dates: bool = False) -> str:
    return format_memories([h.memory for h in hits], with_dates)


def _line(m: Memory, with_dates: bool) -> str:
    if with_dates:
        import datetime as dt

        day = dt.datetime.fromtimestamp(m.created_at, dt.timezone.utc).strftime("%Y-%m-%d")
        return f"- [{day}] {m.content}"
    return f"- {m.namespace}/{m.memory_key}: {m.content}"


def memory_tools(store: MemoryStore) -> list[Tool]:
    return [MemorySearchTool(store), MemoryManageTool(store), TimelineRecallTool(store)]
