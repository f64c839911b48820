"""Submit runs to an Argo server and follow them (Hera's WorkflowsService).

The server and the credentials come from the environment only, never from files in the repo:

    ARGO_SERVER      URL of the Argo server (https://argo.example.com:2746)
    ARGO_TOKEN       bearer token (e.g. a short-lived service-account token); required
    ARGO_NAMESPACE   namespace of the WorkflowTemplate and the runs (default: argo)
    ARGO_INSECURE_SKIP_VERIFY=true   accept a self-signed server certificate (development)
    BURST_STEPS_IMAGE   the steps image, pinned by digest (default: the template's)

A run is a Workflow that calls the ``burst-train`` WorkflowTemplate by ``workflowTemplateRef``
(so Argo runs exactly the committed template), with the spec and its budget as parameters.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.admission.kueue_objects import TEAM_MAX
from burst.errors import BadInputError, InfraError
from burst.infra.remote_errors import check_url
from burst.inputs import clip
from burst.recovery import template_parameters
from burst.settings import current
from burst.spec import BurstJob, gpus_per_pod, load_spec, node_count

log = logging.getLogger(__name__)

TEMPLATE_NAME = "burst-train"
REGIONAL_TEMPLATE = "burst-regional"
DEFAULT_NAMESPACE = "argo"
#: Time after train's deadline for teardown and the rest of the run.
TEARDOWN_MARGIN_S = 3600
FINISHED = ("Succeeded", "Failed", "Error")
_PINNED = re.compile(r"^[a-z0-9][a-z0-9._/:-]*@sha256:[0-9a-f]{64}$")


class ArgoUnauthorized(BadInputError):
    """The Argo server refused the token (expired, or never valid)."""


class ArgoNotFound(BadInputError):
    """The Argo server has no such workflow."""


@dataclass(frozen=True)
class ArgoSettings:
    server: str
    token: str
    namespace: str
    verify_ssl: bool


def settings_from_env(namespace: str | None = None) -> ArgoSettings:
    env = current()
    server = env.argo_server
    if not server:
        raise BadInputError(
            "ARGO_SERVER is not set: export the Argo server URL "
            "(e.g. https://argo.example.com:2746)"
        )
    if "://" not in server:
        server = "https://" + server
    check_url(server, "ARGO_SERVER")
    token = env.argo_token
    if not token:
        raise BadInputError(
            "ARGO_TOKEN is not set: export a bearer token for the Argo server "
            "(credentials come from the environment only)"
        )
    insecure = env.argo_insecure
    return ArgoSettings(
        server.rstrip("/") + "/",
        token,
        namespace or env.argo_namespace or DEFAULT_NAMESPACE,
        not insecure,
    )


# Hera's service calls requests without a timeout: a server that accepts the connection and
# never answers held `burst status --no-follow` (and finish, submit) for ever. Every call now
# gives up after these (connect, read) seconds: InfraError (exit 4), or --max-outage retries.
ARGO_TIMEOUT_S = (10.0, 30.0)


def _timed_session() -> Any:
    import requests

    class TimedSession(requests.Session):
        def request(self, method: Any, url: Any, *args: Any, **kwargs: Any) -> Any:
            if kwargs.get("timeout") is None:
                kwargs["timeout"] = ARGO_TIMEOUT_S
            return super().request(method, url, *args, **kwargs)

    return TimedSession()


def _service(s: ArgoSettings) -> Any:
    from hera.workflows import WorkflowsService

    return WorkflowsService(
        host=s.server,
        token=s.token,
        namespace=s.namespace,
        verify_ssl=s.verify_ssl,
        session=_timed_session(),
    )


def _pinned(ref: str, what: str) -> str:
    if "://" in ref or not _PINNED.match(ref):
        raise BadInputError(
            f"{what} {ref!r} must be a registry image pinned by digest "
            "(registry/name@sha256:<64 hex>) to run on Argo"
        )
    return ref


def spec_parameters(job: BurstJob, spec_text: str) -> dict[str, str]:
    """The burst-train parameters a spec decides (what `burst run` passes too)."""
    return {
        "spec": spec_text,
        "team": job.team,
        "priority": str(job.priority),  # the train pods' Kueue WorkloadPriorityClass
        "cost-centre": job.cost_centre,
        "owner": job.owner,
        "train-deadline-seconds": str(int(job.budget.max_hours * 3600)),
        "nodes": str(node_count(job)),
        "gpus-per-node": str(gpus_per_pod(job)),  # each node's train pod's request
        **peer_parameters(job),  # a gang pod's peer memory sidecar (checkpoint tiers)
        **template_parameters(job),  # the spec's recovery (burst/recovery.py)
    }


def peer_parameters(job: BurstJob) -> dict[str, str]:
    """The peer memory sidecar's capacity and its container's memory (the capacity and
    256 MiB for the server itself), from ``training.checkpoint.memory_tiers``; an idle 1M
    server when the tiers are off."""
    from burst.checkpoint.peer import parse_size

    tiers = job.training.checkpoint.memory_tiers
    if not tiers.enabled:
        return {"memory-tiers": "off", "peer-capacity": "1M", "peer-memory": "64Mi"}
    capacity = parse_size(tiers.capacity)
    mib = -(-capacity // (1 << 20)) + 256
    return {"memory-tiers": "on", "peer-capacity": str(capacity), "peer-memory": f"{mib}Mi"}


def terraform_parameters() -> dict[str, str]:
    """The Terraform stack and its state store, from the environment (only what is set)."""
    env = current()
    params = {
        name: text
        for var, name in (
            ("BURST_TF_STACK", "tf-stack"),
            ("BURST_TF_STATE_BUCKET", "tf-state-bucket"),
            ("BURST_TF_STATE_REGION", "tf-state-region"),
        )
        if (text := env.raw(var))
    }
    site = env.raw("BURST_TF_SITE_VARS")
    if site and Path(site).is_dir():  # one site file per region: the steps pick theirs
        from burst.infra.workspace import site_map

        params["tf-site-vars"] = site_map(Path(site))
    elif site:
        try:
            params["tf-site-vars"] = Path(site).read_text(encoding="utf-8")
        except OSError as exc:
            raise BadInputError(f"BURST_TF_SITE_VARS: cannot read {site}: {exc.strerror}") from None
    return params


def workflow_parameters(job: BurstJob, spec_text: str) -> dict[str, str]:
    """What `burst submit` passes: the spec's parameters, the pinned steps image, and the
    Terraform settings of the environment (the template's default stack is aws). The trainer
    image is no parameter: train runs the digest verify-image verified from the spec (its
    document's run_image); a spec not pinned to a registry digest is refused here."""
    params = spec_parameters(job, spec_text)
    _pinned(job.image.reference, "image.reference")
    steps_image = current().steps_image
    if steps_image:
        params["steps-image"] = _pinned(steps_image, "BURST_STEPS_IMAGE")
    params.update(terraform_parameters())
    return params


def regional_parameters(job: BurstJob, spec_text: str) -> dict[str, str]:
    """What `burst submit` passes to burst-regional (a ``strategy: regional-sync`` spec): the
    spec, its regions (a JSON list: the exit handler's and the fan-out's ``withParam``) and
    aggregation region, the deadline, the pinned images, the Terraform settings."""
    import json

    rs = job.training.regional_sync
    assert rs is not None  # the spec refuses the strategy without its settings
    params = {
        "spec": spec_text,
        "regions": json.dumps(list(rs.regions or [])),
        "aggregation-region": str(rs.aggregation_region),
        "team": job.team,  # the GPU quota semaphore's key (deploy/gpu-quota.yaml)
        "priority": str(job.priority),
        "cost-centre": job.cost_centre,
        "owner": job.owner,
        "train-deadline-seconds": str(int(job.budget.max_hours * 3600)),
        "gpus-per-node": str(job.compute.gpus_per_node),  # each worker's GPUs
    }
    _pinned(job.image.reference, "image.reference")  # the workers run its verified digest
    steps_image = current().steps_image
    if steps_image:
        params["steps-image"] = _pinned(steps_image, "BURST_STEPS_IMAGE")
    params.update(terraform_parameters())
    return params


#: The team names the train pods' Kueue LocalQueue (label kueue.x-k8s.io/queue-name, which
#: Kueue's pod webhook refuses unless it is a DNS-1123 subdomain: jobframework
#: ValidateQueueName) and is a label value (at most 63 characters): lowercase letters,
#: digits, '-' and '.', alphanumeric at both ends (docs/reference/walk-kueue.md S4).
_DNS_LABEL = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_QUEUE_NAME = re.compile(rf"^(?=.{{1,{TEAM_MAX}}}$){_DNS_LABEL}(\.{_DNS_LABEL})*$")


def _queue_name(team: str) -> str:
    if not _QUEUE_NAME.match(team):
        raise BadInputError(
            f"team {clip(team, 80)!r} cannot name a Kueue LocalQueue, which the train pods "
            f"are labelled with (burst-<team>): use at most {TEAM_MAX} lowercase letters, "
            "digits, '-' and '.', "
            "starting and ending with a letter or digit"
        )
    return team


def build_workflow(spec_file: Path) -> dict[str, Any]:
    """The Workflow object ``burst submit`` sends (a dict in Argo's JSON shape): burst-train,
    or burst-regional for a ``strategy: regional-sync`` spec."""
    job = load_spec(spec_file)
    _queue_name(job.team)  # refused before anything is submitted, let alone rented
    text = spec_file.read_text(encoding="utf-8")
    regional = job.training.strategy == "regional-sync"
    params = regional_parameters(job, text) if regional else workflow_parameters(job, text)
    return {
        "metadata": {
            "generateName": f"{job.name}-",
            "labels": {"app.kubernetes.io/part-of": "burst", "burst.dev/job": job.name},
        },
        "spec": {
            "workflowTemplateRef": {"name": REGIONAL_TEMPLATE if regional else TEMPLATE_NAME},
            "activeDeadlineSeconds": int(job.budget.max_hours * 3600) + TEARDOWN_MARGIN_S,
            "arguments": {"parameters": [{"name": k, "value": v} for k, v in params.items()]},
        },
    }


def _call(fn: Any, *args: Any, settings: ArgoSettings | None = None, **kwargs: Any) -> Any:
    import pydantic
    import requests
    from hera.exceptions import HeraException, NotFound, Unauthorized

    at = (
        f"the Argo server {settings.server.rstrip('/')} (ARGO_SERVER)"
        if settings
        else ("the Argo server (ARGO_SERVER)")
    )
    try:
        return fn(*args, **kwargs)
    except Unauthorized as exc:
        raise ArgoUnauthorized(f"{at} refused ARGO_TOKEN: {clip(str(exc))}") from None
    except NotFound as exc:
        raise ArgoNotFound(f"not found on {at}: {clip(str(exc))}") from None
    except HeraException as exc:
        raise InfraError(f"{at} answered with an error: {clip(str(exc))}") from None
    except (
        requests.exceptions.InvalidURL,
        requests.exceptions.MissingSchema,
        requests.exceptions.InvalidSchema,
    ) as exc:
        raise BadInputError(f"{at} is not a usable URL: {exc.__class__.__name__}") from None
    except requests.RequestException as exc:
        raise InfraError(f"cannot reach {at}: {exc.__class__.__name__}") from None
    except pydantic.ValidationError as exc:
        raise InfraError(
            f"the answer of {at} is not a Workflow: "
            f"{exc.errors()[0].get('msg')} at {exc.errors()[0].get('loc')}"
        ) from None
    except (ValueError, UnicodeError) as exc:  # urllib3 rejects a URL it cannot parse
        raise BadInputError(f"{at} is not a usable URL: {clip(str(exc), 120)}") from None


def submit(spec_file: Path, settings: ArgoSettings) -> str:
    """Create the Workflow; return its name (the run id)."""
    from hera.workflows.models import Workflow, WorkflowCreateRequest

    wf = Workflow.model_validate(build_workflow(spec_file))
    with _service(settings) as svc:
        created = _call(svc.create_workflow, WorkflowCreateRequest(workflow=wf), settings=settings)
    name = created.metadata.name if created.metadata else None
    if not name:
        raise InfraError("the Argo server created a workflow but returned no name")
    log.info("submitted %s in %s", name, settings.namespace)
    return str(name)


def unfinished_workflows(settings: ArgoSettings) -> set[str]:
    """Names of the workflows in the namespace that have not finished (run ids, since a run's
    id is its workflow's name): the reaper never destroys what a live workflow drives."""
    with _service(settings) as svc:
        wl = _call(
            svc.list_workflows,
            settings=settings,
            namespace=settings.namespace,
            label_selector="workflows.argoproj.io/completed!=true",
        )
    return {str(w.metadata.name) for w in (wl.items or []) if w.metadata and w.metadata.name}


@dataclass
class WorkflowState:
    name: str
    phase: str
    message: str
    progress: str
    nodes: list[dict[str, Any]]

    @property
    def finished(self) -> bool:
        return self.phase in FINISHED


def stop(name: str, settings: ArgoSettings, message: str) -> None:
    """`argo stop`: no new step starts, running pods are stopped, the exit handler (teardown)
    runs. Never `argo terminate`, which would skip it."""
    from hera.workflows.models import WorkflowStopRequest

    with _service(settings) as svc:
        _call(
            svc.stop_workflow,
            name,
            WorkflowStopRequest(name=name, namespace=settings.namespace, message=message),
            settings=settings,
        )
    log.info("asked Argo to stop %s (its exit handler tears down)", name)


def workflow_json(name: str, settings: ArgoSettings) -> dict[str, Any]:
    """The submitted workflow as the Argo server returns it (``argo get -o json``)."""
    with _service(settings) as svc:
        wf = _call(svc.get_workflow, name, settings=settings)
    doc: dict[str, Any] = wf.model_dump(mode="json", by_alias=True, exclude_none=True)
    return doc


def status(name: str, settings: ArgoSettings) -> WorkflowState:
    with _service(settings) as svc:
        wf = _call(svc.get_workflow, name, settings=settings)
    st = wf.status
    nodes = []
    for node in ((st.nodes if st else None) or {}).values():
        if node.type not in ("Pod", "Retry"):
            continue
        nodes.append(
            {
                "name": node.display_name or node.name,
                "type": node.type,
                "phase": node.phase,
                "exit_code": node.outputs.exit_code if node.outputs else None,
                "started_at": node.started_at.root.isoformat() if node.started_at else "",
                "message": node.message or "",
            }
        )
    nodes.sort(key=lambda n: n["started_at"])
    return WorkflowState(
        name,
        (st.phase if st else None) or "Pending",
        (st.message if st else None) or "",
        (st.progress if st else None) or "",
        nodes,
    )
