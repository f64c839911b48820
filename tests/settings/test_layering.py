"""Layering and one implementation per concept, checked on the source (AST and text)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module:
            out.add(node.module)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
    return out


def _offenders(
    package: str, forbidden: tuple[str, ...], allowed: tuple[str, ...] = ()
) -> list[str]:
    found = []
    for path in sorted((REPO / "burst" / package).rglob("*.py")):
        for mod in _imports(path):
            if mod.startswith(forbidden) and mod not in allowed:
                found.append(f"{path.relative_to(REPO)} imports {mod}")
    return found


def test_obs_does_not_import_infra() -> None:
    assert _offenders("obs", ("burst.infra",)) == []


def test_storage_takes_a_uri_not_a_spec() -> None:
    assert _offenders("storage", ("burst.spec", "burst.infra", "burst.train")) == []


def test_the_runner_does_not_reach_into_infra_for_the_spec() -> None:
    """The node count is the spec's (burst.spec.node_count), never the provisioner's. Allowed:
    the shared one-line formatting of remote failures, and the site tfvars layout the
    workflow's parameters carry (burst.infra.workspace.site_map, a fact of the environment)."""
    allowed = ("burst.infra.remote_errors", "burst.infra.workspace")
    assert _offenders("runner", ("burst.infra",), allowed=allowed) == []


def test_one_node_count_one_set_of_tag_keys_one_checkout_root() -> None:
    sources = {
        p.relative_to(REPO): p.read_text(encoding="utf-8")
        for d in ("burst",)
        for p in (REPO / d).rglob("*.py")
    }
    formula = re.compile(r"gpu_count\s*//\s*job\.compute\.gpus_per_node")
    assert [str(p) for p, t in sources.items() if formula.search(t)] == ["burst/spec.py"]
    tag = re.compile(r"[\"']burst:(run-id|expires-at|owner|team|cost-centre|priority)[\"']")
    assert [str(p) for p, t in sources.items() if tag.search(t)] == ["burst/spec.py"]
    root = re.compile(r"Path\(__file__\)\.resolve\(\)\.parents\[[12]\]")
    assert [str(p) for p, t in sources.items() if root.search(t)] == ["burst/checkout.py"]
