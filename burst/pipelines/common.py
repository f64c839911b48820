"""Names and defaults shared by the burst manifests."""

from __future__ import annotations

from typing import Any, Final

from burst.recovery import RETRY_IN_PLACE
from burst.spec import Priority

#: Placeholder digest: a real install passes its own pinned steps image as a parameter.
_DIGEST: Final = "sha256:" + "0" * 64
STEPS_IMAGE: Final = f"ghcr.io/burst-train/burst-steps@{_DIGEST}"
#: An example trainer reference (the admission tests): no template takes the trainer image
#: as a parameter any more, see VERIFIED_IMAGE.
TRAINER_IMAGE: Final = f"ghcr.io/burst-train/burst-trainer@{_DIGEST}"
#: The image train (and a regional worker and aggregator) runs: the ``run_image`` of
#: verify-image's document (``repository@digest``, the digest it verified), passed down from
#: the main steps as the ``trainer-image`` input. Never a workflow parameter: one set apart
#: from the spec would run an image nothing verified (issue 46).
VERIFIED_IMAGE: Final = (
    "{{=jsonpath(steps['verify-image'].outputs.parameters.image, '$.run_image')}}"
)
TRAINER_INPUT: Final = "trainer-image"
TRAINER_IMAGE_TAG: Final = "{{inputs.parameters.trainer-image}}"

SERVICE_ACCOUNT: Final = "burst-run"  # bound to a cloud role by IRSA / workload identity
#: The train pods' service account: the run's own, annotated with the run's role (provision's
#: pod_role_arn), which trusts exactly system:serviceaccount:<ns>:burst-<run id>
#: (terraform/modules/aws-run-iam). Created by the workflow (owner: the workflow, so it goes
#: with it); the executor beside train keeps SERVICE_ACCOUNT (its RBAC).
RUN_SERVICE_ACCOUNT: Final = "burst-{{workflow.name}}"
REAPER_SERVICE_ACCOUNT: Final = "burst-reaper"
#: deploy/rbac.yaml's Role for Argo's executor (wait container): workflowtaskresults.
EXECUTOR_ROLE: Final = "burst-executor"
GPU_QUOTA_CONFIGMAP: Final = "burst-gpu-quota"  # one key per team: how many runs at once

#: Kueue's pod integration (Kueue pkg/controller/constants): a pod with the queue label is
#: gated until its workload is admitted in that LocalQueue; the priority class label names a
#: WorkloadPriorityClass (burst-<priority>). burst's train pods carry neither, nor a pod-group
#: label (:func:`kueue_labels`): the run's own Workload holds their quota from before
#: provision rents (burst.admission.kueue_workload), and Kueue leaves a pod that names no
#: queue alone (v0.17.0 pod_webhook.go ``Default``: no queue name, no ``managed`` label; the
#: reconciler skips such a pod, pod_controller.go ``Skip``). The tests check that these two
#: labels stay off the pods.
KUEUE_QUEUE_LABEL: Final = "kueue.x-k8s.io/queue-name"  # burst-<team>: kueue_objects
KUEUE_PRIORITY_LABEL: Final = "kueue.x-k8s.io/priority-class"


def kueue_labels() -> dict[str, str]:
    """The Kueue labels of the train pods: none. Quota first, then rent: provision admits the
    run through its own Kueue Workload (burst.admission.kueue_workload) before it rents, on
    every path where Kueue is installed; a train pod with the queue label would be admitted
    a second time, against the quota its own Workload holds (docs/queue.md). Without Kueue
    the label meant nothing."""
    return {}


RUNS_VOLUME: Final = "burst-runs"
RUNS_MOUNT: Final = "/var/lib/burst/runs"
SPEC_PATH: Final = "/tmp/inputs/spec.yaml"
OUTPUTS_DIR: Final = "/tmp/outputs"

#: Stable capacity: every pod but train's (teardown above all) stays off spot capacity. A
#: NotIn requirement also matches nodes without the label, so this schedules on EKS managed
#: node groups, Karpenter, GKE, AKS and self-managed nodes alike (an equality selector on
#: ``eks.amazonaws.com/capacityType`` matched EKS managed node groups only). The rented GPU
#: nodes are tainted: only train tolerates them.
SPOT_LABELS: Final = (
    ("eks.amazonaws.com/capacityType", "SPOT"),
    ("karpenter.sh/capacity-type", "spot"),
    ("cloud.google.com/gke-spot", "true"),
    ("kubernetes.azure.com/scalesetpriority", "spot"),
)
STABLE_AFFINITY: Final = {
    "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": {
            "nodeSelectorTerms": [
                {
                    "matchExpressions": [
                        {"key": key, "operator": "NotIn", "values": [value]}
                        for key, value in SPOT_LABELS
                    ]
                }
            ]
        }
    }
}

#: Pod Security Standards "restricted" for every container (the pod adds runAsNonRoot,
#: a non-root uid and the RuntimeDefault seccomp profile).
RESTRICTED_CONTAINER: Final = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
RUN_AS_USER: Final = 1000

#: What a steps container requests (Terraform and Python; no GPU).
STEP_REQUESTS: Final = {"cpu": "250m", "memory": "512Mi"}
HELPER_REQUESTS: Final = {"cpu": "50m", "memory": "64Mi"}

#: Retried in place: preemption (75), the checkpoint store down (4), node loss (-1 "pod
#: deleted"): written once with the recovery strategies (burst/recovery.py).
RETRY_ON_PREEMPTION: Final = RETRY_IN_PLACE

PART_OF: Final = {"app.kubernetes.io/part-of": "burst"}


def pod_settings() -> dict[str, Any]:
    """Workflow-level pod settings burst-train and burst-regional share: pods collected on
    success after 10 minutes, workflows kept a day (a week when failed), each pod's own
    scratch run directory (no claim shared across zones: what outlives a pod travels as step
    documents, in the Terraform state backend and in the checkpoint bucket), and the
    restricted pod security context."""
    from hera.workflows import models as m

    return {
        "pod_gc": m.PodGC(strategy="OnPodSuccess", delete_delay_duration="10m"),
        "ttl_strategy": m.TTLStrategy(seconds_after_success=86400, seconds_after_failure=604800),
        "volumes": [m.Volume(name=RUNS_VOLUME, empty_dir=m.EmptyDirVolumeSource())],
        "security_context": m.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=RUN_AS_USER,
            run_as_group=RUN_AS_USER,
            fs_group=RUN_AS_USER,
            seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
        ),
    }


def team_parameters() -> list[Any]:
    """The run's team (the GPU quota semaphore's key) and its cost labels: every template that
    rents GPUs takes them (burst submit passes the spec's)."""
    from hera.workflows import Parameter

    return [
        Parameter(
            name="team",
            value="default",
            description="team: the GPU quota semaphore key and a cost label",
        ),
        # only the bands deploy/kueue has a WorkloadPriorityClass for: a Workload naming
        # another class is never admitted by Kueue; Argo refuses a value outside the enum
        # at submission
        Parameter(
            name="priority",
            value=str(Priority.normal),
            enum=[str(p) for p in Priority],
            description="priority band (low, normal, high, critical): the run's Kueue "
            "Workload's WorkloadPriorityClass burst-<priority>",
        ),
        Parameter(name="cost-centre", value="unassigned", description="cost label"),
        Parameter(name="owner", value="unknown", description="cost label"),
    ]


def workflow_identity_env() -> tuple[Any, ...]:
    """What provision checks against the spec before renting (``burst.admission.identity``):
    the workflow's ``team`` and ``priority`` parameters choose the run's Workload's LocalQueue,
    WorkloadPriorityClass, quota semaphore and cost labels, so a submission whose parameters
    name another team or band than its spec is refused before anything is rented."""
    from hera.workflows import Env

    return (
        Env(name="BURST_WORKFLOW_TEAM", value="{{workflow.parameters.team}}"),
        Env(name="BURST_WORKFLOW_PRIORITY", value="{{workflow.parameters.priority}}"),
    )


def team_settings() -> dict[str, Any]:
    """The team's GPU quota (deploy/gpu-quota.yaml: a semaphore held for the workflow's
    life, Argo workflow/sync) and the cost labels on the workflow and its pods."""
    from hera.workflows import models as m

    return {
        "synchronization": m.Synchronization(
            semaphores=[
                m.SemaphoreRef(
                    config_map_key_ref=m.ConfigMapKeySelector(
                        name=GPU_QUOTA_CONFIGMAP, key="{{workflow.parameters.team}}"
                    ),
                )
            ]
        ),
        "workflow_metadata": m.WorkflowMetadata(
            labels_from={
                "burst.dev/team": m.LabelValueFrom(expression="workflow.parameters.team"),
                "burst.dev/cost-centre": m.LabelValueFrom(
                    expression="workflow.parameters['cost-centre']"
                ),
                "burst.dev/owner": m.LabelValueFrom(expression="workflow.parameters.owner"),
            }
        ),
        "pod_metadata": m.Metadata(
            labels={
                **PART_OF,
                "burst.dev/run-id": "{{workflow.name}}",
                "burst.dev/team": "{{workflow.parameters.team}}",
                "burst.dev/cost-centre": "{{workflow.parameters.cost-centre}}",
            }
        ),
    }
