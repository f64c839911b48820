"""``{{...}}`` template tags: find them, and replace them from a run's variables.

``{{name}}`` is looked up in a flat mapping (``workflow.parameters.team``,
``steps.train.exitCode``, ``retries``...); ``{{=expr}}`` is an expr-lang expression
(:mod:`burst.runner.expr`) over the same variables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from burst.runner import expr

TAG = re.compile(r"\{\{\s*(=)?\s*(.*?)\s*\}\}")


class UnresolvedTag(expr.ExprError):
    """A ``{{...}}`` tag whose variable is not defined where it is used."""


def tags(text: str) -> list[tuple[bool, str]]:
    """``[(is_expression, body), ...]`` for every tag in ``text``."""
    return [(bool(mt.group(1)), mt.group(2)) for mt in TAG.finditer(text)]


def substitute(text: str, variables: Mapping[str, str], where: str = "") -> str:
    """Replace every tag of ``text``; an unknown variable raises :class:`UnresolvedTag`."""
    nested: dict[str, Any] | None = None

    def repl(mt: re.Match[str]) -> str:
        nonlocal nested
        body = mt.group(2)
        if mt.group(1):
            if nested is None:
                nested = expr.nest(variables)
            try:
                return expr.to_text(expr.evaluate_text(body, nested))
            except expr.ExprError as exc:
                raise UnresolvedTag(f"{{{{={body}}}}}: {exc.message}", where=where) from None
        if body not in variables:
            raise UnresolvedTag(f"{{{{{body}}}}} is not defined here", where=where)
        return variables[body]

    return TAG.sub(repl, text)


def substitute_all(value: Any, variables: Mapping[str, str], where: str = "") -> Any:
    """:func:`substitute` through every string of a JSON-like value."""
    if isinstance(value, str):
        return substitute(value, variables, where)
    if isinstance(value, list):
        return [substitute_all(v, variables, where) for v in value]
    if isinstance(value, dict):
        return {k: substitute_all(v, variables, where) for k, v in value.items()}
    return value
