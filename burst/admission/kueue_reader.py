"""Read a team's Kueue queue from the API server, from inside a pod (read-only).

The provision step, in a pod of the Argo workflow, reads what its train pod will be admitted
against: the LocalQueue the train pod names (``burst-<team>`` in the pod's namespace), the
ClusterQueue it points at, and the ResourceFlavors. It authenticates as Kubernetes' in-cluster
clients do (client-go ``rest.InClusterConfig``): ``KUBERNETES_SERVICE_HOST`` and
``KUBERNETES_SERVICE_PORT``, the mounted service-account token and CA. Stdlib only.

RBAC (deploy/rbac.yaml): ``get`` on ``localqueues`` in the namespace (Role burst-run), ``get``
on ``clusterqueues`` and ``list`` on ``resourceflavors`` (ClusterRole burst-kueue-reader).

Fail closed: an API server that cannot be read (unreachable, refused, an error, Kueue's API not
served) raises :class:`~burst.errors.InfraError` (exit 4), never a refusal of the run.
A team with no LocalQueue is a refusal (:class:`FlavorRefused`, exit 3): its train pod would
never be admitted.
"""

from __future__ import annotations

import json
import logging
import os
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from burst.admission.coverage import coverage
from burst.admission.kueue_objects import API, local_queue_name
from burst.admission.podsets import run_pod_sets
from burst.documents.plan import Candidate
from burst.errors import InfraError, PolicyRefusal
from burst.spec import BurstJob

log = logging.getLogger(__name__)

#: Where the kubelet mounts a pod's service-account token, CA and namespace.
SERVICE_ACCOUNT_DIR: Final = Path("/var/run/secrets/kubernetes.io/serviceaccount")
#: Argo's controller sets this in every container of a workflow's pod (workflowpod.go,
#: ``common.EnvVarNodeID``); the local runner (`burst run`, burst.runner.engine) does not.
ARGO_NODE_VAR: Final = "ARGO_NODE_ID"
#: The local runner marks every process it starts with this variable
#: (burst.runner.pods.POD_MARK): a step there is not on a cluster, whatever the machine is.
LOCAL_POD_MARK: Final = "BURST_POD_DIR"
TIMEOUT_S: Final = 30.0


class KueueAbsent(InfraError):
    """The API server does not serve Kueue's API: Kueue is not installed (optional,
    docs/cluster-setup.md), so no flavor gates the train pod and the ledger admits alone."""


class ApiAnswer(InfraError):
    """The API server answered an error (``code``: its HTTP status)."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(message, where="Kueue")
        self.code = code


class FlavorRefused(PolicyRefusal):
    """No Kueue flavor of the team's ClusterQueue covers the run's placement (exit 3)."""


def on_cluster(env: Mapping[str, str] | None = None) -> bool:
    """Whether this step runs in a pod of an Argo workflow on a cluster: the kubelet sets
    ``KUBERNETES_SERVICE_HOST`` in every pod and Argo ``ARGO_NODE_ID`` in every container of
    a workflow's pod; neither under `burst run` here (which marks its processes
    ``BURST_POD_DIR``), nor for a step started by hand on a machine that is itself a pod."""
    env = os.environ if env is None else env
    return (
        bool(env.get("KUBERNETES_SERVICE_HOST"))
        and bool(env.get(ARGO_NODE_VAR))
        and not env.get(LOCAL_POD_MARK)
    )


@dataclass(frozen=True)
class InCluster:
    """The API server and this pod's credentials."""

    server: str  # https://host:port
    token: str
    ca_file: Path
    namespace: str

    @classmethod
    def from_pod(
        cls, env: Mapping[str, str] | None = None, sa_dir: Path = SERVICE_ACCOUNT_DIR
    ) -> InCluster:
        env = os.environ if env is None else env
        host, port = env.get("KUBERNETES_SERVICE_HOST", ""), env.get("KUBERNETES_SERVICE_PORT", "")
        if not host or not port:
            raise InfraError(
                "KUBERNETES_SERVICE_HOST and KUBERNETES_SERVICE_PORT must both be set to read "
                "Kueue's queues from the API server",
                where="provision",
            )
        try:
            token = (sa_dir / "token").read_text(encoding="utf-8").strip()
            namespace = (sa_dir / "namespace").read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise InfraError(
                f"cannot read the pod's service-account token or namespace ({exc.strerror}): "
                "the step needs its account's token mounted to read Kueue's queues",
                where=str(sa_dir),
            ) from exc
        ca = sa_dir / "ca.crt"
        if not ca.is_file():
            raise InfraError("no service-account CA to verify the API server", where=str(ca))
        if ":" in host and not host.startswith("["):
            host = f"[{host}]"
        return cls(f"https://{host}:{port}", token, ca, namespace)


@dataclass(frozen=True)
class TeamQueue:
    """What the API server holds for one team: its LocalQueue's ClusterQueue and the flavors
    (as the API server returns them)."""

    local_queue: str
    cluster_queue: dict[str, Any]
    flavors: list[dict[str, Any]]


class KueueReader:
    """Requests to the API server's Kueue API (``kueue.x-k8s.io/v1beta2``): GETs here, and
    the run's Workload (create, get, delete) in :mod:`burst.admission.kueue_workload`."""

    def __init__(self, api: InCluster, timeout_s: float = TIMEOUT_S) -> None:
        self.api = api
        self.timeout_s = timeout_s
        try:
            self._tls = ssl.create_default_context(cafile=str(api.ca_file))
        except (ssl.SSLError, OSError) as exc:
            raise InfraError(
                f"the service-account CA cannot be loaded: {exc}", where=str(api.ca_file)
            ) from exc

    def _get(self, path: str, name: str | None = None) -> dict[str, Any] | None:
        """The object at ``path`` (None: the object ``name`` does not exist)."""
        return self.call("GET", path, name)

    def call(
        self,
        method: str,
        path: str,
        name: str | None = None,
        body: Mapping[str, Any] | None = None,
        api: str | None = None,
    ) -> dict[str, Any] | None:
        """``method`` on ``/apis/<api>/<path>`` (``api``: Kueue's, the module's ``API``, read
        at the call): the answer's object (None: the object ``name`` does not exist). Every
        other failure fails closed (InfraError; KueueAbsent when the API server serves no
        such API)."""
        url = f"{self.api.server}/apis/{api or API}/{path}"
        headers = {"Authorization": f"Bearer {self.api.token}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s, context=self._tls) as resp:
                answer = resp.read()
        except urllib.error.HTTPError as exc:
            status = _status(exc)
            if exc.code == 404 and name is not None and status.get("details", {}).get("name"):
                return None
            reason = status.get("message") or exc.reason
            if exc.code == 404:  # (the type, not an object: the API server knows no Kueue)
                raise KueueAbsent(
                    f"the API server does not serve Kueue's API {api or API} ({method} {url}: 404)",
                    where="Kueue",
                ) from exc
            raise ApiAnswer(
                exc.code, f"the API server answered {exc.code} to {method} {url}: {reason}"
            ) from exc
        except (urllib.error.URLError, OSError) as exc:
            why = getattr(exc, "reason", exc)
            raise InfraError(
                f"cannot reach the API server for {method} {url}: {why}", where="Kueue"
            ) from exc
        try:
            doc = json.loads(answer)
        except ValueError as exc:
            raise InfraError(
                f"the API server's answer to {method} {url} is not JSON", where="Kueue"
            ) from exc
        if not isinstance(doc, dict):
            raise InfraError(
                f"the API server's answer to {method} {url} is not an object", where="Kueue"
            )
        return doc

    def team_queue(self, team: str) -> TeamQueue:
        lq_name = local_queue_name(team)
        ns = urllib.parse.quote(self.api.namespace, safe="")
        lq = self._get(
            f"namespaces/{ns}/localqueues/{urllib.parse.quote(lq_name, safe='')}", lq_name
        )
        if lq is None:
            raise FlavorRefused(
                f"team {team} has no Kueue LocalQueue {lq_name} in namespace "
                f"{self.api.namespace}: its train pod would never be admitted (burst kueue, "
                "docs/queue.md)",
                where="provision",
            )
        cq_name = str((lq.get("spec") or {}).get("clusterQueue") or "")
        cq = self._get(f"clusterqueues/{urllib.parse.quote(cq_name, safe='')}", cq_name)
        if not cq_name or cq is None:
            raise FlavorRefused(
                f"LocalQueue {lq_name} names ClusterQueue {cq_name or '(none)'}, which does not "
                "exist: the run's train pod would never be admitted",
                where="provision",
            )
        flavors = self._get("resourceflavors") or {}
        items = [i for i in flavors.get("items") or [] if isinstance(i, dict)]
        log.info(
            "Kueue: team %s -> LocalQueue %s -> ClusterQueue %s; %d ResourceFlavors",
            team, lq_name, cq_name, len(items),
        )  # fmt: skip
        return TeamQueue(lq_name, cq, items)


def _status(exc: urllib.error.HTTPError) -> dict[str, Any]:
    """The Kubernetes Status object of an error answer ({} when it is none)."""
    try:
        doc = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return {}
    return doc if isinstance(doc, dict) and doc.get("kind") == "Status" else {}


@dataclass(frozen=True)
class KueueView:
    """What provision reads of Kueue, once per provision (:func:`read_kueue`), and hands its
    flavor gate (:func:`kueue_gate`), its dispatch (``burst.admission.dispatch.dispatch_run``)
    and its quota wait (``burst.admission.kueue_workload.reserve_quota``): the reader (this
    pod's API server and account) and the team's queue. Both None: no Kueue admits here
    (under `burst run`, or on a cluster that does not serve Kueue's API): the ledger admits
    alone."""

    reader: KueueReader | None = None
    queue: TeamQueue | None = None


def read_kueue(job: BurstJob) -> KueueView:
    """The team's Kueue queue on a cluster, read once (an API server that cannot be read:
    InfraError; a team with no LocalQueue: FlavorRefused); an empty view under `burst run` or
    where Kueue is not installed (its API not served: a fact, not an unknown)."""
    if not on_cluster():
        return KueueView()
    reader = KueueReader(InCluster.from_pod())
    try:
        queue = reader.team_queue(job.team)
    except KueueAbsent as exc:
        log.info("%s: Kueue is not installed; the ledger admits the run alone", exc.one_line())
        return KueueView()
    return KueueView(reader, queue)


def covered_candidates(
    job: BurstJob, candidates: Sequence[Candidate], queue: TeamQueue
) -> list[Candidate]:
    """The candidates (in order) a flavor of the team's ClusterQueue covers: every podSet of
    the run's Workload (``burst.admission.podsets``: an AWS spot run's on-demand floor is one
    of its own) under a flavor of its own capacity. Those none covers are dropped (logged),
    so failover never rents one. None covered: FlavorRefused (exit 3), one line naming the
    first candidate, the ClusterQueue and its flavors."""
    kept: list[Candidate] = []
    first: str | None = None
    for c in candidates:
        refusal, flavors = None, []
        for share in run_pod_sets(job, c):
            verdict = coverage(share.placement, queue.cluster_queue, queue.flavors)
            if verdict.flavor is None:
                refusal = share.refusal(verdict.refusal or "")
                break
            flavors.append(verdict.flavor)
        if refusal is None:
            log.info(
                "Kueue: %s/%s is covered by flavor %s", c.provider, c.region, " + ".join(flavors)
            )
            kept.append(c)
        else:
            log.warning("Kueue: candidate %s/%s dropped: %s", c.provider, c.region, refusal)
            first = first or refusal
    if not kept and first is not None:
        others = len(candidates) - 1
        more = f" (nor any of the other {others} candidates)" if others > 0 else ""
        raise FlavorRefused(first + more, where="provision")
    return kept


def kueue_gate(
    job: BurstJob, candidates: Sequence[Candidate], kueue: KueueView | None = None
) -> list[Candidate]:
    """Provision's Kueue admission, before the ledger's: on a cluster, the candidates a flavor
    of the team's ClusterQueue covers (none: FlavorRefused; the API server unreadable:
    InfraError); under `burst run`, or on a cluster without Kueue (its API not served), the
    candidates as they are. ``kueue``: provision's one read of Kueue (None: read it here)."""
    view = read_kueue(job) if kueue is None else kueue
    if view.queue is None:
        return list(candidates)
    return covered_candidates(job, candidates, view.queue)
