"""`@tool`: a typed Python function becomes a `Tool`, its JSON schema read from the signature.

    @tool
    def weather(city: str, units: Literal["c", "f"] = "c", ctx: ToolContext | None = None) -> str:
        \"\"\"The weather in a city now.

        Args:
            city: The city's name, in English.
        \"\"\"

Supported parameter types: str, int, float, bool, Any, list[...], dict / dict[str, ...], Literal[...]
(an enum), `X | None`, unions, `Annotated[X, "description"]` and pydantic models (their schema
inlined; a recursive model keeps its `$defs` at the top of the tool's schema). A parameter without
a default is required. A parameter named `ctx` (or typed `ToolContext`) receives the call's
ToolContext and is not in the schema. The docstring's first paragraph is the tool's description;
an "Args:" (Google) or "Parameters" (NumPy) section describes the parameters.
"""

from __future__ import annotations

import copy
import inspect
import json
import re
import sys
import types
from dataclasses import dataclass
from typing import Annotated, Any, Callable, Literal, Union, get_args, get_origin

from picobot.errors import ToolArgumentsError
from picobot.tools.base import Tool, ToolContext

_SIMPLE = {str: "string", int: "integer", float: "number", bool: "boolean"}
_UNIONS = (Union, types.UnionType)
_DEFS = "#/$defs/"
_GOOGLE_HEADER = re.compile(r"(?:Args|Arguments|Parameters|Params)\s*:")
_GOOGLE_ENTRY = re.compile(r"\*{0,2}(\w+)\s*(?:\([^)]*\))?\s*:\s*(.*)")
_NUMPY_ENTRY = re.compile(r"(\w+)\s*(?::.*)?")
SUPPORTED = "str, int, float, bool, Any, list[...], dict[str, ...], Literal[...], X | None or a pydantic model"


def tool(fn: Callable[..., Any] | None = None, *, name: str | None = None, description: str | None = None,
         read_only: bool = False) -> Any:
    """Make a function a Tool; use bare (`@tool`) or with options (`@tool(name=..., read_only=True)`)."""
    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(f, name=name, description=description, read_only=read_only)

    return wrap if fn is None else wrap(fn)


def as_tool(item: Any) -> Tool:
    """A Tool as is; a function (decorated or not) as a FunctionTool. TypeError for anything else."""
    if isinstance(item, Tool):
        return item
    if inspect.isfunction(item) or inspect.ismethod(item):
        return FunctionTool(item)
    raise TypeError(f"{type(item).__name__} is neither a Tool nor a function")


@dataclass(frozen=True)
class _Param:
    name: str
    required: bool
    convert: Callable[[Any], Any] | None  # builds pydantic models from the JSON the model sent


class FunctionTool(Tool):
    """A Tool that calls a Python function; still callable as that function."""

    def __init__(self, fn: Callable[..., Any], name: str | None = None, description: str | None = None,
                 read_only: bool = False) -> None:
        summary, docs = parse_docstring(fn.__doc__)
        self.fn = fn
        self.name = name or fn.__name__
        self.description = summary if description is None else description
        self.read_only = read_only
        self.parameters, self._params, self._ctx, self._method = _analyse(fn, docs)
        self._bound: Any = None
        self.__doc__ = fn.__doc__
        self.__wrapped__ = fn

    def __get__(self, obj: Any, owner: type | None = None) -> FunctionTool:
        # On a class: `plugin.my_tool` is this tool bound to that instance, as a method would be.
        if obj is None or not self._method:
            return self
        bound = copy.copy(self)
        bound._bound = obj
        return bound

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.fn(self._bound, *args, **kwargs) if self._method else self.fn(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<tool {self.name}>"

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        kwargs = self._arguments(args)
        if self._ctx:
            kwargs[self._ctx] = ctx
        return result_text(self(**kwargs))

    def _arguments(self, args: dict[str, Any]) -> dict[str, Any]:
        known = {p.name for p in self._params}
        unknown = sorted(set(args) - known)
        if unknown:
            raise ToolArgumentsError(f"Tool {self.name} has no argument {', '.join(map(repr, unknown))}.")
        missing = [p.name for p in self._params if p.required and p.name not in args]
        if missing:
            raise ToolArgumentsError(f"Tool {self.name} needs the argument {', '.join(map(repr, missing))}.")
        return {p.name: _converted(self.name, p, args[p.name]) for p in self._params if p.name in args}


def _converted(tool_name: str, param: _Param, value: Any) -> Any:
    if param.convert is None:
        return value
    try:
        return param.convert(value)
    except ValueError as exc:  # pydantic's ValidationError is a ValueError
        raise ToolArgumentsError(f"Tool {tool_name}, argument {param.name!r}: {exc}") from None


def result_text(result: Any) -> str:
    """A function's return value as the text the model reads (dicts, lists and models as JSON)."""
    if isinstance(result, str):
        return result
    if result is None:
        return ""
    if hasattr(result, "model_dump_json") and _is_model(type(result)):
        return result.model_dump_json()
    if isinstance(result, (dict, list, tuple)):
        return json.dumps(result, ensure_ascii=False, default=str)
    return str(result)


# ---------------------------------------------------------------- the schema


def _analyse(fn: Callable[..., Any], docs: dict[str, str]) -> tuple[dict[str, Any], list[_Param], str | None, bool]:
    """The JSON schema, the parameters, the ctx parameter's name and whether fn is a method."""
    where = f"@tool {getattr(fn, '__qualname__', fn)!r}"
    params = list(inspect.signature(fn).parameters.values())
    method = bool(params) and params[0].name == "self" and "." in getattr(fn, "__qualname__", "")
    properties: dict[str, Any] = {}
    defs: dict[str, Any] = {}
    found: list[_Param] = []
    ctx: str | None = None
    for param in params[1:] if method else params:
        annotation = _annotation(fn, param, where)
        if param.name == "ctx" or annotation is ToolContext or _names_context(annotation):
            ctx = param.name
            continue
        properties[param.name] = _property(param, annotation, docs.get(param.name), defs, where)
        found.append(_Param(param.name, param.default is inspect.Parameter.empty, _converter(annotation)))
    return _object(properties, [p.name for p in found if p.required], defs), found, ctx, method


def _object(properties: dict[str, Any], required: list[str], defs: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    schema["additionalProperties"] = False
    if defs:
        schema["$defs"] = defs
    return schema


def _annotation(fn: Callable[..., Any], param: inspect.Parameter, where: str) -> Any:
    """The parameter's type, its string form (`from __future__ import annotations`) evaluated."""
    if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
        raise TypeError(f"{where}: parameter {param.name!r}: *args and **kwargs cannot be tool arguments")
    annotation = param.annotation
    if annotation is inspect.Parameter.empty:
        if param.name == "ctx":
            return None
        raise TypeError(f"{where}: parameter {param.name!r} has no type hint (use {SUPPORTED})")
    if not isinstance(annotation, str) or param.name == "ctx" or _names_context(annotation):
        return annotation  # ctx may be typed with a name imported only for type checkers
    try:
        return eval(annotation, getattr(fn, "__globals__", {}))  # noqa: S307 - what typing.get_type_hints does
    except Exception as exc:
        raise TypeError(f"{where}: parameter {param.name!r}: cannot read its type {annotation!r} ({exc})") from None


def _names_context(annotation: Any) -> bool:
    return isinstance(annotation, str) and re.fullmatch(r"(?:\w+\.)*ToolContext(?:\s*\|\s*None)?", annotation) is not None


def _property(param: inspect.Parameter, annotation: Any, doc: str | None, defs: dict[str, Any],
              where: str) -> dict[str, Any]:
    try:
        schema = dict(_schema(annotation, defs))
    except _Unsupported as exc:
        raise TypeError(f"{where}: parameter {param.name!r} has an unsupported type {exc.args[0]!r} "
                        f"(use {SUPPORTED})") from None
    if doc and "description" not in schema:
        schema["description"] = doc
    if param.default is not inspect.Parameter.empty and _json_value(param.default):
        schema["default"] = param.default
    return schema


class _Unsupported(Exception):
    pass


def _schema(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    """The JSON schema of one type; raises _Unsupported naming the part it cannot express."""
    origin = get_origin(t)
    if origin is Annotated:
        return _annotated(t, defs)
    if t is Any:
        return {}
    if t in _SIMPLE:
        return {"type": _SIMPLE[t]}
    if t is list or origin is list:
        return _array(t, defs)
    if t is dict or origin is dict:
        return _mapping(t, defs)
    if origin is Literal:
        return _literal(t)
    if origin in _UNIONS:
        return _union(t, defs)
    if _is_model(t):
        return _model_schema(t, defs)
    raise _Unsupported(t)


def _annotated(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    base, *extras = get_args(t)
    schema = dict(_schema(base, defs))
    for extra in extras:  # a plain string, or pydantic's Field(description=...)
        text = extra if isinstance(extra, str) else getattr(extra, "description", None)
        if isinstance(text, str) and text:
            schema["description"] = text
    return schema


def _array(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    args = get_args(t)
    return {"type": "array", "items": _schema(args[0], defs)} if args else {"type": "array"}


def _mapping(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    args = get_args(t)
    if not args:
        return {"type": "object"}
    if args[0] is not str:
        raise _Unsupported(t)  # JSON object keys are strings
    return {"type": "object", "additionalProperties": _schema(args[1], defs)}


def _literal(t: Any) -> dict[str, Any]:
    values = list(get_args(t))
    kinds = [_json_type(v) for v in values]
    if None in kinds:
        raise _Unsupported(t)
    schema: dict[str, Any] = {"enum": values}
    named = sorted({k for k in kinds if k is not None} - {"null"})  # None was refused above
    if len(named) == 1:
        schema["type"] = named[0] if "null" not in kinds else [named[0], "null"]
    return schema


def _json_type(value: Any) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    for kind, name in ((int, "integer"), (float, "number"), (str, "string")):
        if isinstance(value, kind):
            return name
    return None


def _union(t: Any, defs: dict[str, Any]) -> dict[str, Any]:
    members = [a for a in get_args(t) if a is not type(None)]
    nullable = len(members) < len(get_args(t))
    if len(members) == 1:
        schema = _schema(members[0], defs)
        return _nullable(schema) if nullable else schema
    options = [_schema(m, defs) for m in members] + ([{"type": "null"}] if nullable else [])
    return {"anyOf": options}


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    if not schema:
        return schema  # Any already takes null
    kind = schema.get("type")
    if isinstance(kind, str) and "$ref" not in schema:
        out = {**schema, "type": [kind, "null"]}
        if "enum" in out:
            out["enum"] = [*out["enum"], None]
        return out
    if "enum" in schema and "type" not in schema:
        return {**schema, "enum": [*schema["enum"], None]}
    return {"anyOf": [schema, {"type": "null"}]}


def _is_model(t: Any) -> bool:
    # pydantic is imported only by code that uses it: a module holding a model already has
    pydantic = sys.modules.get("pydantic")
    return pydantic is not None and isinstance(t, type) and issubclass(t, pydantic.BaseModel)


def _model_schema(model: Any, defs: dict[str, Any]) -> dict[str, Any]:
    schema = model.model_json_schema()
    local = schema.pop("$defs", {})
    try:
        return _inline(schema, local, frozenset())
    except _Recursive:  # a model that contains itself: its refs stay, pointing at the tool's $defs
        defs.update(local)
        return schema


class _Recursive(Exception):
    pass


def _inline(node: Any, local: dict[str, Any], seen: frozenset[str]) -> Any:
    """The schema with every `#/$defs/X` reference replaced by X's schema."""
    if isinstance(node, list):
        return [_inline(n, local, seen) for n in node]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith(_DEFS) and ref[len(_DEFS):] in local:
        key = ref[len(_DEFS):]
        if key in seen:
            raise _Recursive(key)
        target = _inline(local[key], local, seen | {key})
        return {**target, **{k: _inline(v, local, seen) for k, v in node.items() if k != "$ref"}}
    return {k: _inline(v, local, seen) for k, v in node.items()}


def _converter(annotation: Any) -> Callable[[Any], Any] | None:
    """pydantic's validator for types that hold a model (a dict becomes the model), else None."""
    if not _holds_model(annotation):
        return None
    from pydantic import TypeAdapter

    return TypeAdapter(annotation).validate_python


def _holds_model(t: Any) -> bool:
    return _is_model(t) or any(_holds_model(a) for a in get_args(t) if get_origin(t) is not Literal)


def _json_value(value: Any) -> bool:
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return False
    return True


# ---------------------------------------------------------------- the docstring


def parse_docstring(doc: str | None) -> tuple[str, dict[str, str]]:
    """A docstring's first paragraph (one line) and its parameters' descriptions by name."""
    lines = inspect.cleandoc(doc or "").splitlines()
    return _summary(lines), _param_docs(lines)


def _summary(lines: list[str]) -> str:
    first: list[str] = []
    for i, line in enumerate(lines):
        following = lines[i + 1] if i + 1 < len(lines) else ""
        if not line.strip() or _GOOGLE_HEADER.fullmatch(line.strip()) or _is_rule(following):
            break  # the paragraph ends, or a section starts
        first.append(line.strip())
    return " ".join(first)


def _param_docs(lines: list[str]) -> dict[str, str]:
    for i, line in enumerate(lines):
        if _GOOGLE_HEADER.fullmatch(line.strip()):
            return _google(lines[i + 1:])
        if line.strip() in ("Parameters", "Arguments", "Args") and i + 1 < len(lines) and _is_rule(lines[i + 1]):
            return _numpy(lines[i + 2:])
    return {}


def _is_rule(line: str) -> bool:
    return len(line.strip()) >= 3 and set(line.strip()) == {"-"}


def _google(lines: list[str]) -> dict[str, str]:
    """Google style: `name (type): text`, indented under the header; deeper lines continue it."""
    docs: dict[str, str] = {}
    current, base = None, None
    for line in lines:
        if not line.strip():
            continue
        indent = len(line) - len(line.lstrip())
        if indent == 0:
            break  # the next section
        base = indent if base is None else base
        entry = _GOOGLE_ENTRY.fullmatch(line.strip())
        if indent <= base and entry:
            current = entry[1]
            docs[current] = entry[2].strip()
        elif current:
            docs[current] = f"{docs[current]} {line.strip()}".strip()
    return docs


def _numpy(lines: list[str]) -> dict[str, str]:
    """NumPy style: `name : type` at the margin, its text indented below, until the next header."""
    docs: dict[str, str] = {}
    current = None
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        if not line[0].isspace():
            if i + 1 < len(lines) and _is_rule(lines[i + 1]):
                break
            entry = _NUMPY_ENTRY.fullmatch(line.strip())
            current = entry[1] if entry else None
            if current:
                docs[current] = ""
        elif current:
            docs[current] = f"{docs[current]} {line.strip()}".strip()
    return {k: v for k, v in docs.items() if v}
