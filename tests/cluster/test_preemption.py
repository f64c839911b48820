"""A preemption on the cluster: the train pod is evicted (the eviction API, as a node drain or
a spot interruption handler does) while it trains. The kubelet sends SIGTERM with the
pod's grace period; the train step saves and exits 75; Argo's controller retries it as the
template declares; the new pod resumes from the committed checkpoint and the run succeeds."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from runs import cluster_spec, container_log, pod_nodes, submit, wait_finished, wait_until

from burst.storage.loopback import LoopbackS3
from devtools.cluster.tier import Tier

pytestmark = pytest.mark.cluster


def test_an_evicted_train_pod_exits_75_is_retried_and_resumes(
    tier: Tier, submitter: Path, store: LoopbackS3, tmp_path: Path
) -> None:
    store.create_bucket("preempt-tier")
    spec = cluster_spec(tmp_path, "preempt-tier", steps=400)
    # long enough to be evicted mid-run
    with tier.pod_env(BURST_STEP_PACE_S="0.05"):
        name = submit(tier, submitter, spec, tmp_path)
        wait_until(
            tier, name, "a committed checkpoint",
            lambda: "committed" in container_log(tier, f"{name}-train"), timeout=600,
        )  # fmt: skip
        (pod,) = [
            p["metadata"]["name"]
            for p in tier.cp.get_json("pods", "-n", "burst")["items"]
            if p["metadata"]["name"].startswith(f"{name}-train-")
            and p["status"].get("phase") == "Running"
        ]
        eviction = {
            "apiVersion": "policy/v1",
            "kind": "Eviction",
            "metadata": {"name": pod, "namespace": "burst"},
        }
        tier.cp.kubectl(
            "create", "--raw", f"/api/v1/namespaces/burst/pods/{pod}/eviction", "-f", "-",
            stdin=json.dumps(eviction),
        )  # fmt: skip
        wf = wait_finished(tier, name, timeout=900)
    assert wf["status"]["phase"] == "Succeeded", tier.describe(name)
    attempts = pod_nodes(wf, "train")
    assert len(attempts) == 2, [(a["displayName"], a["phase"]) for a in attempts]
    first, second = attempts
    # the evicted attempt ended with the preemption exit code, and was retried in place
    seen = (first["phase"], first.get("message"), (first.get("outputs") or {}).get("exitCode"))
    assert first["phase"] == "Failed" and (first.get("outputs") or {}).get("exitCode") == "75", (
        seen,
        first,
    )
    assert second["phase"] == "Succeeded"
    log = container_log(tier, f"{name}-train")
    resumed = [int(s) for s in re.findall(r"resumed from [^\"]*? at step (\d+)", log)]
    assert resumed and max(resumed) > 0, log[-3000:]
