"""The train pod, defined once: what single-node train (a container template of
``burst-train``) and multi-node train (each pod of the gang, :mod:`pipelines.gang`) share.

Its environment (JSON logs, the provider's preemption watchers, the SIGTERM grace the
emergency save is sized to), its GPU request, its restricted security context and its
termination grace period. Plain Kubernetes dicts: the WorkflowTemplate reads them into Hera
models, the gang's Volcano Job embeds them as they are.
"""

from __future__ import annotations

from typing import Any, Final

from burst.pipelines.common import RUNS_MOUNT, TRAINER_IMAGE_TAG

#: Seconds a SIGTERM leaves the train pod (its terminationGracePeriodSeconds): AWS's spot
#: notice is 120 s; the train step sizes its emergency save to it (BURST_SIGTERM_GRACE_S).
TRAIN_GRACE_S: Final = 120
GPUS: Final = "{{workflow.parameters.gpus-per-node}}"


#: checkpoint.memory_tiers on a gang: each pod's peer memory sidecar (burst.checkpoint.peer),
#: its named port, and the label that the run's NetworkPolicy admits (burst.pipelines.gang)
PEER_PORT: Final = 7070
PEER_PORT_NAME: Final = "burst-peer"
PEER_LABEL: Final = "burst.dev/peer-group"
#: the sidecar's server holds at most this many bytes (the spec's capacity; burst submit)
PEER_CAPACITY: Final = "{{workflow.parameters.peer-capacity}}"
#: its container's memory, request == limit: the capacity plus the interpreter's (Kubernetes
#: quantity; burst submit passes it)
PEER_MEMORY: Final = "{{workflow.parameters.peer-memory}}"


def peer_sidecar() -> dict[str, Any]:
    """The peer memory server of a gang pod, as a native sidecar (an init container with
    ``restartPolicy: Always``: started before the train container, stopped once it ends).
    With the tiers off (``peer-capacity`` 1M) it idles in a few MiB."""
    return {
        "name": "peer",
        "image": TRAINER_IMAGE_TAG,  # the digest verify-image verified, as train's
        "restartPolicy": "Always",
        "command": [
            "python",
            "-m",
            "burst.checkpoint.peer",
            "--capacity",
            PEER_CAPACITY,
            "--host",
            "0.0.0.0",
            "--port",
            str(PEER_PORT),
        ],
        "ports": [{"name": PEER_PORT_NAME, "containerPort": PEER_PORT, "protocol": "TCP"}],
        "resources": {
            "requests": {"cpu": "100m", "memory": PEER_MEMORY},
            "limits": {"memory": PEER_MEMORY},
        },
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "capabilities": {"drop": ["ALL"]},
            "runAsNonRoot": True,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
    }


def train_env() -> list[dict[str, str]]:
    """The environment every train process gets, on one node or in a gang."""
    return [
        {"name": "BURST_RUNS_ROOT", "value": RUNS_MOUNT},
        {"name": "BURST_LOG_JSON", "value": "1"},
        {"name": "BURST_SUBMITTED_AT", "value": "{{workflow.creationTimestamp}}"},
        # the metadata watchers of the provider the train pod runs on, and the grace a
        # SIGTERM leaves (the pod's terminationGracePeriodSeconds)
        {"name": "BURST_PREEMPT_WATCHERS", "value": "provider"},
        {"name": "BURST_SIGTERM_GRACE_S", "value": str(TRAIN_GRACE_S)},
    ]


def train_resources(gpus: bool = True) -> dict[str, Any]:
    """Every GPU of the node (extended resources: request == limit), and a CPU/memory floor so
    the scheduler does not place the pod on a node that cannot feed them.

    ``gpus=False``: the CPU/memory floor alone, for a container template, whose GPUs come from
    :func:`gpu_patch`. Argo's full CRDs (manifests/cluster-install, hence its install.yaml)
    validate ``resources`` quantities against the Quantity pattern, so a WorkflowTemplate
    with ``{{workflow.parameters.gpus-per-node}}`` there is refused by the API server
    (found by the engines tier: `kubectl apply -k deploy/`). The gang's Volcano Job is a
    resource manifest (a string), where the parameter is substituted before it is created."""
    floor = {"cpu": "4", "memory": "16Gi"}
    if not gpus:
        return {"requests": floor}
    return {"requests": {"nvidia.com/gpu": GPUS, **floor}, "limits": {"nvidia.com/gpu": GPUS}}


def gpu_patch() -> str:
    """The podSpecPatch fragment that gives the main container the node's GPUs (request ==
    limit), substituted by Argo before the pod is made: a JSON member list to put inside the
    patch's object."""
    gpu = f'{{"nvidia.com/gpu": "{GPUS}"}}'
    main = f'{{"name": "main", "resources": {{"requests": {gpu}, "limits": {gpu}}}}}'
    return f'"containers": [{main}]'
