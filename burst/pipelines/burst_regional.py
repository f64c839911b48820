"""The ``burst-regional`` WorkflowTemplate: one run of a ``strategy: regional-sync`` spec.

    main:    preflight -> plan -> verify-image -> stacks: regional-provision(r) for every r
             in regions (parallel) -> region(r) for every r in regions (parallel)
    region:  regional-provision(r) (the stack is applied already: its outputs and the role
             configs) -> [the region's service account burst-<workflow>-<r>, annotated with
             its stack's pod role || its RoleBinding to burst-executor] ->
             [regional-worker(r) || regional-aggregator (only in the aggregation region)],
             both running as the region's account
    onExit exit-handler: teardown(r) for every r in regions (parallel), each found from its
             stack id alone (``<workflow>-<region>``), retried

``stacks`` is the barrier: Argo starts the next step group only once every child of this one
has ended, and fails the template when one of them failed (workflow/controller/steps.go,
executeStepGroup), so a region that cannot be provisioned stops the run before any worker
trains anywhere (without it, the other regions' branches would train on, paid, until their
rounds end). Inside a branch, ``regional-provision`` runs again on the applied stack (a
Terraform apply with nothing to change) to hand its outputs to the roles: a fan-out's outputs
reach the next group only as one list of every item's outputs (operator.go
processAggregateNodeOutputs), which a branch could not pick its own from.

Argo semantics followed (docs/regional.md "The Argo graph" cites them): ``withParam`` over the
``regions`` parameter (a JSON list) expands a step into one parallel step per item, ``{{item}}``
being the region (walk-through "Loops"); a step group's steps run in parallel and the next
group waits for all of them ("Steps"); ``when`` with an ``{{=...}}`` expression skips the
aggregator outside the aggregation region ("Conditionals", expression tag templates);
``retryStrategy`` restarts a preempted worker or aggregator (exit 75, exit 4, node loss: the
same expression as burst-train's train step) at most ``restarts`` times ("Retries"); the exit
handler runs whatever the outcome of ``main`` ("Exit handlers").

A worker or the aggregator runs ``python -m burst.steps.regional_<role> --config FILE``; the file is
the role config ``regional-provision`` wrote for its region (an output parameter, handed over as
a raw input artifact), in the image verify-image verified (its document's ``run_image``, handed
down as the ``trainer-image`` input of ``region``, as burst-train's train). Every pod of a
region takes the region as its ``region`` input (and ``BURST_REGION``): where it belongs (the
local runner gives it that region's store and keys).
"""

from __future__ import annotations

from hera.workflows import (
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

from burst.pipelines.burst_train import (
    BACKOFF,
    DEFAULT_DEADLINE_S,
    ROLE_ARN,
    RUN_ROLE_BINDING_MANIFEST,
    RUN_SA_MANIFEST,
    TEARDOWN_DEADLINE_S,
    TEARDOWN_RETRIES,
    WORKFLOW_DEADLINE_S,
    spec_artifact,
    step_container,
)
from burst.pipelines.common import (
    OUTPUTS_DIR,
    PART_OF,
    RESTRICTED_CONTAINER,
    RETRY_ON_PREEMPTION,
    RUN_SERVICE_ACCOUNT,
    RUNS_MOUNT,
    RUNS_VOLUME,
    SERVICE_ACCOUNT,
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
)
from burst.pipelines.train_pod import TRAIN_GRACE_S, gpu_patch, train_resources

NAME = "burst-regional"
#: A region's stack id: provision applies it, the exit handler destroys it from it alone.
STACK_ID = "{{workflow.name}}-{{inputs.parameters.region}}"
ROLE_CONFIG = "/tmp/inputs/role.json"
#: Worker and aggregator restarts (preemption, node loss): the local run reads this too.
RESTARTS = "3"
IN_AGGREGATION_REGION = "{{=inputs.parameters.region == workflow.parameters['aggregation-region']}}"
#: A region's own identity: its stack's pod role (terraform/modules/aws-run-iam) trusts
#: system:serviceaccount:<ns>:burst-<stack id>, the stack id being ``<workflow>-<region>``;
#: the region's worker and the aggregator run as it (not as burst-run, the orchestration
#: account, whose role reaches no region's store: issue 28, walk
#: docs/reference/walk-burst-regional.md). Created in the region's branch after provision,
#: which knows the role (owner: the workflow).
REGION_SERVICE_ACCOUNT = "burst-" + STACK_ID
REGION_SA_MANIFEST = RUN_SA_MANIFEST.replace(RUN_SERVICE_ACCOUNT, REGION_SERVICE_ACCOUNT)
REGION_ROLE_BINDING_MANIFEST = RUN_ROLE_BINDING_MANIFEST.replace(
    RUN_SERVICE_ACCOUNT, REGION_SERVICE_ACCOUNT
)


#: A worker trains on its region's rented GPUs: every GPU of the node (as train), on the nodes
#: its region's provision made (their selector and taints, from provision's outputs), never on
#: the home cluster's (where it would read its shard across the border the legal preflight
#: drew).
WORKER_PLACEMENT = {
    "node-selector": (
        "{{=toJson(jsonpath(steps.provision.outputs.parameters.infra, '$.outputs.node_selector'))}}"
    ),
    "tolerations": (
        "{{=toJson(jsonpath(steps.provision.outputs.parameters.infra, '$.outputs.tolerations'))}}"
    ),
}


def _role(role: str, *, stable: bool) -> Container:
    """``python -m burst.steps.regional_<role> --config FILE`` in the verified image, restarted on
    preemption; the worker (``stable=False``) on its region's GPU nodes."""
    gpu = not stable
    return Container(
        name=f"regional-{role}",
        image=TRAINER_IMAGE_TAG,
        image_pull_policy="IfNotPresent",
        command=["python", "-m", f"burst.steps.regional_{role}"],
        args=["--config", ROLE_CONFIG],
        env=[
            Env(name="BURST_LOG_JSON", value="1"),
            Env(name="BURST_REGION", value="{{inputs.parameters.region}}"),
        ],
        inputs=[
            Parameter(name="role-config"),
            Parameter(name="region"),
            Parameter(name=TRAINER_INPUT),
            *([Parameter(name=n) for n in WORKER_PLACEMENT] if gpu else []),
            spec_artifact(),
            RawArtifact(
                name="role-config", path=ROLE_CONFIG, data="{{inputs.parameters.role-config}}"
            ),
        ],
        volume_mounts=[m.VolumeMount(name=RUNS_VOLUME, mount_path=RUNS_MOUNT)],
        affinity=m.Affinity.model_validate(STABLE_AFFINITY) if stable else None,
        security_context=m.SecurityContext.model_validate(RESTRICTED_CONTAINER),
        resources=m.ResourceRequirements.model_validate(
            train_resources(gpus=False) if gpu else {"requests": STEP_REQUESTS}
        ),
        labels=kueue_labels() if gpu else None,  # Kueue: the team's queue, the priority
        # the region's own identity (its stack's pod role), for main and Argo's wait alike
        service_account_name=REGION_SERVICE_ACCOUNT,
        pod_spec_patch=(
            '{"nodeSelector": {{inputs.parameters.node-selector}}, '
            '"tolerations": {{inputs.parameters.tolerations}}, '
            f'"terminationGracePeriodSeconds": {TRAIN_GRACE_S}, {gpu_patch()}}}'
        )
        if gpu
        else None,
        active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
        retry_strategy=RetryStrategy(
            limit="{{workflow.parameters.restarts}}",
            retry_policy="Always",
            expression=RETRY_ON_PREEMPTION,
            backoff=BACKOFF,
        ),
    )


def build() -> WorkflowTemplate:
    """The burst-regional WorkflowTemplate (Hera object; ``.to_dict()`` is the manifest)."""
    with WorkflowTemplate(
        name=NAME,
        labels={**PART_OF, "app.kubernetes.io/name": NAME},
        annotations={
            "workflows.argoproj.io/description": (
                "burst regional-sync: per region provision and a worker on its own shard, the "
                "aggregator in the aggregation region; teardown of every region always (exit "
                "handler). docs/regional.md"
            ),
        },
        entrypoint="main",
        on_exit="exit-handler",
        service_account_name=SERVICE_ACCOUNT,
        active_deadline_seconds=WORKFLOW_DEADLINE_S,
        arguments=[
            Parameter(name="spec", description="the job spec (YAML text)"),
            Parameter(
                name="regions",
                description='the spec\'s regional_sync.regions as a JSON list ["a","b"]',
            ),
            Parameter(name="aggregation-region", description="the spec's aggregation region"),
            *team_parameters(),
            Parameter(
                name="steps-image", value=STEPS_IMAGE, description="steps image, pinned by digest"
            ),
            Parameter(
                name="restarts",
                value=RESTARTS,
                description="restarts of a preempted worker or aggregator",
            ),
            Parameter(
                name="train-deadline-seconds",
                value=str(DEFAULT_DEADLINE_S),
                description="a worker's and the aggregator's deadline",
            ),
            Parameter(
                name="gpus-per-node",
                value="8",
                description="GPUs on each worker's node (the spec's compute.gpus_per_node)",
            ),
            Parameter(
                name="tf-stack",
                value="aws",
                description="Terraform stack of every region (see burst-train)",
            ),
            Parameter(name="tf-state-bucket", value="", description="see burst-train"),
            Parameter(name="tf-state-region", value="", description="see burst-train"),
            Parameter(
                name="tf-site-vars",
                value="",
                description="the site's tfvars: one document of <region>.tfvars files",
            ),
        ],
        # the team's GPU quota, as burst-train: a regional run rents GPUs in every region
        **team_settings(),
        **pod_settings(),
    ) as wt:
        preflight = step_container("preflight", output="decision")
        plan = step_container("plan", inputs=("decision",), output="plan")
        verify = step_container("verify-image", output="image")
        provision = step_container(
            "regional-provision",
            inputs=("plan", "decision"),
            output="infra",
            extra_env=(Env(name="BURST_REGION", value="{{inputs.parameters.region}}"),),
            extra_inputs=("region",),
            site_vars=True,
            run_id=STACK_ID,
        )
        given = provision.outputs if isinstance(provision.outputs, list) else []
        provision.outputs = [
            *given,
            Parameter(
                name="worker-config",
                value_from=m.ValueFrom(path=f"{OUTPUTS_DIR}/worker-config.json"),
            ),
            # written in the aggregation region only
            Parameter(
                name="aggregator-config",
                value_from=m.ValueFrom(path=f"{OUTPUTS_DIR}/aggregator-config.json", default=""),
            ),
        ]
        worker = _role("worker", stable=False)
        # the aggregator averages torch tensors: it runs on the trainer image (the steps
        # image has no torch; it failed on import there, found by `burst run --containers`)
        aggregator = _role("aggregator", stable=True)
        teardown = step_container(
            "teardown",
            output="teardown",
            site_vars=True,
            extra_inputs=("region",),
            run_id=STACK_ID,
            active_deadline_seconds=TEARDOWN_DEADLINE_S,
            retry_strategy=RetryStrategy(
                limit=TEARDOWN_RETRIES, retry_policy="Always", backoff=BACKOFF
            ),
        )

        region_identity = Resource(
            name="region-service-account",
            action="apply",
            set_owner_reference=True,
            manifest=REGION_SA_MANIFEST,
            inputs=[Parameter(name="role-arn"), Parameter(name="region")],
        )
        region_binding = Resource(
            name="region-role-binding",
            action="apply",
            set_owner_reference=True,
            manifest=REGION_ROLE_BINDING_MANIFEST,
            inputs=[Parameter(name="region")],
        )

        with Steps(
            name="region",
            inputs=[
                Parameter(name="region"),
                Parameter(name="plan"),
                Parameter(name="decision"),
                Parameter(name=TRAINER_INPUT),
            ],
        ) as region:
            Step(
                name="provision",
                template=provision,
                arguments={
                    "plan": "{{inputs.parameters.plan}}",
                    "decision": "{{inputs.parameters.decision}}",
                    "region": "{{inputs.parameters.region}}",
                },
            )
            with Parallel():
                Step(
                    name="service-account",
                    template=region_identity,
                    arguments={"role-arn": ROLE_ARN, "region": "{{inputs.parameters.region}}"},
                )
                Step(
                    name="role-binding",
                    template=region_binding,
                    arguments={"region": "{{inputs.parameters.region}}"},
                )
            with Parallel():
                Step(
                    name="worker",
                    template=worker,
                    arguments={
                        "role-config": "{{steps.provision.outputs.parameters.worker-config}}",
                        "region": "{{inputs.parameters.region}}",
                        TRAINER_INPUT: TRAINER_IMAGE_TAG,
                        **WORKER_PLACEMENT,
                    },
                )
                Step(
                    name="aggregator",
                    template=aggregator,
                    when=IN_AGGREGATION_REGION,
                    arguments={
                        "role-config": "{{steps.provision.outputs.parameters.aggregator-config}}",
                        "region": "{{inputs.parameters.region}}",
                        TRAINER_INPUT: TRAINER_IMAGE_TAG,
                    },
                )

        with Steps(name="main"):
            Step(name="preflight", template=preflight)
            Step(
                name="plan",
                template=plan,
                arguments={"decision": "{{steps.preflight.outputs.parameters.decision}}"},
            )
            Step(name="verify-image", template=verify)
            Step(
                name="stacks",
                template=provision,
                with_param="{{workflow.parameters.regions}}",
                arguments={
                    "region": "{{item}}",
                    "plan": "{{steps.plan.outputs.parameters.plan}}",
                    "decision": "{{steps.preflight.outputs.parameters.decision}}",
                },
            )
            Step(
                name="regions",
                template=region,
                with_param="{{workflow.parameters.regions}}",
                arguments={
                    "region": "{{item}}",
                    "plan": "{{steps.plan.outputs.parameters.plan}}",
                    "decision": "{{steps.preflight.outputs.parameters.decision}}",
                    TRAINER_INPUT: VERIFIED_IMAGE,
                },
            )

        with Steps(name="exit-handler"):
            Step(
                name="teardown",
                template=teardown,
                with_param="{{workflow.parameters.regions}}",
                arguments={"region": "{{item}}"},
            )
    return wt
