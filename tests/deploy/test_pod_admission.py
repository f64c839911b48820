"""Pod admission: every container of every pod each compiled template can create, Argo's own
injected ``init`` and ``wait`` containers included, meets Pod Security ``restricted``
(tests/deploy/pss.py), with the controller configuration deploy/controller ships (its
``executor`` key is the only source of the injected containers' security context:
argo workflow/controller/workflowpod.go ``newExecContainer``). Walk:
docs/reference/argo-controller-config.md."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from argo_pods import executor_config, pods
from pss import violations

REPO = Path(__file__).resolve().parents[2]
COMPILED = REPO / "burst" / "pipelines" / "compiled"
BEFORE = Path(__file__).resolve().parent / "before"
TEMPLATES = ("burst-train", "burst-regional", "burst-reaper")


def _load(path: Path) -> dict[str, Any]:
    return yaml.safe_load(path.read_text(encoding="utf-8"))  # type: ignore[no-any-return]


def _problems(manifest: dict[str, Any], executor: dict[str, Any]) -> list[str]:
    return [f"{p.name}: {v}" for p in pods(manifest, executor) for v in violations(p.spec)]


@pytest.mark.parametrize("name", TEMPLATES)
def test_every_pod_meets_restricted_with_the_shipped_controller_config(name: str) -> None:
    manifest = _load(COMPILED / f"{name}.yaml")
    made = pods(manifest, executor_config())
    names = {c["name"] for p in made for c in p.containers()}
    assert {"init", "wait", "main"} <= names  # the injected containers are checked too
    assert _problems(manifest, executor_config()) == []


@pytest.mark.parametrize("name", TEMPLATES)
def test_before_issue_28_argos_injected_containers_were_refused(name: str) -> None:
    """No controller configuration (Argo's default: an empty executor container): init and
    wait carry no security context, so every step pod was refused."""
    old = _load(BEFORE / f"pipelines_compiled_{name}.yaml")
    problems = _problems(old, {})
    assert any("container init:" in p for p in problems)
    assert any("container wait:" in p for p in problems)


def test_the_check_sees_each_restricted_control() -> None:
    """pss.violations fails each control it claims to check."""
    ok = {
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [
            {"name": "c", "securityContext": {
                "allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}}
        ],
        "volumes": [{"name": "v", "emptyDir": {}}],
    }  # fmt: skip
    assert violations(ok) == []
    bad: list[tuple[str, Any]] = [
        ("hostNetwork", True),
        ("volumes", [{"name": "h", "hostPath": {"path": "/"}}]),
        ("securityContext", {"runAsNonRoot": True}),
        ("securityContext", {"seccompProfile": {"type": "RuntimeDefault"}}),
    ]
    for key, value in bad:
        assert violations({**ok, key: value}), key
    for sc in (
        {"allowPrivilegeEscalation": True, "capabilities": {"drop": ["ALL"]}},
        {"allowPrivilegeEscalation": False},
        {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
        },
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "runAsUser": 0},
        {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}, "privileged": True},
    ):
        assert violations({**ok, "containers": [{"name": "c", "securityContext": sc}]}), sc
