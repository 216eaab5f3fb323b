"""The tool registry: what the model may call, and the one place tool calls are executed.

`execute` never raises for a bad call or a failing tool: every problem becomes a
ToolResult(is_error=True) whose text tells the model what to fix. Only TurnCancelled
escapes, so /stop ends the turn.
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any, Callable

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError, ValidationError

from picobot.domain.messages import ToolCall
from picobot.errors import ToolError, TurnCancelled
from picobot.providers.base import ToolSpec
from picobot.security.redact import redact
from picobot.tools.base import Tool, ToolContext, ToolOutput, ToolResult

logger = logging.getLogger("picobot.tools")

_QUOTE_CHARS = 200
_ERROR_MESSAGE_CHARS = 300


class ToolRegistry:
    """Named tools in registration order.

    Tools may be added and removed while turns run (MCP tools appear when their server
    connects): writers swap in new dicts under a lock and never change a published one, so
    readers need no lock and never see a dict change under an iteration.
    """

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        self._validators: dict[str, Draft202012Validator] = {}
        self._specs: dict[str, ToolSpec] = {}
        self._write_lock = threading.Lock()

    def register(self, tool: Tool) -> None:
        """Add a tool; its name must be new and its parameters a valid JSON schema."""
        name = tool.name
        if not name or not isinstance(name, str):
            raise ValueError(f"tool {type(tool).__name__} has no name")
        try:
            Draft202012Validator.check_schema(tool.parameters)
        except SchemaError as exc:
            raise ValueError(f"tool {name!r} has an invalid parameters schema: {exc.message}") from exc
        with self._write_lock:
            if name in self._tools:
                raise ValueError(f"a tool named {name!r} is already registered")
            # validator first: a reader that finds the tool always finds its validator
            self._validators = {**self._validators, name: Draft202012Validator(tool.parameters)}
            self._specs = {**self._specs, name: ToolSpec(name, tool.description, model_schema(tool.parameters))}
            self._tools = {**self._tools, name: tool}

    def unregister(self, name: str) -> Tool | None:
        """Remove a tool by name; returns it, or None if there was none."""
        with self._write_lock:
            tools = dict(self._tools)
            tool = tools.pop(name, None)
            self._tools = tools
            return tool  # its validator stays: a call that already found the tool still validates

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def narrowed(self, keep: Callable[[Tool], bool], replace: dict[str, Tool] | None = None) -> ToolRegistry:
        """A new registry of the tools `keep` accepts, in order; `replace` swaps a kept tool for another
        instance with the very same parameters. Validators are shared, not rebuilt: checking every
        schema again would cost more than a sub-agent's whole start."""
        replace = replace or {}
        tools = {name: replace.get(name, tool) for name, tool in self._tools.items() if keep(tool)}
        for name, tool in tools.items():
            if tool.parameters is not self._tools[name].parameters:
                raise ValueError(f"tool {name!r} can only be replaced by one with the same parameters")
        child = ToolRegistry()
        child._validators = {name: self._validators[name] for name in tools}
        child._specs = {name: ToolSpec(name, tool.description, self._specs[name].parameters) for name, tool in tools.items()}
        child._tools = tools
        return child

    def names(self) -> list[str]:
        return list(self._tools)

    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def specs(self) -> list[ToolSpec]:
        specs = self._specs
        return [specs[name] for name in self._tools]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def is_read_only(self, name: str) -> bool:
        tool = self._tools.get(name)
        return tool is not None and tool.read_only

    def footprint(self, call: ToolCall, ctx: ToolContext) -> frozenset[str]:
        """What a call touches, for ordering; empty when the call is invalid (it will fail anyway)."""
        tool = self._tools.get(call.name)
        if tool is None:
            return frozenset()
        try:
            return frozenset(tool.footprint(parse_arguments(call.name, call.arguments), ctx))
        except Exception:  # a bad call is reported when it runs, not here
            return frozenset()

    def execute(self, call: ToolCall, ctx: ToolContext, max_chars: int) -> ToolResult:
        """Run one tool call. Results over max_chars (if > 0) are truncated with a marker."""
        ctx.cancel.raise_if_cancelled()
        result = self._run(call, ctx)
        content = redact(result.content, ctx.secrets) if ctx.secrets else result.content
        return ToolResult(truncate(content, max_chars), result.is_error, result.images)

    def _run(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        tool = self._tools.get(call.name)
        if tool is None:
            available = ", ".join(self._tools) or "(none)"
            return _error(f"Unknown tool {call.name!r}. Available tools: {available}.")
        try:
            args = parse_arguments(call.name, call.arguments)
            problems = self._schema_problems(call.name, args)
            if problems:
                return _error(_schema_error_text(call.name, problems, tool.parameters))
            output = tool.execute(args, ctx)
        except TurnCancelled:
            raise
        except ToolError as exc:
            return _error(str(exc) or f"Tool {call.name} failed.")
        except Exception as exc:
            logger.exception("tool %s failed (call %s)", call.name, call.id)
            return _error(f"Tool {call.name} failed: {type(exc).__name__}: {exc}")
        if isinstance(output, ToolOutput):
            return ToolResult(output.text, images=tuple(output.images))
        return ToolResult(output if isinstance(output, str) else str(output))

    def _schema_problems(self, name: str, args: dict[str, Any]) -> list[str]:
        errors = sorted(self._validators[name].iter_errors(args), key=lambda e: list(e.absolute_path))
        return [f"{_json_path(e)}: {_shorten(e.message, _ERROR_MESSAGE_CHARS)}" for e in errors]


def model_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The arguments schema as the model sees it: without what only the validator needs.

    Every call is validated against the full schema (unknown arguments are refused with a clear error
    then), so the top-level `"additionalProperties": false` and an empty `"required"` list would only
    spend prompt tokens on every model call.
    """
    if schema.get("additionalProperties") is not False and schema.get("required") != []:
        return schema
    return {k: v for k, v in schema.items()
            if not (k == "additionalProperties" and v is False) and not (k == "required" and v == [])}


def parse_arguments(tool_name: str, raw: str) -> dict[str, Any]:
    """The model's raw argument text as a dict; empty text means no arguments."""
    if raw is None or not raw.strip():
        return {}
    try:
        value = json.loads(raw)
    except (json.JSONDecodeError, RecursionError) as exc:
        detail = str(exc) if isinstance(exc, json.JSONDecodeError) else "nested too deeply"
        raise ToolError(
            f"Arguments for tool {tool_name} are not valid JSON ({detail}). "
            f"Send a single JSON object. Received: {_quote(raw)}"
        ) from None
    if not isinstance(value, dict):
        raise ToolError(
            f"Arguments for tool {tool_name} must be a JSON object, not {_json_type(value)}. "
            f"Received: {_quote(raw)}"
        )
    return value


def truncate(text: str, max_chars: int) -> str:
    """Cut text to max_chars, saying how much was cut. max_chars <= 0 means no limit."""
    if max_chars <= 0 or len(text) <= max_chars:
        return text
    cut = len(text) - max_chars
    return f"{text[:max_chars]}\n\n[... truncated: {cut} more characters not shown ...]"


def schema_summary(schema: dict[str, Any]) -> str:
    """A one-line picture of an object schema, e.g. `{path: string, limit?: integer}`."""
    props: dict[str, Any] = schema.get("properties") or {}
    required = set(schema.get("required") or [])
    fields = [f"{k}{'' if k in required else '?'}: {_type_of(v)}" for k, v in props.items()]
    text = "{" + ", ".join(fields) + "}"
    if schema.get("additionalProperties") is False:
        text += " (no other properties allowed)"
    return text


def _schema_error_text(name: str, problems: list[str], schema: dict[str, Any]) -> str:
    lines = [f"Invalid arguments for tool {name}:"]
    lines += [f"- {p}" for p in problems]
    lines.append(f"Expected arguments: {schema_summary(schema)}")
    lines.append("Fix the arguments and call the tool again.")
    return "\n".join(lines)


def _type_of(prop: Any) -> str:
    if not isinstance(prop, dict):
        return "any"
    if "enum" in prop:
        return " | ".join(json.dumps(v) for v in prop["enum"])
    kind = prop.get("type", "any")
    if isinstance(kind, list):
        kind = " | ".join(kind)
    if kind == "array" and isinstance(prop.get("items"), dict):
        return f"array of {_type_of(prop['items'])}"
    return str(kind)


def _json_path(error: ValidationError) -> str:
    path = "$"
    for part in error.absolute_path:
        path += f"[{part}]" if isinstance(part, int) else f".{part}"
    return path


def _json_type(value: Any) -> str:
    names = {list: "an array", str: "a string", bool: "a boolean", int: "a number", float: "a number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)


def _quote(raw: str) -> str:
    more = f" ... ({len(raw) - _QUOTE_CHARS} more characters)" if len(raw) > _QUOTE_CHARS else ""
    return f"{raw[:_QUOTE_CHARS]!r}{more}"


def _shorten(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _error(text: str) -> ToolResult:
    return ToolResult(text, is_error=True)
