"""Provision a run's infrastructure, failing over through the plan's candidates.

The loop is written once (``provision``); what to do after an attempt is decided by the
run's recovery strategy (``burst.recovery``, spec ``compute.recovery``). A capacity error
destroys what the attempt partly created, checks that nothing of it is left, and moves to the
next candidate; any other error stops.
Every attempt is recorded in the provision document. Applying again for the same run id
converges: the candidate that succeeded goes first and the expiry tag is kept, so a second
apply changes nothing.

Failure emulation (local stack only, for tests and the fault-injection harness) is a named
fault point, ``burst.faults.provision_faults``: ``BURST_SIMULATE_NO_CAPACITY`` regions report
no capacity at apply time, after the VPN and node group exist; ``fail_midway=True``
(``--fail-at provision:midway``) fails the same way with a non-capacity error and leaves the
partial state for teardown.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

from burst import faults
from burst.documents import DecisionRecord, parse_document
from burst.documents.plan import Candidate
from burst.documents.provision import (
    Changes,
    Cleanup,
    Failover,
    ProvisionAttempt,
    ProvisionDocument,
    Refused,
    TerraformInfo,
)
from burst.errors import (
    BadInputError,
    BurstError,
    CapacityError,
    InfraError,
    InjectedFailure,
    PolicyRefusal,
)
from burst.infra import runrecord
from burst.infra.terraform import Terraform
from burst.infra.workspace import (
    CLOUD,
    VARS_FILE,
    Workspace,
    load_workspace,
    stack_mode,
    stack_of,
    workspace_for,
    write_vars,
)
from burst.obs.events import PROVISION_ATTEMPT, emit
from burst.plan.placement import default_capacity
from burst.providers import store_refusal
from burst.recovery import RecoveryStrategy, strategy_for
from burst.settings import Settings, resolve
from burst.spec import BurstJob, node_count
from burst.storage.location import exchange_url, run_url

log = logging.getLogger(__name__)

TIMEOUT_ENV = "BURST_TF_TIMEOUT_S"  # one apply or destroy; a GPU node group takes minutes
DEFAULT_TIMEOUT_S = 7200.0
RECORD_FILE = "provision-record.json"


def expires_at(job: BurstJob, now: dt.datetime | None = None) -> str:
    """When the run's resources may be reaped: the budget's hours plus one hour of grace."""
    now = now or dt.datetime.now(dt.UTC)
    return (now + dt.timedelta(hours=job.budget.max_hours + 1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def apply_timeout(env: Settings | Mapping[str, str] | None = None) -> float:
    return resolve(env).tf_timeout_s


def check_candidates(candidates: Sequence[Candidate]) -> list[Candidate]:
    """The plan's candidates (an empty plan is an infrastructure error: nothing to rent)."""
    if not candidates:
        raise InfraError("no candidate to provision: the plan is empty")
    return list(candidates)


def gate_candidates(
    decision: DecisionRecord | None,
    job: BurstJob,
    candidates: Sequence[Candidate],
    policy_dir: str | Path | None = None,
) -> tuple[list[Candidate], list[Refused]]:
    """Keep the candidates the decision record allows for exactly this spec and these
    policies (``burst.policy.require_allow``); the others are returned as refused.

    Fails closed: no decision record, or no candidate allowed (a stale spec or policy hash
    refuses them all), raises ``PolicyRefusal`` (exit 3) before anything is applied.
    """
    from burst.policy import require_allow

    if not decision:
        raise PolicyRefusal(
            "provision needs the preflight decision record "
            "(--input decision=...): refusing to provision without one"
        )
    record = parse_document(DecisionRecord, decision, "input decision")
    allowed: list[Candidate] = []
    refused: list[Refused] = []
    for cand in check_candidates(candidates):
        try:
            require_allow(record, job, policy_dir, cand.region, cand.provider)
        except PolicyRefusal as exc:
            refused.append(Refused(region=cand.region, provider=cand.provider, reason=exc.message))
            log.warning("not provisioning %s/%s: %s", cand.provider, cand.region, exc.message)
            continue
        allowed.append(cand)
    if not allowed:
        raise PolicyRefusal(
            "no candidate of the plan has an allow decision for this spec "
            f"and these policies; first: {refused[0].provider}/"
            f"{refused[0].region}: {refused[0].reason}"
        )
    return allowed, refused


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _same(a: Candidate, b: dict[str, Any]) -> bool:
    return (a.region, a.provider, a.capacity) == tuple(
        b.get(k) for k in ("region", "provider", "capacity")
    )


def _order(candidates: list[Candidate], previous: dict[str, Any] | None) -> list[Candidate]:
    """The candidate that already succeeded for this run goes first (idempotent re-runs)."""
    if not isinstance(previous, dict):
        return list(candidates)
    first = [c for c in candidates if _same(c, previous)]
    return first[:1] + [c for c in candidates if not (first and c is first[0])]


class Provisioner:
    """One run's provisioning: the workspace, its Terraform, and the attempts so far."""

    def __init__(
        self,
        job: BurstJob,
        run_id: str,
        workdir: Path,
        *,
        policy: RecoveryStrategy | None = None,
        env: Settings | Mapping[str, str] | None = None,
        fail_midway: bool | None = None,
        on_event: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.job = job
        self.run_id = run_id
        self.workdir = Path(workdir)
        self.policy = policy or strategy_for(job)
        # the named fault points of provisioning (tests and the fault-injection harness)
        self.faults = faults.provision_faults(resolve(env), fail_midway=fail_midway)
        self.timeout_s = apply_timeout(env)
        self.env = resolve(env)  # one snapshot for every attempt
        self.mode = stack_mode(env)
        self.on_event = on_event
        # the stack BURST_TF_STACK names; under "cloud" the first candidate's, chosen in run()
        self._use(self._workspace(None) if self.mode != CLOUD else None)
        self.attempts: list[ProvisionAttempt] = []
        self.refused: list[Refused] = []

    def _workspace(self, candidate: Candidate | None) -> Workspace:
        return workspace_for(
            self.run_id, self.workdir, self.env, candidate.to_json() if candidate else None
        )

    def _use(self, ws: Workspace | None) -> None:
        """Apply with ``ws`` from now on (a run's attempts may cross providers' stacks)."""
        if ws is None:
            return
        self.ws = ws
        self.tf = ws.terraform()
        self.tf.on_event = self.on_event

    def _switch_to(self, candidate: Candidate) -> None:
        """Before an attempt: the candidate's stack and site file, prepared and initialised
        (the previous attempt's resources are already destroyed)."""
        if self.mode == "local":
            if self.env.tf_site_vars is not None:  # the candidate's own site file
                ws = self._workspace(candidate)
                if ws.site_vars != self.ws.site_vars:
                    log.info("applying %s with site file %s", candidate.region, ws.site_vars)
                    self._use(ws)
                    self.ws.prepare()  # records the site file teardown destroys with
            return
        ws = self._workspace(candidate)
        if ws != self.ws:
            log.info(
                "applying %s/%s with the %s stack",
                candidate.provider,
                candidate.region,
                ws.kind,
            )
            self._use(ws)
            self.ws.prepare()
            self.ws.init(self.tf)

    def runnable(self, candidates: list[Candidate]) -> tuple[list[Candidate], list[Refused]]:
        """The candidates a stack of this mode can apply; the others with the reason."""
        keep: list[Candidate] = []
        refused: list[Refused] = []
        for cand in candidates:
            kind, why = stack_of(self.mode, cand.provider)
            if kind is not None and (store := store_refusal(kind)) is not None:
                kind, why = None, store
            if kind is None:
                refused.append(Refused(region=cand.region, provider=cand.provider, reason=why))
                log.warning("not provisioning %s/%s: %s", cand.provider, cand.region, why)
            else:
                keep.append(cand)
        return keep, refused

    # ------------------------------------------------------------------ helpers
    def _stores(self, region: str) -> dict[str, Any]:
        """The spec's stores the run's pods write, which the stack grants its pod role: a
        single-region run's own store (``storage.checkpoint_uri`` under the run id, where
        train checkpoints: burst/train/checkpoints.py), or a regional-sync region's exchange
        store (its stack's run id is ``<workflow>-<region>``; its own store is the stack's
        bucket: burst/plan/regional.py role_config); and the spec's key."""
        uri = self.job.storage.checkpoint_uri
        if self.job.training.strategy == "regional-sync":
            workflow = self.run_id.removesuffix(f"-{region}")
            given: dict[str, Any] = {"exchange_uri": exchange_url(uri, workflow)}
        else:
            given = {"run_store_uri": run_url(uri, self.run_id)}
        return {**given, "store_kms_key": self.job.storage.kms_key_id}

    def _remaining(self, tf: Terraform | None = None) -> int:
        return len((tf or self.tf).state_resources())

    def _clean_up(
        self, region: str, ws: Workspace | None = None, tf: Terraform | None = None
    ) -> Cleanup:
        """Destroy what a failed attempt created; report what is left."""
        ws, tf = ws or self.ws, tf or self.tf
        try:
            tf.destroy([f for f in ws.var_files(region) if f.exists()], timeout=self.timeout_s)
        except InfraError as exc:
            return Cleanup(
                destroyed=False, resources_remaining=self._remaining(tf), error=exc.message
            )
        remaining = self._remaining(tf)
        return Cleanup(destroyed=remaining == 0, resources_remaining=remaining, error=None)

    def _converge_leftovers(self, first: Candidate) -> None:
        """State left by an earlier, interrupted provision in another candidate is
        destroyed before applying elsewhere (an apply would move it across regions)."""
        previous_vars = _read_json(self.workdir / VARS_FILE)
        if not previous_vars or previous_vars.get("region") == first.region:
            return
        # the earlier attempt may have used another provider's stack (and backend)
        ws = load_workspace(self.workdir) or self.ws
        tf = self.tf
        if ws != self.ws:
            tf = ws.terraform()
            ws.init(tf)
        if self._remaining(tf) == 0:
            return
        log.warning(
            "run %s has state from an earlier attempt in %s: destroying it first",
            self.run_id,
            previous_vars.get("region"),
        )
        cleanup = self._clean_up(str(previous_vars.get("region")), ws, tf)
        if cleanup.resources_remaining:
            raise InfraError(
                f"cannot clean up the earlier attempt in "
                f"{previous_vars.get('region')}: {cleanup.error}",
                where=self.ws.state,
            )

    def _fail(self, exc: BurstError, doc: ProvisionDocument) -> NoReturn:
        exc.doc = doc.model_copy(  # stepio writes it
            update={"status": "failed", "attempts": list(self.attempts)}
        )
        raise exc

    # ------------------------------------------------------------------ the loop
    def run(self, candidates: Sequence[Candidate]) -> ProvisionDocument:
        usable, self.refused = self.runnable(check_candidates(candidates))
        if not usable:
            first = self.refused[0]
            raise BadInputError(
                "no candidate of the plan can be provisioned with BURST_TF_STACK="
                f"{self.mode}; first: {first.provider}/{first.region}: {first.reason}"
            )
        record = _read_json(self.workdir / RECORD_FILE)
        expiry = str(record.get("expires_at") or expires_at(self.job))
        tags = self.job.tags(self.run_id, expiry)
        ordered = _order(usable, record.get("candidate"))
        if self.policy.max_attempts is not None:
            ordered = ordered[: self.policy.max_attempts]
        if self.mode != "local" or self.env.tf_site_vars is not None:
            self._use(self._workspace(ordered[0]))
        self.ws.prepare()
        self.ws.init(self.tf)
        base = ProvisionDocument(
            expires_at=expiry,
            tags=tags,
            terraform=self._terraform_info(),
            terraform_dir=str(self.workdir),
            failover=Failover(policy=self.policy.name, candidates=len(ordered)),
            unprovisionable=self.refused,
        )
        self._converge_leftovers(ordered[0])
        try:
            self.faults.before_apply(self.ws.kind)
        except InjectedFailure as exc:
            self._fail(exc, base)
        for index, planned in enumerate(ordered, start=1):
            region = planned.region
            self._switch_to(planned)
            capacity = planned.capacity or default_capacity(self.job.compute.capacity)
            cand = planned.model_copy(update={"capacity": capacity})
            variables = self.ws.variables(
                run_id=self.run_id,
                candidate=cand.to_json(),
                gpu_type=self.job.compute.gpu_type,
                node_count=node_count(self.job, cand.to_json()),
                tags=tags,
                **self._stores(region),
                **self.faults.terraform_variables(),
                spot_probe=self.job.compute.recovery.probe_interval_s is not None,
            )
            write_vars(self.workdir, variables)
            runrecord.save(self.ws)  # beside the state: teardown's pod has another runs root
            attempt = ProvisionAttempt(
                index=index,
                region=region,
                provider=cand.provider,
                capacity=capacity,
                result="ok",
                error=None,
                changes=None,
                cleanup=None,
                site_vars=self.ws.site_vars.name if self.ws.site_vars else None,
            )
            self.attempts.append(attempt)
            started = time.monotonic()
            log.info(
                "attempt %d/%d: applying in %s/%s (%s)",
                index,
                len(ordered),
                cand.provider,
                region,
                capacity,
            )
            try:
                result = self.tf.apply(self.ws.var_files(region), timeout=self.timeout_s)
            except InfraError as exc:
                attempt.seconds = round(time.monotonic() - started, 3)
                attempt.error = exc.message
                injected = self.faults.injected(region, exc)
                if injected is not None:
                    attempt.result = "injected"
                    self._emit(attempt)
                    self._fail(injected, base)
                if not self.policy.fails_over(exc):
                    attempt.result = "error"
                    self._emit(attempt)
                    self._fail(exc, base)
                attempt.result = "capacity"
                log.warning(
                    "no capacity in %s/%s: %s; cleaning up and failing over",
                    cand.provider,
                    region,
                    exc.message,
                )
                attempt.cleanup = self._clean_up(region)
                self._emit(attempt)
                left = attempt.cleanup.resources_remaining
                if left:
                    self._fail(
                        InfraError(
                            f"capacity error in {region}, and {left} resource(s) of the attempt "
                            f"could not be destroyed: {attempt.cleanup.error}",
                            where=self.ws.state,
                        ),
                        base,
                    )
                continue
            attempt.seconds = round(time.monotonic() - started, 3)
            attempt.changes = parse_document(Changes, result.changes(), "terraform plan")
            self._emit(attempt)
            outputs = self.tf.outputs(result)
            # the train pods' service account is annotated with it (burst/pipelines/common.py);
            # stacks without a per-run role (local, emulated) say so with ""
            outputs.setdefault("pod_role_arn", "")
            (self.workdir / RECORD_FILE).write_text(
                json.dumps(
                    {"expires_at": expiry, "candidate": cand.to_json()}, indent=2, sort_keys=True
                )
                + "\n"
            )
            log.info(
                "provisioned %s in %s/%s (changes %s)",
                outputs.get("node_group_name"),
                cand.provider,
                region,
                attempt.changes,
            )
            return base.model_copy(
                update={
                    "terraform": self._terraform_info(),
                    "status": "provisioned",
                    "candidate": cand,
                    "attempts": list(self.attempts),
                    "outputs": outputs,
                    "changes": attempt.changes,
                }
            )
        self._fail(
            CapacityError(
                "no capacity in any candidate: "
                + ", ".join(f"{a.provider}/{a.region}" for a in self.attempts)
            ),
            base,
        )

    @staticmethod
    def _emit(attempt: ProvisionAttempt) -> None:
        emit(
            log,
            PROVISION_ATTEMPT,
            region=attempt.region,
            provider=attempt.provider,
            capacity=attempt.capacity,
            result=attempt.result,
            index=attempt.index,
        )

    def _terraform_info(self) -> TerraformInfo:
        return TerraformInfo(
            kind=self.ws.kind,
            workdir=str(self.workdir),
            config_dir=str(self.ws.config_dir),
            state=self.ws.state,
        )


def provision(
    job: BurstJob,
    run_id: str,
    workdir: Path,
    candidates: Sequence[Candidate],
    *,
    env: dict[str, str] | None = None,
    fail_midway: bool | None = None,
    policy: RecoveryStrategy | None = None,
) -> ProvisionDocument:
    """Apply the run's stack in the first candidate that has capacity; the provision doc."""
    return Provisioner(job, run_id, workdir, policy=policy, env=env, fail_midway=fail_midway).run(
        candidates
    )
