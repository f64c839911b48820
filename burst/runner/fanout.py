"""``withItems`` / ``withParam``: one step expanded into one parallel step per item.

Follows Argo's controller (argoproj/argo-workflows, workflow/controller/steps.go
``expandStepGroup`` / ``expandStep`` and operator.go ``processItem`` / ``generateNodeName``):

* ``withItems`` is the manifest's list; ``withParam`` is substituted first and must then be a
  JSON list ("withParam value could not be parsed as a JSON list: ..."); an empty list skips
  the step ("Skipped, empty params").
* Item ``i`` becomes the step ``name(i:desc)``: a string item is itself, a number or a bool
  its JSON text, a map its ``key:value`` pairs sorted and joined by commas, a list its items
  space-separated in brackets (Go's ``fmt.Sprint``); parentheses are removed from ``desc``.
* ``{{item}}`` is the string itself, the JSON text of a number, bool, list or map (keys
  sorted, compact); ``{{item.key}}`` is a map item's value (a string as is, anything else its
  JSON text). Any other item (null) is refused ("expected string, number, list, or map").
* The expanded steps' ``when`` is evaluated per item, after substitution (steps.go
  ``executeStepGroup`` calls ``shouldExecute`` on each expanded step); a ``when`` that does
  not read ``item`` is decided before the expansion, and false skips the whole step without
  reading its ``withParam`` (``resolveReferences`` returns early, ``expandStep`` finds no
  items).
* After the group, ``steps.<name>.outputs.parameters`` is the JSON list of the succeeded
  children's output maps, and ``steps.<name>.outputs.parameters.<p>`` the JSON list of that
  parameter's values (operator.go ``processAggregateNodeOutputs``,
  ``aggregatedJSONValueList``: the values themselves when all are JSON maps or lists, else
  the strings).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from burst.errors import BadInputError


class FanOutError(BadInputError):
    """A ``withParam`` that is not a JSON list, or an item Argo refuses."""


@dataclass(frozen=True)
class Item:
    """One expanded step: its node name and the ``item`` variables of its scope."""

    name: str
    variables: dict[str, str]


def expands(step: dict[str, Any]) -> bool:
    return "withItems" in step or "withParam" in step


_ITEM = re.compile(r"\{\{[^}]*\bitem\b")


def mentions_item(text: str) -> bool:
    """Whether a tag of ``text`` reads ``item`` (then ``when`` is decided per item)."""
    return bool(_ITEM.search(text))


def _text(value: Any) -> str:
    """Go's ``%v`` of an ``Item``: a string unquoted, anything else its compact JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


def _go_sprint(value: Any) -> str:
    """``fmt.Sprint`` of an item's value as generateNodeName sees it."""
    if isinstance(value, list):
        return "[" + " ".join(_go_sprint(v) for v in value) + "]"
    return _text(value)


def node_name(name: str, index: int, desc: str) -> str:
    clean = desc.replace("(", "").replace(")", "")
    return f"{name}({index}:{clean})"


def item(name: str, index: int, value: Any) -> Item:
    if isinstance(value, int | float | str):  # bool is an int
        return Item(node_name(name, index, _text(value)), {"item": _text(value)})
    if isinstance(value, dict):
        variables = {f"item.{k}": _text(v) for k, v in value.items()}
        variables["item"] = _text(value)
        desc = ",".join(sorted(f"{k}:{_text(v)}" for k, v in value.items()))
        return Item(node_name(name, index, desc), variables)
    if isinstance(value, list):
        return Item(node_name(name, index, _go_sprint(value)), {"item": _text(value)})
    raise FanOutError(
        f"withItems[{index}] expected string, number, list, or map. received: {value!r}"
    )


def items(step: dict[str, Any], with_param: str | None) -> list[Item]:
    """The expanded steps of ``step``; ``with_param`` is its ``withParam`` already
    substituted (None for ``withItems``)."""
    if with_param is None:
        values = step.get("withItems")
        if not isinstance(values, list):
            raise FanOutError(f"step {step.get('name')!r}: withItems must be a list")
    else:
        try:
            values = json.loads(with_param)
        except json.JSONDecodeError as exc:
            raise FanOutError(
                "withParam value could not be parsed as a JSON list: "
                f"{with_param.strip()[:200]}: {exc.msg}"
            ) from None
        if not isinstance(values, list):
            raise FanOutError(
                f"withParam value could not be parsed as a JSON list: {with_param.strip()[:200]}"
            )
    return [item(str(step["name"]), i, v) for i, v in enumerate(values)]


def _aggregated(values: list[str]) -> str:
    parsed: list[Any] = []
    for v in values:
        try:
            doc = json.loads(v)
        except json.JSONDecodeError:
            return json.dumps(values)
        if not isinstance(doc, dict | list):
            return json.dumps(values)
        parsed.append(doc)
    return json.dumps(parsed)


def aggregate_outputs(name: str, outputs: list[dict[str, str]]) -> dict[str, str]:
    """The scope variables of an expanded step from its succeeded children's outputs, in
    item order."""
    with_params = [o for o in outputs if o]
    scope = {f"steps.{name}.outputs.parameters": json.dumps(with_params)}
    by_name: dict[str, list[str]] = {}
    for o in with_params:
        for k, v in o.items():
            by_name.setdefault(k, []).append(v)
    for k, vs in by_name.items():
        scope[f"steps.{name}.outputs.parameters.{k}"] = _aggregated(vs)
    return scope
