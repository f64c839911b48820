"""The quickstart pipeline on the real engines: `argo submit --from workflowtemplate/burst-train`
as the CI's submitter identity, the real Argo controller and executor, the real scheduler,
Kueue's admission, and the node group the run rents joining the cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from runs import cluster_spec, pod_nodes, submit, wait_finished

from burst.storage.loopback import LoopbackS3
from devtools.cluster.tier import Tier

pytestmark = pytest.mark.cluster


def test_quickstart_reaches_succeeded_through_argo_submit(
    tier: Tier, submitter: Path, store: LoopbackS3, tmp_path: Path
) -> None:
    store.create_bucket("quickstart-tier")
    name = submit(tier, submitter, cluster_spec(tmp_path, "quickstart-tier"), tmp_path)
    wf = wait_finished(tier, name)
    assert wf["status"]["phase"] == "Succeeded", tier.describe(name)
    for step in ("preflight", "plan", "verify-image", "provision", "train", "teardown"):
        nodes = pod_nodes(wf, step)
        assert nodes and nodes[-1]["phase"] == "Succeeded", f"{step}: {nodes}"
    # the train pod ran on a node of the group the run rented (Kueue admitted it under the
    # flavor of that node group; the scheduler bound it there); every other step on the
    # cluster's own nodes
    bound = tier.bound_nodes(name)
    rented = {n: labels for n, labels in bound.items() if labels.get("burst/run-id") == name}
    assert rented, bound
    assert all(labels.get("accelerator") == "h100" for labels in rented.values())
    assert set(bound) - set(rented) == {"stable-0"}, bound
    # Kueue admitted the run's own Workload (provision, before renting: quota first) in its
    # team's queue under a flavor whose labels are the rented node's; no pod of the run is
    # Kueue's (the train pod carries no queue label), and teardown deleted the Workload
    workloads = tier.cp.get_json("workloads.kueue.x-k8s.io", "-n", "burst")["items"]
    ours = [w["metadata"]["name"] for w in workloads if name in w["metadata"]["name"]]
    assert ours == [], ours
    provision = tier.container_logs(f"{name}-provision")
    admitted = re.search(r"admitted in burst-ml-research under flavor ([a-z0-9.-]+)", provision)
    assert admitted, provision[-3000:]
    flavor = admitted.group(1)
    node_labels = tier.cp.get_json("resourceflavor.kueue.x-k8s.io", flavor)["spec"]["nodeLabels"]
    (labels,) = rented.values()
    assert {k: labels.get(k) for k in node_labels} == node_labels, (flavor, labels)
    if tier.mode == "real":
        # every step ran in containerd under runc on a real kubelet, in the image its pod names
        pods = [
            p for p in tier.cp.get_json("pods", "-n", "burst")["items"]
            if p["metadata"]["labels"].get("workflows.argoproj.io/workflow") == name
        ]  # fmt: skip
        assert pods, tier.describe(name)
        for p in pods:
            for c in p["status"].get("containerStatuses") or []:
                assert c["containerID"].startswith("containerd://"), (p["metadata"]["name"], c)
                assert c["imageID"], (p["metadata"]["name"], c)
        train = [p for p in pods if p["metadata"]["name"].startswith(f"{name}-train-")]
        (main,) = [c for c in train[-1]["spec"]["containers"] if c["name"] == "main"]
        assert main["image"] == tier.images["trainer"][0], main["image"]
