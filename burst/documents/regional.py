"""A regional-sync run's documents (docs/regional.md): the ``aggregate`` step's document (every
round it committed, the final weights' digest) and the run report's regional section
(``RunReport.regional``: rounds, bytes per round, egress cost, staleness and loss per round,
the regions provisioned and torn down), which ``burst.obs.report.build_report`` fills from the
region branches' documents, the aggregate step's and the link log."""

from __future__ import annotations

from pydantic import Field

from burst.documents.base import Detail, Document, StepDocument


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


class AggregateDocument(StepDocument):
    """The ``aggregate`` step's document (the aggregator of a regional-sync run): every
    round it committed and the final global weights' digest."""

    final_round: int
    rounds: list[RegionalRound]
    final_weights_sha256: str


class RegionAttempts(Detail):
    region: str
    role: str  # worker (the region's train step) | aggregator (the aggregate step)
    attempts: int
    exit_codes: list[int]


class LinkTransfer(Detail):
    """One transfer of the link emulator's log (``links.jsonl`` of a local regional run)."""

    src: str
    dst: str
    kind: str  # what moved: delta, update, global, shard, ...
    bytes: int
    usd: float
    seconds: float
    round: int | None = None


class LinkTotals(Detail):
    bytes_crossing: int  # every byte that crossed a region boundary
    bytes_by_kind: dict[str, int]  # crossing bytes by what moved (delta, update, global, ...)
    shard_bytes_crossing: int  # must be 0: no byte of a shard leaves its region
    egress_usd: float
    link_seconds: float  # emulated transfer seconds, summed over transfers
    transfers: int


class RegionalMeasures(Document):
    """What only the machine that ran a regional run measured, handed to the report builder:
    the link emulator's transfers, and the rounds the aggregator committed as its own store
    holds them (a run whose ``aggregate`` step wrote no document)."""

    transfers: list[LinkTransfer] = Field(default_factory=list)
    committed: list[RegionalRound] = Field(default_factory=list)
    stores: str = "dir"  # s3: one S3 server a region, keys of its own; dir: directories
    terraform: bool = False  # a Terraform stack applied and destroyed each region


class RegionalSection(Document):
    """``report.json``'s ``regional``: a regional-sync run's regions, rounds and links."""

    regions: list[str]
    aggregation_region: str
    local_steps: int | None = Field(
        default=None, description="H: what the regions' train steps ran (None: no plan yet)."
    )
    local_steps_basis: str | None = None  # the spec's H, or the planner's pick and its basis
    rounds_planned: int | None = None
    rounds_completed: int = 0
    codec: str
    rounds: list[RegionalRound] = Field(default_factory=list)
    bytes_per_round: float = 0.0  # crossing bytes / completed rounds
    links: LinkTotals | None = Field(
        default=None, description="What crossed regions (the link log of a local run)."
    )
    attempts: list[RegionAttempts] = Field(
        default_factory=list, description="Each region's train (worker) and aggregate pods."
    )
    provisioned: list[str] = Field(
        default_factory=list, description="Regions whose provisioning began."
    )
    torn_down: list[str] = Field(
        default_factory=list,
        description="Regions whose teardown proved them empty (teardown-<region>.json).",
    )
    stores: str = "dir"
    terraform: bool = False
