"""A small evaluator for the expressions Argo manifests contain.

Argo evaluates two languages: expr-lang (``{{=...}}`` tags, ``retryStrategy.expression``,
``labelsFrom``) and govaluate (a step's ``when``, after its ``{{...}}`` tags are replaced).
Both share the subset implemented here: literals (numbers, quoted strings, true/false/nil,
arrays), names with ``.member`` and ``['key']`` access, calls (asInt, asFloat, string, toJson,
jsonpath, len, sprig.b64enc, sprig.b64dec), ``! not - + * / %``, comparisons,
``in contains matches startsWith endsWith``, and ``&& || and or``. Anything else is a parse
error, so a manifest the local runner cannot evaluate is refused before a step runs.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from burst.errors import BadInputError


class ExprError(BadInputError):
    """An expression that does not parse or cannot be evaluated."""


_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<num>\d+\.\d+|\d+)
  | (?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
  | (?P<op>\?\?|&&|\|\||==|!=|<=|>=|[<>!+\-*/%(),.\[\]])
  | (?P<name>[A-Za-z_$][A-Za-z0-9_$]*)
""",
    re.VERBOSE,
)

_WORD_OPS = {
    "and": "&&",
    "or": "||",
    "not": "!",
    "in": "in",
    "contains": "contains",
    "matches": "matches",
    "startsWith": "startsWith",
    "endsWith": "endsWith",
}
_BINARY_PRECEDENCE = {
    "||": 1,
    "&&": 2,
    "==": 3,
    "!=": 3,
    "<": 3,
    "<=": 3,
    ">": 3,
    ">=": 3,
    "in": 3,
    "contains": 3,
    "matches": 3,
    "startsWith": 3,
    "endsWith": 3,
    "+": 4,
    "-": 4,
    "*": 5,
    "/": 5,
    "%": 5,
    "??": 6,  # expr-lang's nil coalescing binds tighter than arithmetic
}


@dataclass(frozen=True)
class Tok:
    kind: str  # num | str | op | name | end
    text: str
    pos: int


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
    pos = 0
    while pos < len(text):
        mt = _TOKEN.match(text, pos)
        if mt is None:
            raise ExprError(f"unexpected character {text[pos]!r} at {pos} in {text!r}")
        kind = mt.lastgroup or ""
        if kind != "ws":
            value = mt.group()
            if kind == "name" and value in _WORD_OPS:
                kind, value = "op", _WORD_OPS[value]
            toks.append(Tok(kind, value, pos))
        pos = mt.end()
    toks.append(Tok("end", "", len(text)))
    return toks


# An AST node is a tuple: ("lit", v) ("name", n) ("member", obj, key) ("call", fn, args)
# ("unary", op, x) ("binary", op, a, b) ("array", items)
Node = tuple[Any, ...]


class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = tokenize(text)
        self.i = 0

    def peek(self) -> Tok:
        return self.toks[self.i]

    def take(self, text: str | None = None) -> Tok:
        tok = self.toks[self.i]
        if text is not None and tok.text != text:
            raise ExprError(
                f"expected {text!r} at {tok.pos} in {self.text!r}, found {tok.text or 'end'!r}"
            )
        self.i += 1
        return tok

    def parse(self) -> Node:
        node = self.expr(0)
        if self.peek().kind != "end":
            tok = self.peek()
            raise ExprError(f"unexpected {tok.text!r} at {tok.pos} in {self.text!r}")
        return node

    def expr(self, min_prec: int) -> Node:
        left = self.unary()
        while True:
            tok = self.peek()
            prec = _BINARY_PRECEDENCE.get(tok.text) if tok.kind == "op" else None
            if prec is None or prec < min_prec:
                return left
            self.take()
            right = self.expr(prec + 1)
            left = ("binary", tok.text, left, right)

    def unary(self) -> Node:
        tok = self.peek()
        if tok.kind == "op" and tok.text in ("!", "-"):
            self.take()
            return ("unary", tok.text, self.unary())
        return self.postfix(self.primary())

    def primary(self) -> Node:
        tok = self.take()
        if tok.kind == "num":
            return ("lit", float(tok.text) if "." in tok.text else int(tok.text))
        if tok.kind == "str":
            return ("lit", _unquote(tok.text))
        if tok.kind == "name":
            if tok.text in ("true", "false"):
                return ("lit", tok.text == "true")
            if tok.text == "nil":
                return ("lit", None)
            return ("name", tok.text)
        if tok.text == "(":
            node = self.expr(0)
            self.take(")")
            return node
        if tok.text == "[":
            items: list[Node] = []
            while self.peek().text != "]":
                items.append(self.expr(0))
                if self.peek().text != "]":
                    self.take(",")
            self.take("]")
            return ("array", items)
        raise ExprError(f"unexpected {tok.text or 'end'!r} at {tok.pos} in {self.text!r}")

    def postfix(self, node: Node) -> Node:
        while True:
            tok = self.peek()
            if tok.text == ".":
                self.take()
                name = self.take()
                if name.kind != "name":
                    raise ExprError(f"expected a name after '.' at {name.pos} in {self.text!r}")
                node = ("member", node, ("lit", name.text))
            elif tok.text == "[":
                self.take()
                key = self.expr(0)
                self.take("]")
                node = ("member", node, key)
            elif tok.text == "(" and (
                node[0] == "name"
                or (node[0] == "member" and node[1] == ("name", "sprig") and node[2][0] == "lit")
            ):
                fn = node[1] if node[0] == "name" else f"sprig.{node[2][1]}"
                self.take()
                args: list[Node] = []
                while self.peek().text != ")":
                    args.append(self.expr(0))
                    if self.peek().text != ")":
                        self.take(",")
                self.take(")")
                node = ("call", fn, args)
            else:
                return node


def _unquote(text: str) -> str:
    body = text[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


def parse(text: str) -> Node:
    """Parse an expression; raise :class:`ExprError` naming the problem."""
    return _Parser(text).parse()


def references(node: Node) -> list[tuple[str, ...]]:
    """Every name path the expression reads, e.g. ``("inputs", "parameters", "x")``."""
    found: list[tuple[str, ...]] = []

    def path(n: Node) -> tuple[str, ...] | None:
        if n[0] == "name":
            return (n[1],)
        if n[0] == "member" and n[2][0] == "lit" and isinstance(n[2][1], str):
            head = path(n[1])
            return None if head is None else (*head, n[2][1])
        return None

    def walk(n: Node) -> None:
        p = path(n)
        if p is not None:
            found.append(p)
            return
        for child in n[1:]:
            if isinstance(child, tuple):
                walk(child)
            elif isinstance(child, list):
                for c in child:
                    walk(c)

    walk(node)
    return found


def _jsonpath(doc: Any, path: str) -> Any:
    if isinstance(doc, str):
        try:
            doc = json.loads(doc)
        except json.JSONDecodeError as exc:
            raise ExprError(f"jsonpath: not JSON: {exc.msg}") from None
    if not path.startswith("$"):
        raise ExprError(f"jsonpath {path!r} must start with '$'")
    for part in re.findall(r"\.([^.\[]+)|\[(\d+)\]", path[1:]) if path != "$" else []:
        key, index = part
        try:
            doc = doc[int(index)] if index else doc[key]
        except (KeyError, IndexError, TypeError):
            raise ExprError(f"jsonpath {path!r}: nothing at {key or index!r}") from None
    return doc


def _as_int(v: Any) -> int:
    try:
        return int(str(v).strip())
    except ValueError:
        raise ExprError(f"asInt: {v!r} is not an integer") from None


def _as_float(v: Any) -> float:
    try:
        return float(str(v).strip())
    except ValueError:
        raise ExprError(f"asFloat: {v!r} is not a number") from None


def _get(obj: Any, key: Any) -> Any:
    """expr-lang's ``get(map, key)``: nil (None) where there is nothing, never an error."""
    if isinstance(obj, dict):
        return obj.get(key)
    if isinstance(obj, list) and isinstance(key, int) and -len(obj) <= key < len(obj):
        return obj[key]
    return None


FUNCTIONS: dict[str, Callable[..., Any]] = {
    "asInt": _as_int,
    "get": _get,
    "asFloat": _as_float,
    "string": lambda v: to_text(v),
    "toJson": lambda v: json.dumps(v, sort_keys=True, separators=(",", ":")),
    "jsonpath": _jsonpath,
    "len": lambda v: len(v),
    "sprig.b64enc": lambda v: base64.b64encode(str(v).encode()).decode(),
    "sprig.b64dec": lambda v: base64.b64decode(str(v)).decode(),
}


def to_text(v: Any) -> str:
    """How a value becomes a parameter string (numbers plain, the rest as JSON)."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return v
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    if isinstance(v, int | float):
        return str(v)
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


def _binary(op: str, a: Any, b: Any) -> Any:
    try:
        if op == "==":
            return a == b
        if op == "!=":
            return a != b
        if op in ("<", "<=", ">", ">="):
            return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
        if op == "+":
            return a + b
        if op == "-":
            return a - b
        if op == "*":
            return a * b
        if op == "/":
            return a / b
        if op == "%":
            return a % b
        if op == "in":
            return a in b
        if op == "contains":
            return str(b) in str(a)
        if op == "matches":
            return re.search(str(b), str(a)) is not None
        if op == "startsWith":
            return str(a).startswith(str(b))
        if op == "endsWith":
            return str(a).endswith(str(b))
    except (TypeError, ZeroDivisionError) as exc:
        raise ExprError(f"cannot evaluate {a!r} {op} {b!r}: {exc}") from None
    raise ExprError(f"unknown operator {op!r}")


def evaluate(node: Node, env: Mapping[str, Any]) -> Any:
    kind = node[0]
    if kind == "lit":
        return node[1]
    if kind == "name":
        if node[1] not in env:
            raise ExprError(f"unknown name {node[1]!r}")
        return env[node[1]]
    if kind == "array":
        return [evaluate(n, env) for n in node[1]]
    if kind == "member":
        obj = evaluate(node[1], env)
        key = evaluate(node[2], env)
        try:
            return obj[key]
        except (KeyError, IndexError, TypeError):
            raise ExprError(f"nothing at {key!r}") from None
    if kind == "call":
        fn = FUNCTIONS.get(node[1])
        if fn is None:
            raise ExprError(f"unknown function {node[1]!r}")
        return fn(*[evaluate(a, env) for a in node[2]])
    if kind == "unary":
        v = evaluate(node[2], env)
        if node[1] == "!":
            return not v
        return -v
    if kind == "binary":
        op = node[1]
        if op == "&&":
            return bool(evaluate(node[2], env)) and bool(evaluate(node[3], env))
        if op == "||":
            return bool(evaluate(node[2], env)) or bool(evaluate(node[3], env))
        if op == "??":
            left = evaluate(node[2], env)
            return evaluate(node[3], env) if left is None else left
        return _binary(op, evaluate(node[2], env), evaluate(node[3], env))
    raise ExprError(f"unknown expression node {kind!r}")


def evaluate_text(text: str, env: Mapping[str, Any]) -> Any:
    return evaluate(parse(text), env)


def nest(flat: Mapping[str, str]) -> dict[str, Any]:
    """``{"a.b.c": v}`` -> ``{"a": {"b": {"c": v}}}`` (the environment expressions read)."""
    out: dict[str, Any] = {}
    for key, value in flat.items():
        parts = key.split(".")
        cur = out
        for p in parts[:-1]:
            nxt = cur.setdefault(p, {})
            if not isinstance(nxt, dict):
                break
            cur = nxt
        else:
            cur[parts[-1]] = value
    return out
