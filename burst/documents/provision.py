"""The provision document and its attempts: where the node group was applied, after which
failed attempts, with which tags and Terraform outputs (``burst.infra.provision``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from burst.documents.base import Document, StepDocument
from burst.documents.plan import Candidate


class Changes(Document):
    add: int
    change: int
    remove: int


class Cleanup(Document):
    """What destroying a failed attempt left."""

    destroyed: bool
    resources_remaining: int
    error: str | None = None


class ProvisionAttempt(Document):
    """One apply in one candidate."""

    index: int = Field(ge=1)
    region: str
    provider: str
    capacity: str
    result: Literal["ok", "capacity", "error", "injected"]
    error: str | None = None
    changes: Changes | None = None
    cleanup: Cleanup | None = None
    seconds: float | None = None
    site_vars: str | None = Field(
        default=None,
        description="The site file this attempt applied (BURST_TF_SITE_VARS: the candidate's "
        "<region>.tfvars, or the one file given); null without one.",
    )


class TerraformInfo(Document):
    kind: str
    workdir: str
    config_dir: str
    state: str


class Failover(Document):
    policy: str
    candidates: int


class Refused(Document):
    """A plan candidate the decision record does not allow (not attempted)."""

    region: str
    provider: str
    reason: str


class DecisionHashes(Document):
    spec_sha256: str | None = None
    policy_sha256: str | None = None


class PlacedCandidate(Document):
    """A candidate train was placed in, and how that placement ended (``ended``: requeue
    after losses, restart after a kill; absent while it runs)."""

    region: str
    provider: str
    capacity: str | None = None
    ended: Literal["requeue", "restart"] | None = None


class RecoveryRecord(Document):
    """What recovery (``burst.recovery``, spec ``compute.recovery``) did to reach this
    placement, and what it may do after it: the template's requeue and restart steps read
    ``may_requeue`` and ``may_restart``."""

    strategy: str
    event: Literal["start", "requeue", "restart"]
    candidate: PlacedCandidate | None = Field(
        default=None, description="Where this placement landed."
    )
    history: list[PlacedCandidate] = Field(
        default_factory=list, description="The run's earlier placements, oldest first."
    )
    requeues: int = Field(default=0, ge=0)
    restarts: int = Field(default=0, ge=0, description="Restarts after a kill, in the run.")
    spot_losses: int = Field(
        default=0,
        ge=0,
        description="Spot nodes lost before this placement (each requeue from spot counts "
        "its retries in place + 1).",
    )
    back_to_spot: bool = Field(
        default=False,
        description="This placement is a move back to spot: the train attempt before it "
        "left an on-demand fallback on its own (recovery_source back_to_spot, "
        "burst.recovery.back_to_spot), so spot candidates came first and the spot losses "
        "were counted afresh.",
    )
    retries_in_place: int | None = Field(default=None, ge=0)
    may_requeue: bool = False
    may_restart: bool = False
    may_wait_again: bool = Field(
        default=False,
        description="A train attempt whose Kueue quota a higher-priority run took (exit 76, "
        "burst.recovery.QUOTA) may requeue into this placement and wait in the queue again: "
        "the run's preemption and placement budgets allow another placement.",
    )


class Admission(Document):
    """The run's reservation in its team's ledger (``burst.admission``): its planned cost,
    reserved before anything was rented; a requeue keeps it."""

    team: str
    ledger: str | None = None
    reserved_usd: float = Field(ge=0)
    reserved_gpu_hours: float = Field(
        ge=0, description="GPUs rented x budget.max_hours (burst.budget.gpu_hours)."
    )
    compute_usd: float = Field(default=0.0, ge=0)
    egress_usd: float = Field(default=0.0, ge=0)
    storage_usd: float = Field(default=0.0, ge=0)
    requeues: int = Field(default=0, ge=0)
    at: float | None = None

    @classmethod
    def from_entry(cls, entry: Any, ledger: str | None = None) -> Admission:
        """From a ``burst.admission.ledger.Entry`` (taken as a duck: no import upward)."""
        return cls(
            team=entry.team,
            ledger=ledger,
            reserved_usd=entry.reserved_usd,
            reserved_gpu_hours=entry.reserved_gpu_hours,
            compute_usd=entry.compute_usd,
            egress_usd=entry.egress_usd,
            storage_usd=entry.storage_usd,
            requeues=entry.requeues,
            at=entry.at,
        )


class ProvisionDocument(StepDocument):
    """The provision step's document (``status`` failed: written with the error, exit != 0)."""

    status: Literal["provisioned", "failed"] | None = None
    candidate: Candidate | None = None
    attempts: list[ProvisionAttempt] = Field(default_factory=list)
    outputs: dict[str, Any] = Field(
        default_factory=dict, description="The stack's Terraform outputs."
    )
    changes: Changes | None = None
    expires_at: str | None = None
    tags: dict[str, str] = Field(default_factory=dict)
    terraform: TerraformInfo | None = None
    terraform_dir: str | None = None
    failover: Failover | None = None
    refused: list[Refused] = Field(default_factory=list)
    unprovisionable: list[Refused] = Field(
        default_factory=list,
        description="Allowed candidates the selected Terraform stack cannot provision.",
    )
    placement: int | None = Field(
        default=None, ge=0, description="The run's placements before this one."
    )
    recovery: RecoveryRecord | None = None
    decision: DecisionHashes | None = None
    admission: Admission | None = None
