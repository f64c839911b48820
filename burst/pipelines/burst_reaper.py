"""``burst-reaper``: destroys expired runs (``burst reap``) on a schedule.

Two objects, one name (their kinds differ):

* the WorkflowTemplate ``burst-reaper`` (:func:`build`, ``burst-reaper.yaml``): the pod, its
  service account and security context, the deadline, pod GC and TTL, the parameters with
  their defaults;
* the CronWorkflow ``burst-reaper`` (:func:`build_cron`, ``burst-reaper-cron.yaml``): the
  schedule, ``concurrencyPolicy: Forbid`` (a slow reap is never overlapped by the next one),
  the history limits, and a ``workflowSpec`` that only calls the template by
  ``workflowTemplateRef`` with the site's arguments.

Why split: Argo's controller with ``templateReferencing: Secure`` (deploy/controller) runs only
Workflows that call a WorkflowTemplate and set nothing but its allowed overrides (v4.0.5
workflow/controller/operator.go ``setExecWorkflow``, workflow/util/merge.go
``ValidateUserOverrides``); a CronWorkflow's Workflow is a copy of its ``workflowSpec``
(workflow/common/convert.go ``toWorkflow``), so templates inline there would end every reap in
Error. The Workflow's arguments win over the template's defaults, parameter by parameter
(merge.go ``JoinWorkflowSpec``): a site sets its values in the CronWorkflow, whose edits reach
the next reap only, never a running one.
"""

from __future__ import annotations

from hera.workflows import Container, CronWorkflow, Env, Parameter, WorkflowTemplate
from hera.workflows import models as m

from burst.pipelines.common import (
    PART_OF,
    REAPER_SERVICE_ACCOUNT,
    RESTRICTED_CONTAINER,
    RUN_AS_USER,
    STABLE_AFFINITY,
    STEP_REQUESTS,
    STEPS_IMAGE,
)
from burst.runner.lint import NO_EXIT_HANDLER_ANNOTATION

#: The WorkflowTemplate's name and the CronWorkflow's.
NAME = "burst-reaper"
#: The CronWorkflow's file stem (burst/pipelines/compiled, deploy/argo).
CRON_FILE = "burst-reaper-cron"
#: Argo's server as its install names it (service argo-server, namespace argo, port 2746).
ARGO_SERVER = "https://argo-server.argo.svc:2746"
#: The pod's projected service-account token (rotated by the kubelet; read when the pod
#: starts, well inside its hour) is the bearer token for the Argo server.
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
REAP_COMMAND = f'ARGO_TOKEN="Bearer $(cat {TOKEN_FILE})" exec burst reap --yes --json'
LABELS = {**PART_OF, "app.kubernetes.io/name": NAME}


def parameters() -> list[Parameter]:
    """The reaper's parameters with their defaults and descriptions (the template declares
    them; the CronWorkflow passes each one's value)."""
    return [
        Parameter(
            name="steps-image",
            value=STEPS_IMAGE,
            description="steps image (holds the burst CLI), pinned by digest",
        ),
        Parameter(
            name="regions",
            value="ap-southeast-1,ap-southeast-3,ap-southeast-5,me-central-1,me-south-1,"
            "il-central-1",
            description="comma-separated regions scanned for resources tagged burst:run-id",
        ),
        Parameter(
            name="state-bucket",
            value="",
            description="S3 bucket of the runs' Terraform state (BURST_TF_STATE_BUCKET)",
        ),
        Parameter(name="state-region", value="", description="region of the state bucket"),
        Parameter(
            name="argo-server",
            value=ARGO_SERVER,
            description="the Argo server the reaper asks which workflows are unfinished",
        ),
        Parameter(
            name="argo-insecure-skip-verify",
            value="false",
            description="true to accept the server's self-signed certificate (Argo's "
            "default install)",
        ),
    ]


def build() -> WorkflowTemplate:
    """The WorkflowTemplate: everything a reap runs as and with."""
    with WorkflowTemplate(
        name=NAME,
        labels=LABELS,
        annotations={
            "workflows.argoproj.io/description": (
                "burst reap: destroys expired runs and runs no live workflow drives. Called "
                "every 5 minutes by the CronWorkflow burst-reaper; it provisions nothing, so "
                "it has no exit handler."
            ),
            # burst.runner.lint: no teardown to run (refused on a template that provisions)
            NO_EXIT_HANDLER_ANNOTATION: "none",
        },
        entrypoint="reap",
        service_account_name=REAPER_SERVICE_ACCOUNT,
        active_deadline_seconds=3 * 3600,
        arguments=parameters(),
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=86400, seconds_after_failure=604800),
        security_context=m.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=RUN_AS_USER,
            run_as_group=RUN_AS_USER,
            seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
        ),
    ) as template:
        Container(
            name="reap",
            image="{{workflow.parameters.steps-image}}",
            image_pull_policy="IfNotPresent",
            # it acts: expired runs with no live workflow are destroyed (a dry run is
            # `burst reap` by hand); the JSON of what it found and did is the pod's log. It
            # asks the Argo server which workflows are unfinished, with its own projected
            # token (the server in client auth mode acts as burst-reaper: list workflows);
            # when the server cannot answer, no workflow-driven run is destroyed before its
            # expiry (burst.infra.reaper)
            command=["sh", "-c", REAP_COMMAND],
            env=[
                Env(name="ARGO_SERVER", value="{{workflow.parameters.argo-server}}"),
                Env(name="ARGO_NAMESPACE", value="{{workflow.namespace}}"),
                Env(
                    name="ARGO_INSECURE_SKIP_VERIFY",
                    value="{{workflow.parameters.argo-insecure-skip-verify}}",
                ),
                Env(name="BURST_REAP_REGIONS", value="{{workflow.parameters.regions}}"),
                Env(name="BURST_TF_STATE_BUCKET", value="{{workflow.parameters.state-bucket}}"),
                Env(name="BURST_TF_STATE_REGION", value="{{workflow.parameters.state-region}}"),
            ],
            affinity=m.Affinity.model_validate(STABLE_AFFINITY),
            security_context=m.SecurityContext.model_validate(RESTRICTED_CONTAINER),
            resources=m.ResourceRequirements.model_validate({"requests": STEP_REQUESTS}),
        )
    return template


def build_cron() -> CronWorkflow:
    """The CronWorkflow: when to reap, and a call of the template with the site's values."""
    return CronWorkflow(
        name=NAME,
        labels=LABELS,
        # every 5 minutes: with the 3-minute heartbeat lease, a run nobody drives any more is
        # destroyed within about 10 minutes of its last renewal (docs/teardown.md)
        schedules=["*/5 * * * *"],
        timezone="UTC",
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=5,
        # only what a Workflow may set under templateReferencing: Secure; the rest is the
        # template's (the controller ends a Workflow that sets more in Error)
        workflow_template_ref=m.WorkflowTemplateRef(name=NAME),
        arguments=[Parameter(name=p.name, value=p.value) for p in parameters()],
    )
