"""Submitting and following burst-train on the engines tier, as a user would: the spec's
parameters as `burst submit` derives them (burst.runner.argo.spec_parameters), through the
argo CLI, as the CI's submitter identity."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from burst.runner.argo import spec_parameters
from burst.spec import load_spec
from devtools.cluster.tier import REPO, Tier


def cluster_spec(tmp_path: Path, bucket: str, **training: Any) -> Path:
    """The quickstart spec with its checkpoints in the tier's object store (a pod's files
    are its own: a file:// store would live and die with one pod)."""
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["storage"]["checkpoint_uri"] = f"s3://{bucket}/quickstart"
    doc["training"].update(training)
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def submit(tier: Tier, kubeconfig: Path, spec: Path, tmp_path: Path, **extra: str) -> str:
    """`argo submit --from workflowtemplate/burst-train` with the spec's parameters and the
    tier's Terraform stack (local: the tier's cloud reads its nodes); the run's name."""
    params = spec_parameters(load_spec(spec), spec.read_text())
    params.update({"tf-stack": "local", **extra})
    pfile = tmp_path / "params.json"
    pfile.write_text(json.dumps(params))
    out = tier.argo(
        "submit", "--from", "workflowtemplate/burst-train", "-n", "burst",
        "--parameter-file", str(pfile), "--generate-name", "quickstart-", "-o", "name",
        kubeconfig=kubeconfig,
    )  # fmt: skip
    return out.strip()


def wait_until(
    tier: Tier, name: str, what: str, ok: Callable[[], bool], timeout: float = 600
) -> None:
    deadline = time.monotonic() + timeout
    seen = len(tier.cloud_errors)
    while time.monotonic() < deadline:
        tier.cp.check_alive()
        if ok():
            return
        full = [e for e in tier.cloud_errors[seen:] if "no disk for" in e]
        if full:  # an infrastructure fault of this machine: say so now, not after the timeout
            raise AssertionError(f"{name}: the tier's cloud cannot add a node: {full[-1]}")
        time.sleep(1)
    raise AssertionError(
        f"{name}: {what} did not happen in {timeout:.0f} s:\n{tier.describe(name)}"
    )


def wait_finished(tier: Tier, name: str, timeout: float = 900) -> dict[str, Any]:
    box: dict[str, Any] = {}

    def finished() -> bool:
        box["wf"] = tier.workflow(name)
        return (box["wf"].get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error")

    wait_until(tier, name, "the end of the run", finished, timeout)
    return box["wf"]


def pod_nodes(wf: dict[str, Any], template: str) -> list[dict[str, Any]]:
    """The workflow's pod nodes of one template, in the order they started."""
    nodes = [
        n for n in (wf.get("status") or {}).get("nodes", {}).values()
        if n.get("templateName") == template and n.get("type") == "Pod"
    ]  # fmt: skip
    return sorted(nodes, key=lambda n: n.get("startedAt") or "")


def container_log(tier: Tier, pod_prefix: str, container: str = "main") -> str:
    return tier.container_logs(pod_prefix, container)
