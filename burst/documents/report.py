"""The run report (``runs/<run-id>/report.json``): what each step did and what the run
produced, assembled by ``burst.obs.report.build_report`` from the step documents (a
regional-sync run's: its ``regional`` section too); read by
``burst report``, ``burst status`` and the run view (``burst.obs.run_view``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from burst.documents.base import Detail, Document
from burst.documents.plan import Candidate
from burst.documents.provision import Admission, ProvisionAttempt
from burst.documents.regional import RegionalSection
from burst.documents.teardown import CheckpointSync, Leak, Settlement
from burst.documents.train import CheckpointInterval, RankFigures


class PodAttempt(Document):
    """One pod of a step (the local runner's emulation of an Argo node)."""

    exit_code: int | None = None
    phase: str | None = None
    message: str | None = None
    seconds: float | None = None
    started_at: str | None = None
    pod_dir: str | None = None
    outputs_dir: str | None = None


class StepRecord(Document):
    """One pipeline step: its last status, and every pod it ran (a requeued step: several
    placements, one entry)."""

    name: str
    status: Literal["succeeded", "failed", "skipped"]
    seconds: float = 0.0
    exit_code: int | None = None
    attempts: int = 0
    started_at: str | None = None
    ended_at: str | None = None
    path: str | None = None
    region: str | None = Field(
        default=None,
        description="A regional run's branch: its region (the entry is then named as its "
        "pod, e.g. regions(0:eu-west-1).train, one entry a region).",
    )
    module: str | None = Field(
        default=None, description="That pod's pipeline step (provision, train, aggregate, ...)."
    )
    placements: int | None = None
    attempt_details: list[PodAttempt] = Field(default_factory=list)
    image: str | None = Field(
        default=None, description="burst run --containers: the image its last pod ran in."
    )
    image_digest: str | None = Field(
        default=None, description="burst run --containers: that image's digest."
    )
    image_provenance: str | None = Field(
        default=None,
        description="verified (the digest verify-image accepted), unverified local image, "
        "steps image, or in-process (no image): burst.supplychain.provenance.",
    )


class Failure(Document):
    step: str
    exit_code: int | None = None
    message: str | None = None


class AttemptSummary(Document):
    """One train attempt, as the report shows it."""

    attempt: int | None = None
    resumed_from: int | None = None
    restored_from_tier: str | None = Field(
        default=None,
        description="checkpoint.memory_tiers: the tier the resumed checkpoint was read from "
        "(local, peer or store).",
    )
    ended_at_step: int | None = None
    outcome: str | None = None
    preempted: bool = False
    notice: str | None = Field(default=None, description="Who gave the preemption notice.")
    emergency_save: str | None = Field(default=None, description="The tier it saved.")
    emergency_committed: bool | None = None
    killed: bool = Field(default=False, description="Died without closing its record.")
    recovery_source: str | None = Field(
        default=None,
        description="What ended it (burst.recovery: preemption, failure, node-loss, "
        "control-plane, cancel); None: it ended the run.",
    )
    cost_usd: float | None = None
    world_size: int = Field(default=1, ge=1, description="Ranks of the attempt.")
    ranks: list[RankFigures] | None = None
    notice_to_exit_s: float | None = None
    back_to_spot: Detail | None = Field(
        default=None,
        description="On an on-demand fallback (burst.recovery.back_to_spot): the move the "
        "attempt made, else the last probe's stay: decision (move or stay), reason, "
        "saving_usd, move_cost_usd, margin_usd, candidate, at_step, probe, probes.",
    )
    program: Detail | None = Field(
        default=None,
        description="training.command: the program's exit code, its last log lines, warnings "
        "(no checkpoint in expect_within_s), and on a notice the work lost (lost_seconds, "
        "lost_gpu_seconds, lost_steps) when it saved nothing in time.",
    )


class BudgetLimits(Document):
    max_usd: float
    max_hours: float


class Pricing(Document):
    usd_per_hour: float | None = None
    expected_usd: float | None = None
    expected_hours: float | None = None


class TeardownSummary(Document):
    checkpoint_sync: CheckpointSync | None = None
    destroyed: bool | None = None
    attempts: int | None = None
    errors: list[str] | None = None
    stale_locks_released: list[str] | None = None
    leaks: list[Leak] | None = None
    injected_failures: list[int] | None = None


class WorkflowResult(Document):
    template: str | None = None
    phase: str | None = None
    message: str | None = None
    exit_handler_phase: str | None = None


class ContainerPod(Document):
    image: str
    digest: str
    id: str
    named: str | None = Field(default=None, description="The image its template named.")
    provenance: str | None = Field(default=None, description="As StepRecord.image_provenance.")


class ContainerRun(Document):
    """``burst run --containers``: the engine, and the image every pod ran in."""

    engine: str
    pods: dict[str, ContainerPod] = Field(default_factory=dict)


class RecoverySplit(Document):
    """Where each restart's time went (``burst.obs.recovery_split``): detect, save, teardown,
    provision, pull, startup, restore and first step, from recorded timestamps only (a term
    that cannot be known is null, with why)."""

    median_s: dict[str, float | None] = Field(default_factory=dict)
    restarts: list[Detail] = Field(default_factory=list)


class RunReport(Document):
    """``report.json``."""

    run_id: str
    status: Literal[
        "succeeded", "failed", "preempted", "cancelled", "budget-stopped", "lost", "reaped"
    ] = Field(description="How the run ended (burst.endings; docs/reference/endings.md).")
    exit_code: int
    finished_at: str | None = None
    steps: list[StepRecord] = Field(default_factory=list)
    failure: Failure | None = None
    checkpoints: int = 0
    final_step: int | None = None
    final_weights_sha256: str | None = None
    preemptions: int = 0
    recovery_sources: dict[str, int] = Field(
        default_factory=dict,
        description="The attempts that did not end the run, counted by what ended them "
        "(recovery_source): preemptions and failures spend separate budgets.",
    )
    recovery_split: RecoverySplit | None = Field(
        default=None, description="Each restart's time, term by term (a run that restarted)."
    )
    world_size: int = Field(default=1, ge=1)
    attempts: list[AttemptSummary] = Field(default_factory=list)
    store: dict[str, Any] | None = Field(
        default=None, description="What the checkpoint store holds: its url, the committed."
    )
    checkpoint_interval: CheckpointInterval | None = None
    candidate: Candidate | None = None
    provision_attempts: list[ProvisionAttempt] = Field(default_factory=list)
    budget: BudgetLimits | None = None
    reservation: Admission | None = Field(
        default=None, description="The run's reservation in its team's ledger (provision)."
    )
    settlement: Settlement | None = Field(
        default=None, description="That reservation settled to what the run used (teardown)."
    )
    cost: dict[str, float] = Field(default_factory=dict, description="USD by component.")
    pricing: Pricing | None = None
    terraform_state: str | None = None
    resources_remaining: int = 0
    teardown: TeardownSummary | None = None
    workflow: WorkflowResult | None = None
    containers: ContainerRun | None = None
    regional: RegionalSection | None = Field(
        default=None,
        description="A regional-sync run (burst-regional): its regions, rounds and links.",
    )
