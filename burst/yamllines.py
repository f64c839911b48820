"""Which line of a YAML text each value comes from, so errors can say ``file:LINE: field``."""

from __future__ import annotations

import yaml

Path_ = tuple[str | int, ...]


def line_index(text: str) -> dict[Path_, int]:
    """Map each YAML path (mapping keys and list indexes) to its 1-based line; a key's path
    maps to the line of the key itself. Unparseable text gives an empty index."""
    index: dict[Path_, int] = {}
    try:
        root = yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError:
        return index

    def walk(node: yaml.Node, path: Path_) -> None:
        index.setdefault(path, node.start_mark.line + 1)
        if isinstance(node, yaml.MappingNode):
            for key, value in node.value:
                kpath = (*path, str(key.value))
                walk(value, kpath)
                index[kpath] = key.start_mark.line + 1
        elif isinstance(node, yaml.SequenceNode):
            for i, item in enumerate(node.value):
                walk(item, (*path, i))

    if root is not None:
        walk(root, ())
    return index


def line_for(index: dict[Path_, int], loc: Path_, *, root: bool = True) -> int | None:
    """The line of ``loc``, or of its nearest ancestor in the index; with ``root=False`` a
    path with no ancestor in the index has no line (instead of the document's first)."""
    path = tuple(loc)
    while path:
        if path in index:
            return index[path]
        path = path[:-1]
    return index.get(()) if root else None


def yaml_error(exc: yaml.YAMLError) -> tuple[str, str]:
    """``(":LINE" or "", problem)`` of a YAML syntax error, for ``file:LINE: ...`` messages."""
    mark = getattr(exc, "problem_mark", None)
    line = f":{mark.line + 1}" if mark is not None else ""
    return line, getattr(exc, "problem", None) or str(exc).splitlines()[0]
