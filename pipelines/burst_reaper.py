"""The ``burst-reaper`` CronWorkflow: destroys expired runs (``burst reap``) on a schedule.

``concurrencyPolicy: Forbid``: a slow reap is never overlapped by the next one.
"""

from __future__ import annotations

from hera.workflows import Container, CronWorkflow, Env, Parameter
from hera.workflows import models as m

from pipelines.common import (
    PART_OF,
    REAPER_SERVICE_ACCOUNT,
    RESTRICTED_CONTAINER,
    RUN_AS_USER,
    STABLE_AFFINITY,
    STEP_REQUESTS,
    STEPS_IMAGE,
)

NAME = "burst-reaper"
#: Argo's server as its install names it (service argo-server, namespace argo, port 2746).
ARGO_SERVER = "https://argo-server.argo.svc:2746"
#: The pod's projected service-account token (rotated by the kubelet; read when the pod
#: starts, well inside its hour) is the bearer token for the Argo server.
TOKEN_FILE = "/var/run/secrets/kubernetes.io/serviceaccount/token"
REAP_COMMAND = f'ARGO_TOKEN="Bearer $(cat {TOKEN_FILE})" exec burst reap --yes --json'


def build() -> CronWorkflow:
    with CronWorkflow(
        name=NAME,
        labels={**PART_OF, "app.kubernetes.io/name": NAME},
        # every 5 minutes: with the 3-minute heartbeat lease, a run nobody drives any more is
        # destroyed within about 10 minutes of its last renewal (docs/teardown.md)
        schedules=["*/5 * * * *"],
        timezone="UTC",
        concurrency_policy="Forbid",
        starting_deadline_seconds=600,
        successful_jobs_history_limit=3,
        failed_jobs_history_limit=5,
        entrypoint="reap",
        service_account_name=REAPER_SERVICE_ACCOUNT,
        active_deadline_seconds=3 * 3600,
        arguments=[
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
        ],
        pod_gc=m.PodGC(strategy="OnPodSuccess"),
        ttl_strategy=m.TTLStrategy(seconds_after_success=86400, seconds_after_failure=604800),
        security_context=m.PodSecurityContext(
            run_as_non_root=True,
            run_as_user=RUN_AS_USER,
            run_as_group=RUN_AS_USER,
            seccomp_profile=m.SeccompProfile(type="RuntimeDefault"),
        ),
    ) as cron:
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
    return cron
