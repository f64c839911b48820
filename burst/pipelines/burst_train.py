"""The ``burst-train`` WorkflowTemplate: one run of the burst pipeline on Argo Workflows.

    main:  preflight -> plan -> verify-image -> place(candidate 0)   (nodes == 1)
                                             or place-gang           (nodes > 1)
    place: provision -> train (retried on preemption) -> requeue elsewhere
           (place(previous, requeue)) when train was still lost, restart in the same
           placement (place(previous, restart)) when it was killed, else propagate its
           failure: the run's recovery strategy decides (burst/recovery.py)
    place-gang: provision -> train as a gang-scheduled Volcano Job (burst/pipelines/gang.py)
    onExit exit-handler: teardown, found from the run id alone ({{workflow.name}})

Each step is a container running ``python -m burst.steps.<name>`` (``burst.stepio`` is the
contract); the documents travel as output parameters read from ``/tmp/outputs/<doc>.json``;
the spec is a workflow parameter given to every container as a raw input artifact. Train's
image is the ``run_image`` of verify-image's document (the digest it verified), handed down as
the ``trainer-image`` input of place / place-gang, never a workflow parameter.
"""

from __future__ import annotations

from typing import Any

from hera.workflows import (
    Artifact,
    Container,
    Env,
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

from burst import recovery
from burst.pipelines import gang
from burst.pipelines.common import (
    EXECUTOR_ROLE,
    HELPER_REQUESTS,
    OUTPUTS_DIR,
    PART_OF,
    RESTRICTED_CONTAINER,
    RUN_SERVICE_ACCOUNT,
    RUNS_MOUNT,
    RUNS_VOLUME,
    SERVICE_ACCOUNT,
    SPEC_PATH,
    STABLE_AFFINITY,
    STEP_REQUESTS,
    STEPS_IMAGE,
    TRAINER_IMAGE_TAG,
    TRAINER_INPUT,
    VERIFIED_IMAGE,
    kueue_labels,
    pod_settings,
    team_parameters,
    team_settings,
    workflow_identity_env,
)
from burst.pipelines.train_pod import TRAIN_GRACE_S, gpu_patch, train_env, train_resources

NAME = "burst-train"
#: Teardown's own deadline (the exit handler runs after the workflow's has passed).
TEARDOWN_DEADLINE_S = 3600
#: Backoff between train attempts in one region: 10 s, 20 s, 40 s... at most 5 minutes.
#: A cap, not backoff.maxDuration: Argo counts maxDuration from the first attempt's start
#: and makes it every retried pod's deadline (operator.go, processNodeRetries).
BACKOFF = m.Backoff(duration="10s", factor=m.IntOrString(root=2), cap="5m")
#: Default budget (24 h) for train, plus an hour for the rest of the run and teardown.
DEFAULT_DEADLINE_S = 24 * 3600
WORKFLOW_DEADLINE_S = DEFAULT_DEADLINE_S + 3600


#: Retries of the teardown step (any failure, a killed pod too), with backoff.
TEARDOWN_RETRIES = "3"

SITE_VARS_PATH = "/tmp/inputs/site.tfvars"

#: The run's service account (defect 8 of issue 19: the role trusted burst-<run id> while the
#: pods ran as burst-run). Applied after provision, which knows the role.
RUN_SA_MANIFEST = f"""apiVersion: v1
kind: ServiceAccount
metadata:
  name: {RUN_SERVICE_ACCOUNT}
  labels:
    app.kubernetes.io/part-of: burst
    burst.dev/run-id: "{{{{workflow.name}}}}"
  annotations:
    eks.amazonaws.com/role-arn: "{{{{inputs.parameters.role-arn}}}}"
"""
#: Argo's wait container in the train pod runs as the run's service account too (there is
#: one identity a pod): it reports train's outputs as a WorkflowTaskResult, so the run's
#: account is bound to deploy/rbac.yaml's burst-executor Role (create, patch
#: workflowtaskresults: Argo docs/workflow-rbac.md), for the workflow's life (owner ref).
RUN_ROLE_BINDING_MANIFEST = f"""apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata:
  name: {RUN_SERVICE_ACCOUNT}-executor
  labels:
    app.kubernetes.io/part-of: burst
    burst.dev/run-id: "{{{{workflow.name}}}}"
roleRef:
  apiGroup: rbac.authorization.k8s.io
  kind: Role
  name: {EXECUTOR_ROLE}
subjects:
  - kind: ServiceAccount
    name: {RUN_SERVICE_ACCOUNT}
    namespace: "{{{{workflow.namespace}}}}"
"""
ROLE_ARN = "{{=jsonpath(steps.provision.outputs.parameters.infra, '$.outputs.pod_role_arn')}}"

#: What train's environment adds to every step's (burst/pipelines/train_pod.py defines it once).
TRAIN_ONLY = ("BURST_SUBMITTED_AT", "BURST_PREEMPT_WATCHERS", "BURST_SIGTERM_GRACE_S")

#: give-up: train did not succeed and is not requeued; the run fails with train's exit code,
#: or 1 when it had none (a lost node leaves none) or had 0 (an Error after exiting 0).
GIVE_UP = (
    "import sys; s, c = sys.argv[1], sys.argv[2]; "
    "print(f'train ended {s} (exit code {c or \"none\"}) and is not requeued', file=sys.stderr); "
    "sys.exit(int(c) if c.lstrip('-').isdigit() and int(c) > 0 else 1)"
)

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
    site_vars: bool = False,
    resources: dict[str, Any] | None = None,
    run_id: str = "{{workflow.name}}",
    **kwargs: Any,
) -> Container:
    """A container template running ``python -m burst.steps.<step>`` under the step contract."""
    args = ["--spec", SPEC_PATH, "--run-id", run_id, "--runs-root", RUNS_MOUNT]
    for name in inputs:
        args += ["--input", f"{name}={{{{inputs.parameters.{name}}}}}"]
    outputs: list[Any] = []
    if output is not None:
        path = f"{OUTPUTS_DIR}/{output}.json"
        args += ["--out", path]
        outputs.append(Parameter(name=output, value_from=m.ValueFrom(path=path)))
    env = [
        Env(name="BURST_RUNS_ROOT", value=RUNS_MOUNT),
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
        command=["python", "-m", "burst.steps." + step.replace("-", "_")],
        args=args,
        env=env,
        inputs=[*[Parameter(name=n) for n in (*inputs, *extra_inputs)], *raw],
        outputs=outputs or None,
        volume_mounts=[m.VolumeMount(name=RUNS_VOLUME, mount_path=RUNS_MOUNT)],
        affinity=m.Affinity.model_validate(STABLE_AFFINITY) if stable else None,
        security_context=m.SecurityContext.model_validate(RESTRICTED_CONTAINER),
        resources=m.ResourceRequirements.model_validate(resources or {"requests": STEP_REQUESTS}),
        **kwargs,
    )


#: The step container of every burst template (the regional one too).
step_container = _step_container
spec_artifact = _spec_artifact


def build() -> WorkflowTemplate:
    """The burst-train WorkflowTemplate (Hera object; ``.to_dict()`` is the manifest)."""
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
            *team_parameters(),
            Parameter(
                name="train-deadline-seconds",
                value=str(DEFAULT_DEADLINE_S),
                description="train's deadline: the budget's hours in seconds",
            ),
            Parameter(
                name="preemptions-per-region",
                value="3",
                description="train retries in one placement before it is requeued (the "
                "spec's compute.recovery: burst submit passes it)",
            ),
            Parameter(
                name="nodes",
                value="1",
                description="train nodes: 1 runs a pod, more a gang-scheduled Volcano Job",
            ),
            Parameter(name="gpus-per-node", value="8", description="GPUs on each train node"),
            Parameter(
                name="memory-tiers",
                value="off",
                description="on: the spec's checkpoint.memory_tiers are enabled (the gang's "
                "peer NetworkPolicy is applied); burst submit passes it",
            ),
            Parameter(
                name="peer-capacity",
                value="1M",
                description="bytes each gang pod's peer memory sidecar holds (the spec's "
                "checkpoint.memory_tiers.capacity; 1M when the tiers are off)",
            ),
            Parameter(
                name="peer-memory",
                value="64Mi",
                description="the peer sidecar's memory request and limit: its capacity and "
                "the server's own (burst submit passes it)",
            ),
            Parameter(
                name="tf-stack",
                value="aws",
                description="Terraform stack: aws (terraform/stacks/burst-run), gcp (gcp-run), "
                "azure (azure-run), nebius (nebius-run), cloud (each candidate's provider picks "
                "its stack) or local (the embedded emulation; what `burst run` uses)",
            ),
            Parameter(
                name="tf-state-bucket",
                value="",
                description="bucket of the runs' Terraform state (key from the run id); one name, "
                "or per stack: aws=NAME,gcp=NAME,...",
            ),
            Parameter(name="tf-state-region", value="", description="the state bucket's region"),
            Parameter(
                name="tf-site-vars",
                value="",
                description="the site's tfvars (text: VPC, subnets, cluster, control network)",
            ),
        ],
        **team_settings(),
        **pod_settings(),
    ) as wt:
        # the decision record is the `decision` output parameter: kept in the workflow's
        # status (and its archive), no artifact repository needed
        preflight = _step_container("preflight", output="decision")
        plan = _step_container("plan", inputs=("decision",), output="plan")
        verify = _step_container("verify-image", output="image")
        provision = _step_container(
            "provision",
            inputs=("plan", "decision", "previous"),
            output="infra",
            extra_env=(
                Env(name="BURST_RECOVERY_EVENT", value="{{inputs.parameters.event}}"),
                *workflow_identity_env(),
            ),
            extra_inputs=("event",),
            site_vars=True,
        )
        train = _step_container(
            "train",
            inputs=("infra", "plan"),
            output="train",
            # the digest verify-image verified (its document's run_image), handed down
            image=TRAINER_IMAGE_TAG,
            extra_env=(
                *(
                    Env(name=e["name"], value=e["value"])
                    for e in train_env()
                    if e["name"] in TRAIN_ONLY
                ),
            ),
            extra_inputs=("node-selector", "tolerations", TRAINER_INPUT),
            stable=False,
            resources=train_resources(gpus=False),  # the GPUs: gpu_patch()
            labels=kueue_labels(),  # none: the run's Workload holds its quota (provision)
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
            # the run's own identity (its checkpoint role), for main and Argo's wait
            # container alike: its projected token (no executor.serviceAccountName, which
            # mounts a legacy token Secret nothing creates on Kubernetes >= 1.24:
            # workflowpod.go setupServiceAccount); the run's RoleBinding lets its wait
            # container report outputs (run-role-binding)
            service_account_name=RUN_SERVICE_ACCOUNT,
            retry_strategy=RetryStrategy(
                limit="{{workflow.parameters.preemptions-per-region}}",
                retry_policy="Always",
                expression=recovery.RETRY_IN_PLACE,
                backoff=BACKOFF,
            ),
            # the node group provision made: its selector and taints come from its outputs
            pod_spec_patch=(
                '{"nodeSelector": {{inputs.parameters.node-selector}}, '
                '"tolerations": {{inputs.parameters.tolerations}}, '
                f'"terminationGracePeriodSeconds": {TRAIN_GRACE_S}, {gpu_patch()}}}'
            ),
        )
        teardown = _step_container(
            "teardown",
            output="teardown",
            site_vars=True,
            active_deadline_seconds=TEARDOWN_DEADLINE_S,
            # a teardown pod that is killed or fails is run again: the resources must go
            retry_strategy=RetryStrategy(
                limit=TEARDOWN_RETRIES, retry_policy="Always", backoff=BACKOFF
            ),
        )
        give_up = Container(
            name="give-up",
            image="{{workflow.parameters.steps-image}}",
            command=["python", "-c", GIVE_UP],
            args=["{{inputs.parameters.train-status}}", "{{inputs.parameters.exit-code}}"],
            inputs=[Parameter(name="train-status"), Parameter(name="exit-code")],
            affinity=m.Affinity.model_validate(STABLE_AFFINITY),
            security_context=m.SecurityContext.model_validate(RESTRICTED_CONTAINER),
            resources=m.ResourceRequirements.model_validate({"requests": HELPER_REQUESTS}),
        )

        run_identity = Resource(
            name="run-service-account",
            action="apply",
            set_owner_reference=True,
            manifest=RUN_SA_MANIFEST,
            inputs=[Parameter(name="role-arn")],
        )

        run_binding = Resource(
            name="run-role-binding",
            action="apply",
            set_owner_reference=True,
            manifest=RUN_ROLE_BINDING_MANIFEST,
        )

        # The recovery decisions (burst/recovery.py): train's status, its exit code only
        # through get(...) ?? '' (a lost node leaves none), and what provision's recovery
        # record allows. Each later placement gets the one before's provision document.
        code = recovery.exit_code_expression()
        after = {
            "decision": "{{inputs.parameters.decision}}",
            "plan": "{{inputs.parameters.plan}}",
            "previous": "{{steps.provision.outputs.parameters.infra}}",
            TRAINER_INPUT: TRAINER_IMAGE_TAG,
        }
        with Steps(
            name="place",
            inputs=[
                Parameter(name="decision"),
                Parameter(name="plan"),
                Parameter(name="previous"),
                Parameter(name="event"),
                Parameter(name=TRAINER_INPUT),
            ],
        ) as place:
            Step(
                name="provision",
                template=provision,
                arguments={
                    "plan": "{{inputs.parameters.plan}}",
                    "decision": "{{inputs.parameters.decision}}",
                    "previous": "{{inputs.parameters.previous}}",
                    "event": "{{inputs.parameters.event}}",
                },
            )
            with Parallel():
                Step(
                    name="service-account",
                    template=run_identity,
                    arguments={"role-arn": ROLE_ARN},
                )
                Step(name="role-binding", template=run_binding)
            Step(
                name="train",
                template=train,
                continue_on=m.ContinueOn(failed=True, error=True),
                arguments={**TRAIN_ARGS, TRAINER_INPUT: TRAINER_IMAGE_TAG},
            )
            Step(
                name="requeue",
                template="place",
                when=f"{{{{={recovery.requeue_when()}}}}}",
                arguments={**after, "event": recovery.REQUEUE},
            )
            Step(
                name="restart",
                template="place",
                when=f"{{{{={recovery.restart_when()}}}}}",
                arguments={**after, "event": recovery.RESTART},
            )
            Step(
                name="give-up",
                template=give_up,
                when=f"{{{{={recovery.give_up_when()}}}}}",
                arguments={
                    "train-status": "{{steps.train.status}}",
                    "exit-code": f"{{{{={code}}}}}",
                },
            )

        peer_policy = Resource(
            name="peer-network-policy",
            action="apply",
            set_owner_reference=True,
            manifest=gang.PEER_POLICY_MANIFEST,
        )

        train_gang = Resource(
            name="train-gang",
            action="create",
            set_owner_reference=True,
            manifest=gang.manifest_text(),
            success_condition="status.state.phase == Completed",
            failure_condition="status.state.phase in (Failed, Aborted, Terminated)",
            inputs=[
                Parameter(name=n)
                for n in ("infra", "plan", "node-selector", "tolerations", TRAINER_INPUT)
            ],
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
        )
        with Steps(
            name="place-gang",
            inputs=[
                Parameter(name="decision"),
                Parameter(name="plan"),
                Parameter(name=TRAINER_INPUT),
            ],
        ) as place_gang:
            Step(
                name="provision",
                template=provision,
                arguments={
                    "plan": "{{inputs.parameters.plan}}",
                    "decision": "{{inputs.parameters.decision}}",
                    "previous": "{}",
                    "event": recovery.START,
                },
            )
            # the gang's pods run as the run's account too: nothing else creates it
            with Parallel():
                Step(
                    name="service-account",
                    template=run_identity,
                    arguments={"role-arn": ROLE_ARN},
                )
                # the peer memory port: the run's own train pods only (checkpoint tiers)
                Step(
                    name="peer-network-policy",
                    template=peer_policy,
                    when="'{{workflow.parameters.memory-tiers}}' == 'on'",
                )
            Step(
                name="train",
                template=train_gang,
                arguments={**TRAIN_ARGS, TRAINER_INPUT: TRAINER_IMAGE_TAG},
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
                        "previous": "{}",
                        "event": recovery.START,
                        TRAINER_INPUT: VERIFIED_IMAGE,
                    },
                )
                Step(
                    name="place-gang",
                    template=place_gang,
                    when="{{workflow.parameters.nodes}} > 1",
                    arguments={
                        "decision": "{{steps.preflight.outputs.parameters.decision}}",
                        "plan": "{{steps.plan.outputs.parameters.plan}}",
                        TRAINER_INPUT: VERIFIED_IMAGE,
                    },
                )

        with Steps(name="exit-handler"):
            Step(name="teardown", template=teardown)
    return wt
