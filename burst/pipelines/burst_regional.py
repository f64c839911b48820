"""The ``burst-regional`` WorkflowTemplate: one run of a ``strategy: regional-sync`` spec is
burst-train placed in several regions.

    main:   preflight -> plan -> verify-image -> stacks: provision(r) for every r (parallel)
            -> place(r) for every r (parallel)
    place:  provision(r) -> [the region's service account || its RoleBinding] ->
            [train(r) || aggregate (the aggregation region only)]
    onExit exit-handler: teardown(r) for every r (parallel), from its stack id alone

Every step is burst-train's, under the same contract (``burst.stepio``): ``provision`` with
``BURST_REGION`` places in that region through the same gates (legal, recovery strategy,
Kueue flavors, the region's share of the budget in the team ledger), ``train`` is the region's
worker (the loop with the regional sync hook, from the spec, the plan and the stack's outputs),
``aggregate`` the aggregator (notices and exit 75 as every step), ``teardown`` destroys the
region's stack. Each runs with ``--run-id <workflow>-<region>`` (the region's stack id), so a
region's documents and stack live in the region's workspace.

``stacks`` is the barrier: Argo starts the next step group only once every child of this one
has ended, and fails the template when one failed (workflow/controller/steps.go,
executeStepGroup), so a region that cannot be provisioned stops the run before any worker
trains anywhere. Inside a branch, ``provision`` runs again on the applied stack (a Terraform
apply with nothing to change) to hand its outputs to ``train``: a fan-out's outputs reach the
next group only as one list of every item's outputs (operator.go
processAggregateNodeOutputs), which a branch could not pick its own from. The aggregator runs
beside the workers, not after them: each worker waits for the global round after its own.

Argo semantics followed (docs/regional.md "The Argo graph" cites them): ``withParam`` over the
``regions`` parameter (a JSON list) expands a step into one parallel step per item (``{{item}}``
the region); ``when`` with an ``{{=...}}`` expression skips ``aggregate`` outside the
aggregation region; ``retryStrategy`` restarts a preempted worker or aggregator (exit 75, exit
4, node loss: burst-train's expression) at most ``restarts`` times; the exit handler runs
whatever the outcome of ``main``.
"""

from __future__ import annotations

from hera.workflows import (
    Env,
    Parallel,
    Parameter,
    Resource,
    RetryStrategy,
    Step,
    Steps,
    WorkflowTemplate,
)

from burst.pipelines.burst_train import (
    BACKOFF,
    DEFAULT_DEADLINE_S,
    ROLE_ARN,
    RUN_ROLE_BINDING_MANIFEST,
    RUN_SA_MANIFEST,
    TEARDOWN_DEADLINE_S,
    TEARDOWN_RETRIES,
    TRAIN_ARGS,
    TRAIN_ONLY,
    WORKFLOW_DEADLINE_S,
    step_container,
)
from burst.pipelines.common import (
    PART_OF,
    RETRY_ON_PREEMPTION,
    RUN_SERVICE_ACCOUNT,
    SERVICE_ACCOUNT,
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

NAME = "burst-regional"
#: A region's stack id: provision applies it, the exit handler destroys it from it alone.
STACK_ID = "{{workflow.name}}-{{inputs.parameters.region}}"
#: Worker and aggregator restarts (preemption, node loss): the local run reads this too.
RESTARTS = "3"
IN_AGGREGATION_REGION = "{{=inputs.parameters.region == workflow.parameters['aggregation-region']}}"
#: A region's own identity: its stack's pod role (terraform/modules/aws-run-iam) trusts
#: system:serviceaccount:<ns>:burst-<stack id>; the region's worker and the aggregator run as
#: it (not as burst-run, whose role reaches no region's store: issue 28,
#: docs/reference/walk-burst-regional.md). Created in the branch after provision.
REGION_SERVICE_ACCOUNT = "burst-" + STACK_ID
REGION_SA_MANIFEST = RUN_SA_MANIFEST.replace(RUN_SERVICE_ACCOUNT, REGION_SERVICE_ACCOUNT)
REGION_ROLE_BINDING_MANIFEST = RUN_ROLE_BINDING_MANIFEST.replace(
    RUN_SERVICE_ACCOUNT, REGION_SERVICE_ACCOUNT
)
IN_REGION = Env(name="BURST_REGION", value="{{inputs.parameters.region}}")
REGION = {"region": "{{inputs.parameters.region}}"}
BRANCH_ARGS = {"plan": "{{inputs.parameters.plan}}", "decision": "{{inputs.parameters.decision}}"}
RESTART = RetryStrategy(
    limit="{{workflow.parameters.restarts}}",
    retry_policy="Always",
    expression=RETRY_ON_PREEMPTION,
    backoff=BACKOFF,
)


def _parameters() -> list[Parameter]:
    return [
        Parameter(name="spec", description="the job spec (YAML text)"),
        Parameter(
            name="regions", description='the spec\'s regional_sync.regions as a JSON list ["a","b"]'
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
    ]


def build() -> WorkflowTemplate:
    """The burst-regional WorkflowTemplate (Hera object; ``.to_dict()`` is the manifest)."""
    with WorkflowTemplate(
        name=NAME,
        labels={**PART_OF, "app.kubernetes.io/name": NAME},
        annotations={
            "workflows.argoproj.io/description": (
                "burst regional-sync: burst-train's place branch in every region (provision, "
                "train with the sync hook), aggregate in the aggregation region; teardown of "
                "every region always (exit handler). docs/regional.md"
            ),
        },
        entrypoint="main",
        on_exit="exit-handler",
        service_account_name=SERVICE_ACCOUNT,
        active_deadline_seconds=WORKFLOW_DEADLINE_S,
        arguments=_parameters(),
        **team_settings(),  # the team's GPU quota: a regional run rents GPUs in every region
        **pod_settings(),
    ) as wt:
        preflight = step_container("preflight", output="decision")
        plan = step_container("plan", inputs=("decision",), output="plan")
        verify = step_container("verify-image", output="image")
        provision = step_container(
            "provision",
            inputs=("plan", "decision"),
            output="infra",
            extra_inputs=("region",),
            site_vars=True,
            extra_env=(IN_REGION, *workflow_identity_env()),
            run_id=STACK_ID,
        )
        train = step_container(
            "train",
            inputs=("infra", "plan"),
            output="train",
            image=TRAINER_IMAGE_TAG,
            extra_env=(
                IN_REGION,
                *(
                    Env(name=e["name"], value=e["value"])
                    for e in train_env()
                    if e["name"] in TRAIN_ONLY
                ),
            ),
            extra_inputs=("region", "node-selector", "tolerations", TRAINER_INPUT),
            run_id=STACK_ID,
            stable=False,  # on the region's rented nodes (provision's selector and taints)
            resources=train_resources(gpus=False),  # the GPUs: gpu_patch()
            labels=kueue_labels(),
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
            service_account_name=REGION_SERVICE_ACCOUNT,
            retry_strategy=RESTART,
            pod_spec_patch=(
                '{"nodeSelector": {{inputs.parameters.node-selector}}, '
                '"tolerations": {{inputs.parameters.tolerations}}, '
                f'"terminationGracePeriodSeconds": {TRAIN_GRACE_S}, {gpu_patch()}}}'
            ),
        )
        # the aggregator averages torch tensors: the trainer image, on the stable nodes
        aggregate = step_container(
            "aggregate",
            inputs=("plan",),
            output="aggregate",
            image=TRAINER_IMAGE_TAG,
            extra_inputs=("region", TRAINER_INPUT),
            active_deadline_seconds="{{workflow.parameters.train-deadline-seconds}}",
            service_account_name=REGION_SERVICE_ACCOUNT,
            retry_strategy=RESTART,
            extra_env=(IN_REGION,),
            run_id=STACK_ID,
        )
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
        identity = Resource(
            name="region-service-account",
            action="apply",
            set_owner_reference=True,
            manifest=REGION_SA_MANIFEST,
            inputs=[Parameter(name="role-arn"), Parameter(name="region")],
        )
        binding = Resource(
            name="region-role-binding",
            action="apply",
            set_owner_reference=True,
            manifest=REGION_ROLE_BINDING_MANIFEST,
            inputs=[Parameter(name="region")],
        )

        inputs = ("region", "plan", "decision", TRAINER_INPUT)
        with Steps(name="place", inputs=[Parameter(name=n) for n in inputs]) as place:
            Step(name="provision", template=provision, arguments={**BRANCH_ARGS, **REGION})
            with Parallel():
                Step(
                    name="service-account",
                    template=identity,
                    arguments={"role-arn": ROLE_ARN, **REGION},
                )
                Step(name="role-binding", template=binding, arguments=REGION)
            with Parallel():
                Step(
                    name="train",
                    template=train,
                    arguments={**TRAIN_ARGS, **REGION, TRAINER_INPUT: TRAINER_IMAGE_TAG},
                )
                Step(
                    name="aggregate",
                    template=aggregate,
                    when=IN_AGGREGATION_REGION,
                    arguments={
                        "plan": "{{inputs.parameters.plan}}",
                        **REGION,
                        TRAINER_INPUT: TRAINER_IMAGE_TAG,
                    },
                )

        every = {
            "region": "{{item}}",
            "plan": "{{steps.plan.outputs.parameters.plan}}",
            "decision": "{{steps.preflight.outputs.parameters.decision}}",
        }
        regions = "{{workflow.parameters.regions}}"
        with Steps(name="main"):
            Step(name="preflight", template=preflight)
            Step(
                name="plan",
                template=plan,
                arguments={"decision": "{{steps.preflight.outputs.parameters.decision}}"},
            )
            Step(name="verify-image", template=verify)
            Step(name="stacks", template=provision, with_param=regions, arguments=every)
            Step(
                name="regions",
                template=place,
                with_param=regions,
                arguments={**every, TRAINER_INPUT: VERIFIED_IMAGE},
            )

        with Steps(name="exit-handler"):
            Step(
                name="teardown",
                template=teardown,
                with_param=regions,
                arguments={"region": "{{item}}"},
            )
    return wt
