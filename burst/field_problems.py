"""One field's problem in words, from a pydantic validation error: what every bounded input
(``burst.inputs``), step document (``burst.documents``) and spec error says.

It sits below both, so that neither imports the other to name a field.
"""

from __future__ import annotations

from typing import Any


def describe(err: Any) -> str:
    """One field's problem, in words: the field path, then what is wrong with it."""
    loc = field_path(err["loc"])
    kind = err["type"]
    if kind == "missing":
        what = "required field is missing"
    elif kind == "extra_forbidden":
        what = "unknown field (not part of the document; see `burst schema --document`)"
    elif kind == "bool_type":
        what = f"must be true or false (got {err.get('input')!r})"
    else:
        what = str(err["msg"]).removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict | list):
            what += f" (got {err['input']!r})"
    return f"{loc}: {what}" if loc else what


def field_path(loc: Any) -> str:
    """``("decisions", 0, "verdict")`` -> ``decisions[0].verdict``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out
