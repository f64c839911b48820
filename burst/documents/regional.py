"""The report of a regional-sync run (``burst run`` of a ``strategy: regional-sync`` spec):
rounds, bytes per round, egress cost, staleness and loss per round (docs/regional.md)."""

from __future__ import annotations

from pydantic import Field

from burst.documents.base import Detail, Document
from burst.documents.report import ContainerRun, WorkflowResult


class RegionalRound(Detail):
    """One aggregation round, as the aggregator committed it."""

    round: int
    accepted: list[str]
    dropped: list[str]
    late: list[str]
    staleness: dict[str, int]  # rounds each read delta lagged
    # region -> round of a late delta replaced by a newer one before it was read
    superseded: dict[str, int] = Field(default_factory=dict)
    tokens: int
    delta_bytes: int  # compressed deltas received (payload)
    update_bytes: int  # the compressed update, once (each worker fetches it)
    loss: float | None  # token-weighted mean of the accepted workers' training loss
    loss_by_region: dict[str, float]
    # measured on the link log: every byte that crossed regions while this round was worked
    # on (deltas up, the update or a global checkpoint down, manifests included)
    bytes_crossing: int | None = None


class RegionAttempts(Detail):
    region: str
    role: str  # worker | aggregator
    attempts: int
    exit_codes: list[int]


class LinkTotals(Detail):
    bytes_crossing: int  # every byte that crossed a region boundary
    bytes_by_kind: dict[str, int]  # crossing bytes by what moved (delta, update, global, ...)
    shard_bytes_crossing: int  # must be 0: no byte of a shard leaves its region
    egress_usd: float
    link_seconds: float  # emulated transfer seconds, summed over transfers
    transfers: int


class RegionalReport(Document):
    run_id: str
    status: str  # succeeded | failed
    exit_code: int
    regions: list[str]
    aggregation_region: str
    local_steps: int
    local_steps_basis: str | None = None  # the spec's H, or the planner's pick and its basis
    rounds_planned: int
    rounds_completed: int
    codec: str
    rounds: list[RegionalRound]
    bytes_per_round: float  # crossing bytes / completed rounds
    links: LinkTotals
    attempts: list[RegionAttempts]
    provisioned: list[str]
    torn_down: list[str]  # regions whose teardown proved them empty (teardown-<region>.json)
    stores: str = "dir"  # s3: one S3 server a region, keys of its own; dir: directories
    terraform: bool = False  # a Terraform stack applied and destroyed a region
    final_weights_sha256: str | None = None
    failure: str | None = None
    seconds: float
    # the template the local runner executed and how the workflow ended (as burst-train's)
    workflow: WorkflowResult | None = None
    containers: ContainerRun | None = None  # burst run --containers: each pod's image digest
