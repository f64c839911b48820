"""A container step never imports the laptop executor.

Every ``python -m burst.steps.<name>`` runs in a pod of the steps or trainer image, on a cluster
as on one machine; the local executor (``burst.runner``: the engine, the local runner, the
regions it stands up) runs only on the machine that drives a local run. This walks every
import statement (module level and inside functions) of ``steps/*`` and of every ``burst``
module they reach, and fails naming the chain that reaches ``burst.runner``. (It failed on
the code before issue 25: ``burst.steps.regional_provision`` -> ``burst.regional.localrun`` ->
``burst.runner.local``.)
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = "burst.runner"


def _file(module: str) -> Path | None:
    for path in (
        REPO / (module.replace(".", "/") + ".py"),
        REPO / module.replace(".", "/") / "__init__.py",
    ):
        if path.is_file():
            return path
    return None


def _imports(path: Path, module: str) -> set[str]:
    """Every module an import statement of ``path`` names (``from a import b``: a and a.b)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - node.level + 1]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            else:
                base = node.module or ""
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def _reached_from(roots: list[str]) -> dict[str, str]:
    """Every project module reached from ``roots``: module -> the module that imports it."""
    parent: dict[str, str] = {r: "" for r in roots}
    stack = list(roots)
    while stack:
        module = stack.pop()
        path = _file(module)
        if path is None:
            continue
        for name in _imports(path, module):
            parts = name.split(".")
            if parts[0] != "burst":
                continue
            for k in range(1, len(parts) + 1):  # a package's __init__ runs too
                sub = ".".join(parts[:k])
                if sub not in parent and _file(sub) is not None:
                    parent[sub] = module
                    stack.append(sub)
    return parent


def _chain(parent: dict[str, str], module: str) -> str:
    chain = [module]
    while parent.get(chain[-1]):
        chain.append(parent[chain[-1]])
    return " <- ".join(chain)


def test_no_step_reaches_the_local_executor() -> None:
    steps = sorted(
        f"burst.steps.{p.stem}"
        for p in (REPO / "burst" / "steps").glob("*.py")
        if p.stem != "__init__"
    )
    assert "burst.steps.aggregate" in steps and "burst.steps.train" in steps
    parent = _reached_from(steps)
    assert "burst.regional.site" in parent  # the walk follows what the steps import
    bad = [m for m in parent if m == FORBIDDEN or m.startswith(FORBIDDEN + ".")]
    assert not bad, [_chain(parent, m) for m in bad]
