"""The quickstart pipeline on the real engines: `argo submit --from workflowtemplate/burst-train`
as the CI's submitter identity, the real Argo controller and executor, the real scheduler,
Kueue's admission, and the node group the run rents joining the cluster."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.runner.argo import spec_parameters
from burst.spec import load_spec
from burst.storage.loopback import LoopbackS3
from devtools.cluster.tier import REPO, Tier

pytestmark = pytest.mark.cluster


def cluster_spec(tmp_path: Path, store: LoopbackS3, bucket: str, **training: Any) -> Path:
    """The quickstart spec with its checkpoints in the tier's object store (a pod's files
    are its own: a file:// store would live and die with one pod)."""
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["storage"]["checkpoint_uri"] = f"s3://{bucket}/quickstart"
    doc["training"].update(training)
    path = tmp_path / "quickstart.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def submit(tier: Tier, kubeconfig: Path, spec: Path, tmp_path: Path, **extra: str) -> str:
    job = load_spec(spec)
    params = spec_parameters(job, spec.read_text())
    params.update({"tf-stack": "local", **extra})
    pfile = tmp_path / "params.json"
    pfile.write_text(json.dumps(params))
    out = tier.argo(
        "submit", "--from", "workflowtemplate/burst-train", "-n", "burst",
        "--parameter-file", str(pfile), "--generate-name", "quickstart-", "-o", "name",
        kubeconfig=kubeconfig,
    )
    return out.strip()


def wait_finished(tier: Tier, name: str, timeout: float = 900) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    wf: dict[str, Any] = {}
    while time.monotonic() < deadline:
        tier.cp.check_alive()
        wf = tier.workflow(name)
        if (wf.get("status") or {}).get("phase") in ("Succeeded", "Failed", "Error"):
            return wf
        time.sleep(2)
    raise AssertionError(f"{name} did not finish in {timeout:.0f} s:\n{tier.describe(name)}")


def test_quickstart_reaches_succeeded_through_argo_submit(
    tier: Tier, submitter: Path, store: LoopbackS3, tmp_path: Path
) -> None:
    bucket = store.create_bucket("quickstart-tier") or "quickstart-tier"
    spec = cluster_spec(tmp_path, store, "quickstart-tier")
    name = submit(tier, submitter, spec, tmp_path)
    wf = wait_finished(tier, name)
    assert wf["status"]["phase"] == "Succeeded", tier.describe(name)
    nodes = wf["status"]["nodes"].values()
    train = [n for n in nodes if n.get("templateName") == "train" and n["type"] == "Pod"]
    assert train and train[-1]["phase"] == "Succeeded"
    # the train pod ran on a node of the group the run rented (its run-id label)
    bound = tier.bound_nodes(name)
    assert any(labels.get("burst/run-id") == name for labels in bound.values()), bound
    del bucket
