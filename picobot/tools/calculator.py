"""`calculator`: exact arithmetic for the model, evaluated by walking the AST (never eval)."""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Callable

from picobot.errors import ToolError
from picobot.tools.base import Tool, ToolContext

Number = int | float

MAX_EXPRESSION_CHARS = 2000
MAX_EXPONENT = 10_000
MAX_DIGITS = 1000
_LOG10_2 = math.log10(2)

FUNCTIONS: dict[str, Callable[..., Any]] = {
    "sqrt": math.sqrt,
    "sin": math.sin,
    "cos": math.cos,
    "tan": math.tan,
    "log": math.log,
    "log10": math.log10,
    "exp": math.exp,
    "abs": abs,
    "round": round,
    "floor": math.floor,
    "ceil": math.ceil,
    "min": min,
    "max": max,
}
CONSTANTS: dict[str, float] = {"pi": math.pi, "e": math.e}

_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FORBIDDEN_OPS: dict[type[ast.operator], str] = {
    ast.BitXor: "'^' is not supported; use ** for powers",
    ast.BitAnd: "'&' is not supported",
    ast.BitOr: "'|' is not supported",
    ast.LShift: "'<<' is not supported",
    ast.RShift: "'>>' is not supported",
    ast.MatMult: "'@' is not supported",
}


class CalculatorTool(Tool):
    name = "calculator"
    # Short on purpose: an unknown name is answered with the full list of functions.
    description = (
        "Exact arithmetic; use it, not mental math. sqrt sin cos tan (radians) "
        "log(x[, base]) log10 exp abs round floor ceil min max; pi e."
    )
    parameters = {
        "type": "object",
        "properties": {
            "expression": {
                "type": "string",
                "description": "E.g. sqrt(2) * 3 ** 2",
            }
        },
        "required": ["expression"],
        "additionalProperties": False,
    }
    read_only = True

    def execute(self, args: dict[str, Any], ctx: ToolContext) -> str:
        return format_number(evaluate(args["expression"]))


def evaluate(expression: str) -> Number:
    """Evaluate an arithmetic expression; raises ToolError with a readable reason."""
    text = expression.strip()
    if not text:
        raise ToolError("The expression is empty.")
    if len(text) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"The expression is too long (over {MAX_EXPRESSION_CHARS} characters).")
    try:
        tree = ast.parse(text, mode="eval")
        return _check_result(_eval(tree.body))
    except SyntaxError as exc:
        raise ToolError(f"Syntax error in expression {text!r}: {exc.msg}.") from None
    except ZeroDivisionError:
        raise ToolError("Division by zero.") from None
    except OverflowError:
        raise ToolError("The result is too large to compute.") from None
    except RecursionError:
        raise ToolError("The expression is nested too deeply.") from None
    except (ValueError, TypeError) as exc:
        raise ToolError(f"Math error: {exc}.") from None


def format_number(value: Number) -> str:
    """Ints as ints; floats with 15 significant digits, without a trailing .0."""
    if isinstance(value, int):
        return str(value)
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return format(value, ".15g")


def _eval(node: ast.AST) -> Number:
    if isinstance(node, ast.Constant):
        return _constant(node.value)
    if isinstance(node, ast.BinOp):
        return _binary(node)
    if isinstance(node, ast.UnaryOp):
        if type(node.op) not in _UNARY:
            raise ToolError("Only unary + and - are supported.")
        return _check_result(_UNARY[type(node.op)](_eval(node.operand)))
    if isinstance(node, ast.Name):
        if node.id in CONSTANTS:
            return CONSTANTS[node.id]
        raise ToolError(f"Unknown name {node.id!r}. Allowed constants: {', '.join(CONSTANTS)}.")
    if isinstance(node, ast.Call):
        return _call(node)
    raise ToolError(f"{_describe(node)} is not allowed; only arithmetic on numbers is supported.")


def _constant(value: Any) -> Number:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolError(f"Only numbers are allowed, not {type(value).__name__} {value!r:.40}.")
    return _check_result(value)


def _binary(node: ast.BinOp) -> Number:
    op = type(node.op)
    if op in _FORBIDDEN_OPS:
        raise ToolError(_FORBIDDEN_OPS[op] + ".")
    left, right = _eval(node.left), _eval(node.right)
    if op is ast.Pow:
        return _power(left, right)
    if op not in _BINARY:
        raise ToolError(f"Operator {op.__name__} is not supported.")
    return _check_result(_BINARY[op](left, right))


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > MAX_EXPONENT:
        raise ToolError(f"Exponent {format_number(exponent)} is too large (limit {MAX_EXPONENT}).")
    exact = isinstance(base, int) and isinstance(exponent, int) and exponent > 0 and abs(base) > 1
    if exact and exponent * math.log10(abs(base)) > MAX_DIGITS:
        raise ToolError(f"The result would have more than {MAX_DIGITS} digits.")
    return _check_result(operator.pow(base, exponent))


def _call(node: ast.Call) -> Number:
    if not isinstance(node.func, ast.Name):
        raise ToolError(f"{_describe(node.func)} cannot be called; only the listed functions can.")
    name = node.func.id
    if name not in FUNCTIONS:
        raise ToolError(f"Unknown function {name!r}. Allowed functions: {', '.join(FUNCTIONS)}.")
    if node.keywords or any(isinstance(a, ast.Starred) for a in node.args):
        raise ToolError(f"Call {name}() with plain positional arguments only.")
    if not node.args:
        raise ToolError(f"{name}() needs at least one argument.")
    args = [_eval(a) for a in node.args]
    if name == "round" and len(args) == 2 and not isinstance(args[1], int):
        raise ToolError("round(x, ndigits) needs a whole number of digits.")
    return _check_result(FUNCTIONS[name](*args))


def _check_result(value: object) -> Number:
    if isinstance(value, complex):
        raise ToolError("The result is a complex number, which is not supported.")
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("The result is not a finite number (overflow or undefined).")
    if isinstance(value, int) and value.bit_length() * _LOG10_2 > MAX_DIGITS:
        raise ToolError(f"The result has more than {MAX_DIGITS} digits.")
    if not isinstance(value, (int, float)):
        raise ToolError(f"The result is not a number: {value!r:.40}.")
    return value


def _describe(node: ast.AST) -> str:
    kinds: dict[type[ast.AST], str] = {
        ast.Attribute: "Attribute access (x.y)",
        ast.Subscript: "Indexing (x[i])",
        ast.Lambda: "A lambda",
        ast.Compare: "A comparison",
        ast.BoolOp: "A boolean operator",
        ast.IfExp: "A conditional expression",
        ast.NamedExpr: "Assignment (:=)",
    }
    if type(node) in kinds:
        return kinds[type(node)]
    return f"A {type(node).__name__} expression"
