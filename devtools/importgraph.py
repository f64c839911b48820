"""The import graph of the ``burst`` package, measured from its source (ast, nothing imported).

    python -m devtools.importgraph            # the figures, the cycles and the upward imports
    python -m devtools.importgraph --json

A *component* is a top-level module of ``burst`` (``burst.spec``) or a subpackage
(``burst.train``). An edge A -> B: some module of A imports some module of B, at module level
or inside a function (a lazy import is still a dependency), but not under
``if TYPE_CHECKING:`` (annotations only). Two figures, which tests/test_import_graph.py pins:

* **cycles**: the strongly connected components of the component graph with more than one
  component (each is at least one cycle: components that import each other, directly or
  round about); and, finer, the **mutual** pairs: two components that import each other;
* **upward imports**: module-level imports from a component of a lower layer to one of a
  higher layer (``LAYERS``, lowest first: what a newcomer reads bottom up). Each distinct
  (importing module, imported component) pair counts once.
"""

from __future__ import annotations

import argparse
import ast
import json
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = "burst"

#: the layers, lowest first; a component imports its own layer and those below it
LAYERS: list[list[str]] = [
    # the words every part shares: errors, settings, the spec, the documents, the endings
    [
        "errors",
        "field_problems",
        "settings",
        "yamllines",
        "checkout",
        "children",
        "aws_session",
        "providers",
        "spec",
        "documents",
        "endings",
        "runs",
        "step_names",
        "outputs",
        "inputs",
    ],
    # stores, leases, events and the step contract
    ["storage", "lease", "obs", "stepio"],
    # checkpoints, notices, the budget guard (and the named fault points they call)
    ["faults", "preempt", "checkpoint", "budget"],
    # deciding: policy, plan, admission, recovery, the supply chain
    ["policy", "plan", "admission", "recovery", "attempt_records", "supplychain"],
    # training: the sync math below the loop, the loop, its modes and adapters
    ["regional"],
    ["train"],
    ["program", "adapters", "inference"],
    # the checks before renting and the infrastructure
    ["installed", "readiness", "infra"],
    # the steps, the pipelines, the executor, the CLI
    ["steps"],
    ["pipelines"],
    ["runner"],
    ["cli"],
]


@dataclass(frozen=True)
class Edge:
    source: str  # the importing module (dotted)
    target: str  # the imported module (dotted)
    line: int


def modules(root: Path = ROOT) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in sorted((root / PACKAGE).rglob("*.py")):
        rel = path.relative_to(root).with_suffix("")
        parts = list(rel.parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.If) and _type_checking(node):
            stack.extend(node.orelse)
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def edges(root: Path = ROOT) -> list[Edge]:
    known = modules(root)
    out: list[Edge] = []
    for name, path in known.items():
        is_pkg = path.name == "__init__.py"
        tree = ast.parse(path.read_text(), str(path))
        for node in _imports(tree):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            else:
                base = node.module or ""
                if node.level:
                    here = name.split(".") if is_pkg else name.split(".")[:-1]
                    up = here[: len(here) - (node.level - 1)]
                    base = ".".join([*up, base] if base else up)
                # each name: a module of the package (``from burst.plan import goodput``),
                # else a name the package (or module) ``base`` defines
                targets = [f"{base}.{a.name}" for a in node.names]
            found: set[str] = set()
            for t in targets:
                while t and t not in known:  # ``from pkg import name``: the package
                    t = t.rpartition(".")[0]
                if t and t != name and t.split(".")[0] == PACKAGE and t not in found:
                    found.add(t)
                    out.append(Edge(name, t, node.lineno))
    return out


def component(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_of() -> dict[str, int]:
    return {c: i for i, layer in enumerate(LAYERS) for c in layer}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one node (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    sys.setrecursionlimit(10000)

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            scc = []
            while True:
                w = stack.pop()
                on.discard(w)
                scc.append(w)
                if w == v:
                    break
            if len(scc) > 1:
                found.append(sorted(scc))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


@dataclass
class Figures:
    cycles: list[list[str]]
    mutual: list[str]
    upward: list[str]
    unlayered: list[str]

    def as_dict(self) -> dict[str, object]:
        return {
            "cycles": len(self.cycles),
            "mutual_pairs": len(self.mutual),
            "upward_imports": len(self.upward),
            "mutual": self.mutual,
            "cycle_components": self.cycles,
            "upward": self.upward,
            "unlayered": self.unlayered,
        }


def measure(root: Path = ROOT) -> Figures:
    graph: dict[str, set[str]] = defaultdict(set)
    layers = layer_of()
    upward: set[str] = set()
    comps: set[str] = set()
    for e in edges(root):
        a, b = component(e.source), component(e.target)
        comps.update((a, b))
        if a == b:
            continue
        graph[a].add(b)
        if a in layers and b in layers and layers[b] > layers[a]:
            upward.add(f"{e.source} -> {b} (line {e.line})")
    # one per (module, component): the first line
    firsts: dict[str, str] = {}
    for u in sorted(upward, key=lambda s: (s.split(" (line ")[0], int(s.split()[-1][:-1]))):
        firsts.setdefault(u.split(" (line ")[0], u)
    pairs = {(a, b) for a, bs in graph.items() for b in bs}
    mutual = sorted(f"{a} <-> {b}" for a, b in pairs if a < b and (b, a) in pairs)
    return Figures(
        cycles(graph),
        mutual,
        sorted(firsts.values()),
        sorted(c for c in comps if c not in layers and c != PACKAGE),
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m devtools.importgraph", description=__doc__)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    fig = measure()
    if args.json:
        print(json.dumps(fig.as_dict(), indent=2))
        return 0
    print(f"cycles: {len(fig.cycles)}")
    for c in fig.cycles:
        print("  " + " <-> ".join(c))
    print(f"mutual pairs: {len(fig.mutual)}")
    for m in fig.mutual:
        print("  " + m)
    print(f"upward imports: {len(fig.upward)}")
    for u in fig.upward:
        print("  " + u)
    if fig.unlayered:
        print("components in no layer: " + ", ".join(fig.unlayered))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
