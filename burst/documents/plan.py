"""The plan document: ranked candidates, exclusions, the data strategy and the topology.

Written by the plan step (``burst.plan.placement.plan``, docs/planning.md "The plan
document"); read by provision (the candidates, in order) and train (the candidate's price and
checkpoint interval). A candidate needs its region and provider; the rest is typed and may be
absent in a plan written by hand (tests, an operator's override).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from burst.documents.base import Document, StepDocument
from burst.documents.decision import Reason

#: What a stack applies (``burst.plan.placement.CANDIDATE_CAPACITIES``): the spec's
#: ``spot_with_fallback`` is a policy that yields spot and on_demand candidates, never one.
PlanCapacity = Literal["spot", "on_demand", "spot_with_floor"]
DataStrategyName = Literal["compute_to_data", "data_to_compute", "regional_shards"]


class CostTerm(Document):
    """One named term of a candidate's expected cost (``burst.plan.pricing.cost_terms``)."""

    term: str
    usd: float
    detail: str


class Candidate(Document):
    """One (region, provider, capacity) the job can run in, priced."""

    region: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    capacity: PlanCapacity | None = Field(default=None, description="Absent: the spec's.")
    rank: int | None = Field(default=None, ge=1)
    gpu_type: str | None = None
    instance: str | None = None
    nodes: int | None = Field(default=None, ge=1)
    floor_nodes: int | None = Field(default=None, ge=0)
    gpus: int | None = Field(
        default=None, ge=1, description="GPUs rented and billed (every GPU of every node)."
    )
    gpus_used: int | None = Field(
        default=None, ge=1, description="The spec's compute.gpu_count (fewer: a partial node)."
    )
    billed_per: Literal["instance", "gpu"] | None = Field(
        default=None, description="instance: whole instances of the shape; gpu: per GPU-hour."
    )
    billing: str | None = Field(
        default=None, description="How it is billed in words (a partial node: nearest shapes)."
    )
    price_per_hour: float | None = Field(default=None, ge=0, description="USD, all nodes.")
    price_per_gpu_hour: float | None = Field(default=None, ge=0)
    price_basis: str | None = None
    price_source: str | None = None
    availability: str | None = None
    expected_cost_usd: float | None = None
    expected_hours: float | None = None
    compute_usd: float | None = None
    egress_usd: float | None = None
    storage_usd: float | None = None
    storage_gb: float | None = Field(
        default=None, ge=0, description="Checkpoints kept plus a moved copy of the data."
    )
    orchestration_usd: float | None = None
    labour_usd: float | None = None
    paid_gpu_hours: float | None = Field(
        default=None, description="Billed GPU-hours: gpus x paid hours (burst.budget.gpu_hours)."
    )
    cost_terms: list[CostTerm] = Field(
        default_factory=list, description="Every term of expected_cost_usd, which they sum to."
    )
    data_strategy: DataStrategyName | None = None
    data_transfer_hours: float | None = None
    data_reason: str | None = None
    mtbf_hours: float | None = None
    mtbf_source: str | None = None
    notice_s: float | None = None
    checkpoint_interval_s: float | None = None
    checkpoint_interval_basis: str | None = None
    young_daly_interval_s: float | None = None
    memory_interval_s: float | None = None
    store_interval_s: float | None = None
    store_every: int | None = None
    goodput: float | None = None
    expected_preemptions: float | None = None
    verdict: Literal["allow", "review", "unchecked"] | None = None
    reasons: list[Reason] = Field(default_factory=list)
    within_budget: bool | None = None
    within_deadline: bool | None = None


class Exclusion(Document):
    """A candidate the planner left out, and why."""

    provider: str
    region: str
    capacity: PlanCapacity | None = None
    reason: str
    verdict: Literal["deny"] | None = None
    reasons: list[Reason] | None = None
    expected_cost_usd: float | None = None
    expected_hours: float | None = None


class DataOption(Document):
    """One data strategy for the first candidate (``burst.plan.datastrategy.DataPlan``)."""

    strategy: DataStrategyName
    feasible: bool
    egress_gb: float
    egress_usd: float
    transfer_hours: float
    reason: str
    price_source: str = ""


class DataPlacement(Document):
    """Where the data is and how it meets the compute (the first candidate's strategy)."""

    uri: str
    region: str | None = None
    size_gb: float
    strategy: DataStrategyName
    shards: dict[str, float] | None = None
    sync_gb: float
    sync_rounds: int
    alternatives: list[DataOption] = Field(default_factory=list)


class RegionalSyncPlan(Document):
    """A regional-sync spec's rounds (``burst.plan.regional.plan_regional_sync``, issue 21):
    bytes, egress and sync time per round and over the run, H, and synchronous DP over the
    same regions for the same steps (docs/regional.md "Planning")."""

    strategy: Literal["regional-sync"]
    regions: list[str]
    aggregation_region: str
    links: dict[str, str] = Field(description="Remote region -> seed 002 link class.")
    egress_price_source: str
    local_steps_basis: str
    step_s: float = Field(ge=0, description="One local step (the workload's step time).")
    codec: Literal["int8", "topk", "none"]
    local_steps: int = Field(ge=1, description="H: local steps between syncs.")
    first_local_steps: int | None = Field(
        default=None,
        ge=1,
        description="Adaptive rounds: the first round's H, doubling up to local_steps "
        "(burst.regional.rounds); null: every round H.",
    )
    rounds_basis: str | None = Field(
        default=None,
        description="Where the round schedule comes from: the spec's first_local_steps or the "
        "planner's choice (absent in plans written before issue 31's schedule).",
    )
    schedule: str | None = Field(
        default=None,
        description="Every round's inner steps, runs counted ('5, 10, 20 x 4, 7').",
    )
    rounds: int = Field(ge=1)
    delta_bytes: int = Field(ge=0, description="One compressed delta (payload).")
    bytes_per_round: int = Field(ge=0, description="Bytes crossing regions in one round.")
    egress_usd_per_round: float = Field(ge=0)
    sync_s_per_round: float = Field(ge=0, description="Upload then download, not overlapped.")
    max_sync_fraction: float = Field(gt=0)
    bytes_over_run: float = Field(ge=0)
    egress_usd_over_run: float = Field(ge=0)
    wall_s: float = Field(ge=0, description="steps x step_s + rounds x sync_s_per_round.")
    sync_dp_bytes: float = Field(ge=0)
    sync_dp_egress_usd: float = Field(ge=0)
    sync_dp_wall_s: float = Field(ge=0)
    bytes_ratio: float = Field(ge=0, description="regional / synchronous DP.")
    wall_ratio: float = Field(ge=0, description="regional / synchronous DP.")
    outer_optimizer: Literal["nesterov", "sgd"] | None = None
    outer_lr: float | None = Field(default=None, gt=0, description="The outer lr the run uses.")
    outer_momentum: float | None = Field(default=None, ge=0, lt=1)
    outer_basis: str | None = Field(
        default=None, description="The spec, or the measured table's cell (regions, H)."
    )
    expected_loss_ratio: float | None = Field(
        default=None,
        gt=0,
        description="Held-out loss / synchronous DP's at equal tokens, as measured for this "
        "outer setting at the table's nearest (regions, H); null: not measured.",
    )


class Topology(Document):
    span: str
    parallelism: str
    reason: str


class Workload(Document):
    """``burst.plan.workload.Workload``: the job's compute and checkpoint costs."""

    compute_s: float
    step_s: float
    basis: str
    checkpoint_gb: float
    checkpoint_cost_s: float
    upload_s: float
    compute_hours: float


class CatalogFact(Document):
    value: float | int | str | bool | None
    source: str
    date: str | None = None


class CatalogUsed(Document):
    files: list[str]
    assumptions: dict[str, CatalogFact]


class Simulation(Document):
    seed: int
    replicas: int


class PlanDocument(StepDocument):
    """The plan step's document (also ``burst plan --json``)."""

    spec_sha256: str | None = None
    objective: Literal["cost", "time"] | None = None
    budget_usd: float | None = None
    deadline_hours: float | None = None
    gpu_type: str | None = None
    gpu_count: int | None = None
    workload: Workload | None = None
    data: DataPlacement | None = None
    candidates: list[Candidate] = Field(description="Best first.")
    excluded: list[Exclusion] = Field(default_factory=list)
    topology: Topology | None = None
    regional: RegionalSyncPlan | None = Field(
        default=None, description="Only for training.strategy regional-sync."
    )
    catalog: CatalogUsed | None = None
    simulation: Simulation | None = None
    decision_record: str | None = Field(default=None, description="given, or none (unchecked)")
