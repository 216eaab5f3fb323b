"""`knowledge_search`, `knowledge_create`, `knowledge_list`: the shared knowledge base documents."""

from __future__ import annotations

from typing import Any

from picobot.errors import MemoryRejected
from picobot.memory.knowledge import KnowledgeBase
from picobot.tools.base import Tool, ToolContext

MAX_LISTED = 100


class _KnowledgeTool(Tool):
    def __init__(self, kb: KnowledgeBase):
        self.kb = kb


class KnowledgeSearchTool(_KnowledgeTool):
    name = "knowledge_search"
    description = "Search the knowledge base documents; name reads one whole."
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string"}, "name": {"type": "string"},
                       "limit": {"type": "integer"}},
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        if args.get("name"):
            found = self.kb.read(args["name"])
            if found is None:
                raise MemoryRejected(f"No knowledge document {args['name'][:80]!r}; knowledge_list shows them.")
            doc, body = found
            return f"# {doc.name} ({doc.source})\n\n{body}"
        hits = self.kb.search(args.get("query") or "", max(1, min(20, args.get("limit", 5))))
        if not hits:
            return "No matching documents (knowledge_list shows them all)."
        return "\n\n".join(f"## {h.doc.name}\n{h.snippet}" for h in hits)


class KnowledgeCreateTool(_KnowledgeTool):
    name = "knowledge_create"
    description = "Write a knowledge document (markdown) for later sessions; same name replaces it."
    parameters = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "content": {"type": "string"}},
        "required": ["name", "content"],
    }

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        with ctx.gate.side_effect():  # a stopped turn writes nothing more
            doc, replaced = self.kb.create(args["name"], args["content"])
        return f"{'Replaced' if replaced else 'Created'} knowledge document {doc.name}."


class KnowledgeListTool(_KnowledgeTool):
    name = "knowledge_list"
    description = "List the knowledge base documents."
    parameters = {"type": "object", "properties": {}}
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        docs = self.kb.list()
        if not docs:
            return "The knowledge base is empty."
        lines = [f"- {d.name}: {d.title}" for d in docs[:MAX_LISTED]]
        if len(docs) > MAX_LISTED:
            lines.append(f"({len(docs) - MAX_LISTED} more not listed; search by words instead)")
        return "\n".join(lines)


def knowledge_tools(kb: KnowledgeBase) -> list[Tool]:
    return [KnowledgeSearchTool(kb), KnowledgeCreateTool(kb), KnowledgeListTool(kb)]
