"""The ``burst-train`` WorkflowTemplate: one run of the burst pipeline on Argo Workflows.

    main:  preflight -> plan -> verify-image -> place(candidate 0)   (nodes == 1)
                                             or place-gang           (nodes > 1)
    place: provision -> train (retried on preemption) -> requeue in the next candidate
           (place(candidate+1)) when train was still preempted, else propagate its failure
    place-gang: provision -> train as a gang-scheduled Volcano Job (pipelines/gang.py)
    onExit exit-handler: teardown, found from the run id alone ({{workflow.name}})

Each step is a container running ``python -m steps.<name>`` (``burst.stepio`` is the contract);
the documents travel as output parameters read from ``/tmp/outputs/<doc>.json``; the spec is a
workflow parameter given to every container as a raw input artifact.
"""

from __future__ import annotations

from typing import Any

from hera.workflows import (
    Artifact,
    Container,
    Env,
    NoneArchiveStrategy,
    Parallel,
    Parameter,
    RawArtifact,
    Resource,
    RetryStrategy,
    Step,
    Steps,
    WorkflowTemplate,
)
from hera.workflows import models as m

from pipelines import gang
from pipelines.common import (
    GPU_QUOTA_CONFIGMAP,
    OUTPUTS_DIR,
    PART_OF,
    RETRY_ON_PREEMPTION,
    RUNS_MOUNT,
    RUNS_VOLUME,
    SERVICE_ACCOUNT,
    SPEC_PATH,
    STABLE_NODES,
    STEPS_IMAGE,
    TRAINER_IMAGE,
)

NAME = "burst-train"
#: Seconds a SIGTERM leaves the train pod (its terminationGracePeriodSeconds): AWS's spot
#: notice is 120 s; the train step sizes its emergency save to it (BURST_SIGTERM_GRACE_S).
TRAIN_GRACE_S = 120
#: Default budget (24 h) for train, plus an hour for the rest of the run and teardown.
DEFAULT_DEADLINE_S = 24 * 3600
WORKFLOW_DEADLINE_S = DEFAULT_DEADLINE_S + 3600


#: Retries of the teardown step (any failure, a killed pod too), with backoff.
TEARDOWN_RETRIES = "3"

SITE_VARS_PATH = "/tmp/inputs/site.tfvars"

#: What train (one pod, or the gang) gets from provision: its document, the plan, and the
#: node group's selector and taints, read from provision's outputs.
TRAIN_ARGS = {
    "infra": "{{steps.provision.outputs.parameters.infra}}",
    "plan": "{{inputs.parameters.plan}}",
    "node-selector": (
        "{{=toJson(jsonpath(steps.provision.outputs.parameters.infra, '$.outputs.node_selector'))}}"
    ),
    "tolerations": (
        "{{=toJson(jsonpath(steps.provision.outputs.parameters.infra, '$.outputs.tolerations'))}}"
    ),
}


def _spec_artifact() -> Artifact:
    return RawArtifact(name="spec", path=SPEC_PATH, data="{{workflow.parameters.spec}}")


def _step_container(
    step: str,
    *,
    inputs: tuple[str, ...] = (),
    output: str | None = None,
    image: str = "{{workflow.parameters.steps-image}}",
    extra_env: tuple[Env, ...] = (),
    extra_inputs: tuple[str, ...] = (),
    stable: bool = True,
    artifact: str | None = None,
    site_vars: bool = False,
    **kwargs: Any,
) -> Container:
    """A container template running ``python -m steps.<step>`` under the step contract."""
    args = ["--spec", SPEC_PATH, "--run-id", "{{workflow.name}}", "--runs-root", RUNS_MOUNT]
    for name in inputs:
        args += ["--input", f"{name}={{{{inputs.parameters.{name}}}}}"]
    outputs: list[Any] = []
    if output is not None:
        path = f"{OUTPUTS_DIR}/{output}.json"
        args += ["--out", path]
        outputs.append(Parameter(name=output, value_from=m.ValueFrom(path=path)))
        if artifact is not None:  # kept in the artifact repository too (audit), even on failure
            outputs.append(
                Artifact(name=artifact, path=path, archive=NoneArchiveStrategy(), optional=True)
            )
    env = [
        Env(name="BURST_RUNS_ROOT", value=RUNS_MOUNT),
        Env(name="BURST_NAMESPACE", value="{{workflow.namespace}}"),
        Env(name="BURST_LOG_JSON", value="1"),
        # the stack the run applies, and the cloud teardown's leak scan looks at
        Env(name="BURST_TF_STACK", value="{{workflow.parameters.tf-stack}}"),
        Env(name="BURST_TARGET", value="{{workflow.parameters.tf-stack}}"),
        Env(name="BURST_TF_STATE_BUCKET", value="{{workflow.parameters.tf-state-bucket}}"),
        Env(name="BURST_TF_STATE_REGION", value="{{workflow.parameters.tf-state-region}}"),
        *extra_env,
    ]
    raw = [_spec_artifact()]
    if site_vars:  # provision and teardown apply / destroy the stack with the site's settings
        raw.append(
            RawArtifact(
                name="site-vars", path=SITE_VARS_PATH, data="{{workflow.parameters.tf-site-vars}}"
            )
        )
        env.append(Env(name="BURST_TF_SITE_VARS", value=SITE_VARS_PATH))
    return Container(
        name=step,
        image=image,
        image_pull_policy="IfNotPresent",
        command=["python", "-m", "steps." + step.replace("-", "_")],
        args=args,
        env=env,
        inputs=[*[Parameter(name=n) for n in (*inputs, *extra_inputs)], *raw],
        outputs=outputs or None,
        volume_mounts=[m.VolumeMount(name=RUNS_VOLUME, mount_path=RUNS_MOUNT)],
        node_selector=dict(STABLE_NODES) if stable else None,
        **kwargs,
    )


def build() -> WorkflowTemplate:
    """The burst-train WorkflowTemplate (Hera object; ``.to_dict()`` is the manifest)."""
    state_key = Env(name="BURST_STATE_KEY", value="{{workflow.namespace}}/{{workflow.name}}")
    with WorkflowTemplate(
        name=NAME,
        labels={**PART_OF, "app.kubernetes.io/name": NAME},
        annotations={
            "workflows.argoproj.io/description": (
                "burst: preflight, plan, verify-image, provision, train on rented GPUs; "
                "teardown always (exit handler). Submit with `burst submit SPEC`."
            ),
        },
        entrypoint="main",
        on_exit="exit-handler",
        service_account_name=SERVICE_ACCOUNT,
        active_deadline_seconds=WORKFLOW_DEADLINE_S,
        arguments=[
            Parameter(name="spec", description="the job spec (YAML text)"),
            Parameter(
                name="steps-image", value=STEPS_IMAGE, description="steps image, pinned by digest"
            ),
            Parameter(
                name="trainer-image",
                value=TRAINER_IMAGE,
                description="trainer image, pinned by digest (verified by verify-image)",
            ),
            Parameter(
                name="team",
                value="default",
                description="team: the GPU quota semaphore key and a cost label",
            ),
            Parameter(name="cost-centre", value="unassigned", description="cost label"),
            Parameter(name="owner", value="unknown", description="cost label"),
            Parameter(
                name="train-deadline-seconds",
                value=str(DEFAULT_DEADLINE_S),
                description="train's deadline: the budget's hours in seconds",
            ),
            Parameter(
                name="preemptions-per-region",
                value="3",
                description="train retries in one region before requeueing elsewhere",
            ),
            Parameter(
                name="max-placements",
                value="3",
                description="how many of the plan's candidates train may be placed in",
            ),
            Parameter(
                name="nodes",
                value="1",
                description="train nodes: 1 runs a pod, more a gang-scheduled Volcano Job",
            ),
            Parameter(name="gpus-per-node", value="8", description="GPUs on each train node"),
            Parameter(
                name="tf-stack",
                value="aws",
                description="Terraform stack: aws (terraform/stacks/burst-run, S3 state) or "
                "local (the embedded emulation; what `burst run` uses)",
            ),
            Parameter(
                name="tf-state-bucket",
                value="",
                description="S3 bucket of the runs' Terraform state (key from the run id)",
            ),
            Parameter(name="tf-state-region", value="", description="the state bucket's region"),
            Parameter(
                name="tf-site-vars",
                value="",
                description="the site's tfvars (text: VPC, subnets, cluster, control network)",
            ),
        ],
        synchronization=m.Synchronization(
            semaphores=[
                m.SemaphoreRef(
                    config_map_key_ref=m.ConfigMapKeySelector(
                        name=GPU_QUOTA_CONFIGMAP, key="{{workflow.parameters.team}}"
                    ),
                )
            ]
        ),
        workflow_metadata=m.WorkflowMetadata(
            labels_from={
                "burst.dev/team": m.LabelValueFrom(expression="workflow.parameters.team"),
                "burst.dev/cost-centre": m.LabelValueFrom(
                    expression="workflow.parameters['cost-centre']"
                ),
                "burst.dev/owner": m.LabelValueFrom(expression="workflow.parameters.owner"),
            }
        ),
        pod_metadata=m.Metadata(
            labels={
                **PART_OF,
                "burst.dev/run-id": "{{workflow.name}}",
                "burst.dev/team": "{{workflow.parameters.team}}",
                "burst.dev/cost-centre": "{{workflow.parameters.cost-centre}}",
            }
        ),
        pod_gc=m.PodGC(strategy="OnPodSuccess", delete_delay_duration="10m"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=86400, seconds_after_failure=604800),
        volume_claim_templates=[
            m.PersistentVolumeClaim(
                metadata=m.ObjectMeta(name=RUNS_VOLUME),
                spec=m.PersistentVolumeClaimSpec(
                    access_modes=["ReadWriteOnce"],
                    resources=m.VolumeResourceRequirements(requests={"storage": m.Quantity("1Gi")}),
                ),
            )
        ],
        security_context=m.PodSecurityContext(
            run_as_non_root=True, run_as_user=1000, fs_group=1000
        ),
    ) as wt:
        preflight = _step_container("preflight", output="decision", artifact="decision-record")
        plan = _step_container("plan", inputs=("decision",), output="plan")
        verify = _step_container("verify-image", output="image")
        provision = _step_container(
            "provision",
            inputs=("plan", "decision"),
            output="infra",
            extra_env=(
                state_key,
                Env(name="BURST_CANDIDATE_INDEX", value="{{inputs.parameters.candidate-index}}"),
            ),
            extra_inputs=("candidate-index",),
            site_vars=True,
        )
        train = _step_container(
            "train",
            inputs=("infra", "plan"),
            output="train",
            image="{{workflow.parameters.trainer-image}}",
            extra_env=(
                Env(name="BURST_ATTEMPT", value="{{retries}}"),
                Env(name="BURST_SUBMITTED_AT", value="{{workflow.creationTimestamp}}"),
                # the metadata watchers of the provider the train pod runs on, and the grace
                # a SIGTERM leaves (the pod's terminationGracePeriodSeconds)
                Env(name="BURST_PREEMPT_WATCHERS", value="provider"),
                Env(name="BURST_SIGTERM_GRACE_S", value=str(TRAIN_GRACE_S)),
            ),
            extra_inputs=("node-selector", "tolerations"),
            stable=False,
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
            retry_strategy=RetryStrategy(
                limit="{{workflow.parameters.preemptions-per-region}}",
                retry_policy="Always",
                expression=RETRY_ON_PREEMPTION,
                backoff=m.Backoff(duration="10s", factor=m.IntOrString(root=2), max_duration="30m"),
            ),
            # the node group provision made: its selector and taints come from its outputs
            pod_spec_patch=(
                '{"nodeSelector": {{inputs.parameters.node-selector}}, '
                '"tolerations": {{inputs.parameters.tolerations}}, '
                f'"terminationGracePeriodSeconds": {TRAIN_GRACE_S}}}'
            ),
        )
        teardown = _step_container(
            "teardown",
            output="teardown",
            extra_env=(state_key,),
            site_vars=True,
            # a teardown pod that is killed or fails is run again: the resources must go
            retry_strategy=RetryStrategy(
                limit=TEARDOWN_RETRIES,
                retry_policy="Always",
                backoff=m.Backoff(duration="10s", factor=m.IntOrString(root=2), max_duration="15m"),
            ),
        )
        propagate = Container(
            name="propagate-failure",
            image="{{workflow.parameters.steps-image}}",
            command=["python", "-c", "import sys; sys.exit(int(sys.argv[1]))"],
            args=["{{inputs.parameters.exit-code}}"],
            inputs=[Parameter(name="exit-code")],
            node_selector=dict(STABLE_NODES),
        )

        next_index = "{{=asInt(inputs.parameters['candidate-index']) + 1}}"
        preempted = "{{steps.train.exitCode}} == 75"
        can_requeue = f"{next_index} < {{{{workflow.parameters.max-placements}}}}"
        with Steps(
            name="place",
            inputs=[
                Parameter(name="decision"),
                Parameter(name="plan"),
                Parameter(name="candidate-index"),
            ],
        ) as place:
            Step(
                name="provision",
                template=provision,
                arguments={
                    "plan": "{{inputs.parameters.plan}}",
                    "decision": "{{inputs.parameters.decision}}",
                    "candidate-index": "{{inputs.parameters.candidate-index}}",
                },
            )
            Step(
                name="train",
                template=train,
                continue_on=m.ContinueOn(failed=True, error=True),
                arguments=dict(TRAIN_ARGS),
            )
            Step(
                name="requeue",
                template="place",
                when=f"{preempted} && {can_requeue}",
                arguments={
                    "decision": "{{inputs.parameters.decision}}",
                    "plan": "{{inputs.parameters.plan}}",
                    "candidate-index": next_index,
                },
            )
            Step(
                name="give-up",
                template=propagate,
                when=(
                    f"'{{{{steps.train.status}}}}' != 'Succeeded' && "
                    f"!({preempted} && {can_requeue})"
                ),
                arguments={"exit-code": "{{steps.train.exitCode}}"},
            )

        train_gang = Resource(
            name="train-gang",
            action="create",
            set_owner_reference=True,
            manifest=gang.manifest_text(),
            success_condition="status.state.phase == Completed",
            failure_condition="status.state.phase in (Failed, Aborted, Terminated)",
            inputs=[Parameter(name=n) for n in ("infra", "plan", "node-selector", "tolerations")],
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
        )
        with Steps(
            name="place-gang", inputs=[Parameter(name="decision"), Parameter(name="plan")]
        ) as place_gang:
            Step(
                name="provision",
                template=provision,
                arguments={
                    "plan": "{{inputs.parameters.plan}}",
                    "decision": "{{inputs.parameters.decision}}",
                    "candidate-index": "0",
                },
            )
            Step(
                name="train",
                template=train_gang,
                arguments=dict(TRAIN_ARGS),
            )

        with Steps(name="main"):
            Step(name="preflight", template=preflight)
            Step(
                name="plan",
                template=plan,
                arguments={"decision": "{{steps.preflight.outputs.parameters.decision}}"},
            )
            Step(name="verify-image", template=verify)
            with Parallel():
                Step(
                    name="place",
                    template=place,
                    when="{{workflow.parameters.nodes}} == 1",
                    arguments={
                        "decision": "{{steps.preflight.outputs.parameters.decision}}",
                        "plan": "{{steps.plan.outputs.parameters.plan}}",
                        "candidate-index": "0",
                    },
                )
                Step(
                    name="place-gang",
                    template=place_gang,
                    when="{{workflow.parameters.nodes}} > 1",
                    arguments={
                        "decision": "{{steps.preflight.outputs.parameters.decision}}",
                        "plan": "{{steps.plan.outputs.parameters.plan}}",
                    },
                )

        with Steps(name="exit-handler"):
            Step(name="teardown", template=teardown)
    return wt
