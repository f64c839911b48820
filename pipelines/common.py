"""Names and defaults shared by the burst manifests."""

from __future__ import annotations

from typing import Final

#: Placeholder digest: a real install passes its own pinned images as parameters.
_DIGEST: Final = "sha256:" + "0" * 64
STEPS_IMAGE: Final = f"ghcr.io/burst-train/burst-steps@{_DIGEST}"
TRAINER_IMAGE: Final = f"ghcr.io/burst-train/burst-trainer@{_DIGEST}"

SERVICE_ACCOUNT: Final = "burst-run"  # bound to a cloud role by IRSA / workload identity
REAPER_SERVICE_ACCOUNT: Final = "burst-reaper"
GPU_QUOTA_CONFIGMAP: Final = "burst-gpu-quota"  # one key per team: how many runs at once

RUNS_VOLUME: Final = "burst-runs"
RUNS_MOUNT: Final = "/var/lib/burst/runs"
SPEC_PATH: Final = "/tmp/inputs/spec.yaml"
OUTPUTS_DIR: Final = "/tmp/outputs"

#: Stable capacity: every pod but train's (teardown above all) lands on on-demand nodes.
STABLE_NODES: Final = {"eks.amazonaws.com/capacityType": "ON_DEMAND"}

#: Preemption (exit 75), an infrastructure failure of the step (exit 4: the checkpoint store
#: stayed down past the train step's retry budget; the next attempt resumes from what it
#: holds) or node loss (exit -1 "pod deleted" / "imminent node shutdown").
RETRY_ON_PREEMPTION: Final = (
    "lastRetry.exitCode == '75' || lastRetry.exitCode == '4' || (lastRetry.exitCode == '-1' && "
    "(lastRetry.message contains 'pod deleted' || "
    "lastRetry.message contains 'imminent node shutdown'))"
)

PART_OF: Final = {"app.kubernetes.io/part-of": "burst"}
