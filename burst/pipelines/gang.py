"""Multi-node train: a Volcano Job (gang scheduling) created by an Argo resource template.

All ``nodes`` pods start together or not at all (``minAvailable``); Volcano's pytorch plugin
gives each pod MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK, and ``burst.steps.train`` starts
torchrun with one rank per GPU (``burst.train.launch``), the same module and command as a
single train pod. Preemption: the job restarts (from the latest checkpoint)
on exit 75 or an evicted pod, at most ``preemptions-per-region`` times.
"""

from __future__ import annotations

from typing import Any

import yaml

from burst.pipelines.common import (
    OUTPUTS_DIR,
    RESTRICTED_CONTAINER,
    RUN_AS_USER,
    RUN_SERVICE_ACCOUNT,
    RUNS_MOUNT,
    RUNS_VOLUME,
    TRAINER_IMAGE_TAG,
    kueue_labels,
)
from burst.pipelines.train_pod import (
    PEER_LABEL,
    PEER_PORT,
    TRAIN_GRACE_S,
    peer_sidecar,
    train_env,
    train_resources,
)

SPEC_FILE = "/tmp/inputs/spec.yaml"


def _trainer_command() -> list[str]:
    script = (
        'mkdir -p /tmp/inputs && printf "%s" "$BURST_SPEC_B64" | base64 -d > ' + SPEC_FILE + " && "
        # burst.steps.train starts this node's ranks under torchrun itself (burst.train.launch:
        # --nnodes=$WORLD_SIZE --node-rank=$RANK --master-addr/--master-port from Volcano)
        # and exits with the ranks' agreed code (75 on a preemption), which torchrun alone
        # reports as 1
        "BURST_GANG=1 BURST_NPROC_PER_NODE={{workflow.parameters.gpus-per-node}} "
        "exec python -m burst.steps.train --spec " + SPEC_FILE + " --run-id {{workflow.name}} "
        "--runs-root " + RUNS_MOUNT + " "
        '--input "infra=$(printf %s "$BURST_INFRA_B64" | base64 -d)" '
        '--input "plan=$(printf %s "$BURST_PLAN_B64" | base64 -d)" '
        "--out " + OUTPUTS_DIR + "/train.json"
    )
    return ["sh", "-c", script]


def volcano_job() -> dict[str, Any]:
    """The Volcano Job (batch.volcano.sh/v1alpha1) the ``train-gang`` template creates."""
    pod = {
        "metadata": {
            # no Kueue labels: the run's Workload (provision, before it rents) holds the gang's
            # quota, a train pod per node; Volcano's minAvailable starts the pods together
            "labels": {
                "burst.dev/run-id": "{{workflow.name}}",
                **kueue_labels(),
                # the run's train pods: the peer port admits them only (peer_network_policy)
                PEER_LABEL: "{{workflow.name}}",
            },
        },
        "spec": {
            "serviceAccountName": RUN_SERVICE_ACCOUNT,
            "restartPolicy": "Never",
            "nodeSelector": "{{inputs.parameters.node-selector}}",
            "tolerations": "{{inputs.parameters.tolerations}}",
            # the same pod as single-node train (burst/pipelines/train_pod.py): grace, security
            "terminationGracePeriodSeconds": TRAIN_GRACE_S,
            "securityContext": {
                "runAsNonRoot": True,
                "runAsUser": RUN_AS_USER,
                "runAsGroup": RUN_AS_USER,
                "fsGroup": RUN_AS_USER,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            # checkpoint.memory_tiers: this node's peer memory server, a native sidecar (it
            # starts before train, and the pod completes when train does); the other nodes
            # reach it at this pod's DNS name (Volcano's svc plugin) and its named port
            "initContainers": [peer_sidecar()],
            "containers": [
                {
                    "name": "train",
                    # the digest verify-image verified (pipelines.common.VERIFIED_IMAGE)
                    "image": TRAINER_IMAGE_TAG,
                    "command": _trainer_command(),
                    "env": [
                        # base64: the documents and the spec survive Argo's textual substitution
                        {
                            "name": "BURST_SPEC_B64",
                            "value": "{{=sprig.b64enc(workflow.parameters.spec)}}",
                        },
                        {
                            "name": "BURST_INFRA_B64",
                            "value": "{{=sprig.b64enc(inputs.parameters.infra)}}",
                        },
                        {
                            "name": "BURST_PLAN_B64",
                            "value": "{{=sprig.b64enc(inputs.parameters.plan)}}",
                        },
                        *train_env(),
                        # the peer sidecars' port; their hosts are Volcano's (burst.train.tiers)
                        {"name": "BURST_PEER_PORT", "value": str(PEER_PORT)},
                    ],
                    "resources": train_resources(),
                    "securityContext": dict(RESTRICTED_CONTAINER),
                    "volumeMounts": [{"name": RUNS_VOLUME, "mountPath": RUNS_MOUNT}],
                }
            ],
            "volumes": [{"name": RUNS_VOLUME, "emptyDir": {}}],
        },
    }
    job = {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {
            "generateName": "{{workflow.name}}-train-",
            "labels": {
                "burst.dev/run-id": "{{workflow.name}}",
                "burst.dev/team": "{{workflow.parameters.team}}",
            },
        },
        "spec": {
            "schedulerName": "volcano",
            "minAvailable": "{{workflow.parameters.nodes}}",
            "maxRetry": "{{workflow.parameters.preemptions-per-region}}",
            "queue": "{{workflow.parameters.team}}",
            "plugins": {
                "pytorch": ["--master=master", "--worker=worker", "--port=29500"],
                "svc": [],
                "env": [],
            },
            "policies": [
                {"exitCode": 75, "action": "RestartJob"},
                {"event": "PodEvicted", "action": "RestartJob"},
                {"event": "TaskCompleted", "action": "CompleteJob"},
            ],
            "tasks": [
                {"name": "master", "replicas": 1, "template": pod},
                {
                    "name": "worker",
                    "replicas": "{{=asInt(workflow.parameters.nodes) - 1}}",
                    "template": pod,
                },
            ],
        },
    }
    return job


#: The run's NetworkPolicy (created by ``place-gang`` before the gang): the run's train pods
#: take connections from the run's own train pods only, so the peer port (and torchrun's) is
#: reached by no one else. Volcano's svc plugin (on by default) adds its own policy admitting
#: the job's pods; policies add up, so this one takes nothing away from it.
PEER_POLICY_MANIFEST = f"""apiVersion: networking.k8s.io/v1
kind: NetworkPolicy
metadata:
  name: "{{{{workflow.name}}}}-peers"
  labels:
    app.kubernetes.io/part-of: burst
    burst.dev/run-id: "{{{{workflow.name}}}}"
spec:
  podSelector:
    matchLabels:
      {PEER_LABEL}: "{{{{workflow.name}}}}"
  policyTypes: [Ingress]
  ingress:
    - from:
        - podSelector:
            matchLabels:
              {PEER_LABEL}: "{{{{workflow.name}}}}"
"""


#: Tags whose substituted value must stay YAML (a number, a mapping, a list), not a string.
UNQUOTED = (
    "{{inputs.parameters.node-selector}}",
    "{{inputs.parameters.tolerations}}",
    "{{workflow.parameters.nodes}}",
    "{{workflow.parameters.preemptions-per-region}}",
    "{{=asInt(workflow.parameters.nodes) - 1}}",
)


class _NoAliases(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def manifest_text() -> str:
    """The Job as YAML; the tags of :data:`UNQUOTED` lose their quotes so that Argo's textual
    substitution leaves a number, a mapping or a list in their place."""
    text = yaml.dump(volcano_job(), Dumper=_NoAliases, sort_keys=False, width=1000)
    for tag in UNQUOTED:
        text = text.replace(f"'{tag}'", tag)
    return text
