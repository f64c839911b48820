"""The job spec: ``BurstJob``, loaded from YAML, validated with pydantic v2.

Every problem is reported with its field path and the line of the YAML it comes from, so
``burst validate`` can print one line per problem and exit 2 (see ``SpecError``).
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections.abc import Mapping
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic import Strict as StrictType
from pydantic_core import ErrorDetails

from burst.errors import BadInputError, SpecError
from burst.inputs import parse_yaml, read_text, short
from burst.yamllines import line_for, line_index

S3_URI_RE = re.compile(r"^s3://[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]([/?].*)?$")
DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


# Numbers in a spec are strict (``true`` is not 1, ``"8"`` is not 8) and finite, and every
# numeric field has bounds that make sense: a value outside is one line at load time, never
# a hang or an overflow deep inside the plan or the trainer.
Int = Annotated[int, StrictType()]
Float = Annotated[float, StrictType(), Field(allow_inf_nan=False)]
SEED_MAX = 2**32 - 1  # numpy's seeds are 32-bit
STEPS_MAX = 10**9
GB_MAX = 1e7  # 10 PB
STR_MAX = 4096  # characters in any text field
# The tags every resource carries (owner, team, cost centre) must be valid tag values on every
# provider, or the apply fails after renting started: AWS allows at most 256 letters, digits,
# spaces and _ . : / = + - @ (docs.aws.amazon.com/tag-editor/latest/userguide/tagging.html,
# "Tag naming limits"); GCP labels are normalised from them by the stack. Not blank.
TAG_VALUE_RE = r"^[\p{L}\p{N}_.:/=+\-@][\p{L}\p{Z}\p{N}_.:/=+\-@]*$"
TAG_MAX = 256
# Characters no field may hold: C0/C1 controls (a newline or NUL in a URI or a tag breaks the
# tools it is passed to) and the bidirectional overrides that make text read other than it is.
_INVISIBLE = {
    *range(0x00, 0x20),
    *range(0x7F, 0xA0),
    *range(0x202A, 0x202F),
    *range(0x2066, 0x206A),
}


def _hidden_character(value: Any) -> str | None:
    """The first control or bidi-override character in a string (keys and items too)."""
    if isinstance(value, str):
        for ch in value:
            if ord(ch) in _INVISIBLE:
                return f"U+{ord(ch):04X}"
        return None
    if isinstance(value, dict):
        for k, v in value.items():
            found = _hidden_character(k) or _hidden_character(v)
            if found:
                return found
    if isinstance(value, list | tuple):
        for item in value:
            found = _hidden_character(item)
            if found:
                return found
    return None


class Strict(BaseModel):
    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        frozen=True,
        use_enum_values=True,
        allow_inf_nan=False,
        str_max_length=STR_MAX,
    )

    @field_validator("*", mode="before")
    @classmethod
    def _no_hidden_characters(cls, v: Any) -> Any:
        found = _hidden_character(v)
        if found:
            raise ValueError(f"contains the control character {found} (not allowed in a spec)")
        return v


class DataClass(StrEnum):
    public = "public"
    internal = "internal"
    confidential = "confidential"
    personal = "personal"
    sensitive_personal = "sensitive_personal"
    health = "health"
    government = "government"
    export_controlled = "export_controlled"


class Capacity(StrEnum):
    spot = "spot"
    on_demand = "on_demand"
    spot_with_fallback = "spot_with_fallback"


class Priority(StrEnum):
    low = "low"
    normal = "normal"
    high = "high"
    critical = "critical"


class Organization(Strict):
    """Who rents: export controls look at where the customer (and its ultimate parent) is based."""

    name: str = Field(min_length=1, description="Legal name of the renting organisation.")
    headquarters: str = Field(
        pattern=r"^[A-Z]{2}$", description="ISO 3166-1 alpha-2 country of the headquarters."
    )
    parent_headquarters: str | None = Field(
        default=None,
        pattern=r"^[A-Z]{2}$",
        description="Country of the ultimate parent's headquarters, when there is a parent.",
    )


class Data(Strict):
    uri: str = Field(
        min_length=1,
        description="Where the training data lives (s3://, file://; a relative file:// path is "
        "relative to the working directory burst runs in).",
    )
    size_gb: Float = Field(
        ge=0, le=GB_MAX, description="Dataset size in GB (decides the data strategy)."
    )
    classification: DataClass = Field(description="The most sensitive class in the dataset.")
    origin: str = Field(
        pattern=r"^[A-Z]{2}(-[A-Z]{2,5})?$",
        description="Jurisdiction the data comes from (ISO country, or e.g. AE-DIFC, EU).",
    )
    region: str | None = Field(
        default=None, description="Cloud region where the data is stored today, if any."
    )
    shards: dict[str, Annotated[Float, Field(ge=0, le=GB_MAX)]] | None = Field(
        default=None,
        max_length=64,
        description="The dataset split over regions (region: GB), when it is; lets the plan "
        "choose training on regional shards. Default: all of size_gb in data.region.",
    )
    transfer_safeguards: list[str] = Field(
        default_factory=list,
        max_length=64,
        description="Transfer safeguards on record (e.g. scc, bcr, consent, tia, cbpr).",
    )

    @field_validator("uri")
    @classmethod
    def _uri_scheme(cls, v: str) -> str:
        if not re.match(r"^(s3://[^/?#]|file://.)", v):
            raise ValueError("must be s3://BUCKET[/PREFIX] or file://PATH")
        return v

    @field_validator("shards")
    @classmethod
    def _shards_match_the_dataset(
        cls, v: dict[str, float] | None, info: ValidationInfo
    ) -> dict[str, float] | None:
        if v is None:
            return v
        if not v:
            raise ValueError("lists no region (leave it out when the data is not split)")
        size, region = info.data.get("size_gb"), info.data.get("region")
        total = sum(v.values())
        if isinstance(size, float | int) and abs(total - size) > max(1e-6, 0.01 * size):
            raise ValueError(f"add up to {total:g} GB, but data.size_gb is {size:g}")
        if isinstance(region, str) and region not in v:
            raise ValueError(f"hold nothing in data.region {region!r}, where the data is")
        return v


class ModelInfo(Strict):
    parameters: Float = Field(ge=1, le=1e15, description="Parameter count.")
    trainable_fraction: Float = Field(
        default=1.0,
        gt=0,
        le=1,
        description="Fraction of parameters trained (fine-tunes < 1).",
    )
    weights: Literal["open", "closed"] = Field(
        default="open", description="Whether the weights are published (open) or not (closed)."
    )
    training_ops: Float | None = Field(
        default=None,
        ge=0,
        le=1e32,
        description="Total training operations (for export classes, 1e26).",
    )
    export_sensitivity: Literal["none", "dual_use", "controlled"] = Field(
        default="none", description="Export sensitivity of the model as classified by the owner."
    )


class RecoveryStrategyName(StrEnum):
    failover = "failover"
    eager_next_region = "eager_next_region"


class Recovery(Strict):
    """How a run recovers from lost capacity, lost nodes and killed train processes
    (``burst.recovery``; docs/preemption.md "Recovery")."""

    strategy: RecoveryStrategyName = Field(
        default=RecoveryStrategyName.failover,
        description="failover: retry train in its placement preemptions_per_region times, "
        "then requeue; eager_next_region: requeue at the first loss. A requeue goes to the "
        "plan's next candidate after the one train ran in, another region first.",
    )
    preemptions_per_region: Int = Field(
        default=3,
        ge=0,
        le=100,
        description="failover: train retries in one placement after a preemption, a lost "
        "node or a checkpoint store down, before it is requeued (eager_next_region: 0).",
    )
    max_placements: Int = Field(
        default=3, ge=1, le=64, description="How many of the plan's candidates train may run in."
    )
    on_demand_after: Int | None = Field(
        default=None,
        ge=1,
        le=10_000,
        description="After this many spot nodes lost, requeue on-demand candidates first.",
    )
    probe_interval_s: Float | None = Field(
        default=None,
        ge=60,
        le=86_400,
        description="On an on-demand fallback (on_demand_after), probe spot this often, at "
        "checkpoint boundaries, and move back when the saving exceeds the move's cost "
        "(burst.recovery.back_to_spot; docs/preemption.md, Back to spot). None: never "
        "(a probe needs ec2:GetSpotPlacementScores on AWS).",
    )
    move_margin: Float = Field(
        default=0.1,
        ge=0,
        le=10,
        description="Back to spot: the saving must exceed the move's cost by this share of "
        "what staying on demand would cost.",
    )
    max_restarts_on_kill: Int = Field(
        default=3,
        ge=0,
        le=100,
        description="Train killed by a signal (exit 137: the OOM killer, a kubelet after the "
        "grace period, an operator) restarts in its placement from the last committed "
        "checkpoint at most this many times per run; then the run fails (0: at once).",
    )
    max_preemptions: Int | None = Field(
        default=None,
        ge=0,
        le=100_000,
        description="Preemptions the run recovers from in all (a provider's notice, a lost "
        "node, a control-plane eviction); then it fails. None: unlimited. Kept apart from "
        "max_failures, so a spot-heavy day never spends the retries meant for crashes; a "
        "cancel counts in neither.",
    )
    max_failures: Int = Field(
        default=3,
        ge=0,
        le=100,
        description="Failures the run recovers from in all (train killed, crashed, a rank "
        "lost, its checkpoint store down past its window); then it fails (0: at once).",
    )


class Compute(Strict):
    gpu_type: str = Field(min_length=1, description="GPU type from the catalog (e.g. rubin, h100).")
    gpu_count: Int = Field(ge=1, le=4096, description="GPUs in all.")
    gpus_per_node: Int = Field(default=8, ge=1, le=16, description="GPUs per node.")
    capacity: Capacity = Field(default=Capacity.spot_with_fallback, description="Capacity type.")
    regions: list[str] = Field(
        min_length=1,
        max_length=64,
        description="Candidate regions: the plan ranks them by its objective (cost by "
        "default); the listed order breaks ties (docs/planning.md).",
    )
    providers: list[str] = Field(
        min_length=1, max_length=16, description="Candidate providers (aws, gcp, ...)."
    )
    mtbf_hours: Float | None = Field(
        default=None,
        ge=1e-4,
        le=1e5,
        description="Override the catalog's mean time between preemptions.",
    )
    recovery: Recovery = Field(
        default_factory=Recovery,
        description="Recovery after lost capacity, preemption, node loss or a killed train.",
    )

    @field_validator("regions", "providers")
    @classmethod
    def _unique(cls, v: list[str]) -> list[str]:
        twice = sorted({x for x in v if v.count(x) > 1})
        if twice:
            raise ValueError(f"lists {twice[0]!r} twice")
        return v


class MemoryTiers(Strict):
    """Checkpoints held in this node's and another node's memory before the object store
    (docs/checkpoints.md, "Tiers")."""

    enabled: bool = Field(
        default=False,
        description="Each node runs a peer memory server; every save goes to this node's and "
        "the next node's memory first, the store every store_every saves; a restore reads "
        "local, then peer, then store.",
    )
    capacity: str = Field(
        default="8G",
        description="Bytes each node's peer server holds at most (e.g. 512M, 8G): the "
        "newest checkpoint of each rank it serves must fit.",
    )
    store_every: Int | Literal["auto"] = Field(
        default="auto",
        description="Every how many saves also go to the store, or auto (the plan's per-tier "
        "Young/Daly: store_interval_s / memory_interval_s; 1 with one node).",
    )

    @field_validator("store_every")
    @classmethod
    def _every(cls, v: int | str) -> int | str:
        if isinstance(v, int) and not 1 <= v <= 10**6:
            raise ValueError("must be from 1 to 1000000, or 'auto'")
        return v

    @field_validator("capacity")
    @classmethod
    def _size(cls, v: str) -> str:
        # the peer server's own syntax (burst.checkpoint.peer.parse_size)
        m = re.fullmatch(r"\s*(\d+)\s*([KMGT]?)(?:I?B)?\s*", v.upper())
        if m is None:
            raise ValueError(f"{v!r} is not a number of bytes (e.g. 512M, 8G)")
        size = int(m.group(1)) << (10 * " KMGT".index(m.group(2) or " "))
        if size < 1 << 20:
            raise ValueError(f"{v!r} is less than 1M: no checkpoint fits")
        return v


class CheckpointPolicy(Strict):
    interval_steps: Annotated[Int, Field(le=STEPS_MAX)] | Literal["auto"] = Field(
        default="auto", description="Steps between checkpoints, or auto (Young/Daly)."
    )
    full_every: Int = Field(
        default=2,
        ge=1,
        le=10**6,
        description="Every Nth checkpoint is a full one.",
    )
    keep_full: Int = Field(default=2, ge=1, le=1000, description="Full checkpoints kept.")
    keep_weights: Int = Field(
        default=3,
        ge=0,
        le=1000,
        description="Weights-only checkpoints kept.",
    )
    expect_within_s: Float = Field(
        default=1800,
        gt=0,
        le=7 * 86400,
        description="training.command only: seconds within which the program is expected to "
        "save a complete checkpoint (from its start, and after each one); when none comes, a "
        "warning in the log and the report.",
    )
    memory_tiers: MemoryTiers = Field(
        default_factory=MemoryTiers,
        description="Memory tiers: this node's and a peer node's RAM before the store.",
    )

    @field_validator("interval_steps")
    @classmethod
    def _positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1, or 'auto'")
        return v


class OuterOptimizerSettings(Strict):
    """The aggregator's outer optimizer (DiLoCo, arXiv 2311.08105: Nesterov). A null lr or
    momentum is the measured table's for the run's regions and H
    (``burst.regional.defaults``, docs/regional.md "Outer defaults")."""

    optimizer: Literal["nesterov", "sgd"] = Field(
        default="nesterov",
        description="nesterov (DiLoCo's choice) or sgd (plain heavy-ball momentum).",
    )
    lr: Float | None = Field(
        default=None,
        gt=0,
        le=10,
        description="Outer learning rate. null: the measured table's for the regions and H.",
    )
    momentum: Float | None = Field(
        default=None,
        ge=0,
        lt=1,
        description="Outer momentum. null: the measured table's for the regions and H.",
    )


class CompressionSettings(Strict):
    """How a worker's pseudo-gradient is compressed before it leaves its region."""

    codec: Literal["int8", "topk", "none"] = Field(
        default="int8",
        description="int8 (block-wise scale), topk (largest values, error feedback) or none.",
    )
    block_size: Int = Field(
        default=256, ge=1, le=2**20, description="Values sharing one int8 scale."
    )
    topk_fraction: Float = Field(
        default=0.01, gt=0, le=1, description="Share of values topk sends each round."
    )


class RegionalSync(Strict):
    """Hybrid cross-region training: one worker per region trains on its own shard for
    ``local_steps`` steps, then only compressed pseudo-gradients cross regions
    (docs/regional.md)."""

    regions: list[Annotated[str, Field(min_length=1, max_length=64)]] | None = Field(
        default=None,
        max_length=64,
        description="Regions that run a worker. Default: the keys of data.shards; each must "
        "be one.",
    )
    aggregation_region: str | None = Field(
        default=None,
        min_length=1,
        description="Region of the aggregator, which holds the global checkpoints. "
        "Default: the first region.",
    )
    local_steps: Int | None = Field(
        default=None,
        ge=1,
        le=STEPS_MAX,
        description="Inner steps between synchronisations (H). null: the planner picks it.",
    )
    first_local_steps: Int | None = Field(
        default=None,
        ge=1,
        le=STEPS_MAX,
        description="Adaptive rounds: the first round's inner steps; each later round doubles "
        "it, up to local_steps (local_steps or more: every round local_steps). null: the planner "
        "picks it: the shortest round whose sync stays under sync_fraction of its compute, "
        "when that is below local_steps, else every round local_steps.",
    )
    sync_fraction: Float = Field(
        default=0.1,
        gt=0,
        le=1,
        description="The planner keeps sync time under this fraction of compute time.",
    )
    outer: OuterOptimizerSettings = Field(default_factory=OuterOptimizerSettings)
    compression: CompressionSettings = Field(default_factory=CompressionSettings)
    round_deadline_s: Float = Field(
        default=600,
        gt=0,
        le=86400,
        description="The aggregator waits for every worker or this many seconds a round.",
    )
    max_staleness: Int = Field(
        default=0,
        ge=0,
        le=10**6,
        description="Rounds a delta may lag and still count; older deltas are dropped.",
    )


#: the signals a spec may choose to tell its program of a notice (``training.notice_signal``)
NOTICE_SIGNALS = ("SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT")


class Training(Strict):
    # exactly one of entrypoint and command (the schema says so too)
    model_config = ConfigDict(
        **Strict.model_config,
        json_schema_extra={"not": {"required": ["entrypoint", "command"]}},
    )

    entrypoint: str = Field(
        default="burst.train.example:build",
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="module:function that builds the model, optimizer and data: burst owns the "
        "loop (bit-identical resume; docs/training.md). Not with command.",
    )
    command: list[Annotated[str, Field(min_length=1)]] | None = Field(
        default=None,
        min_length=1,
        max_length=1024,
        description="Your own training program, an argv list run without a shell (e.g. "
        "[python, train.py, --lr, '3e-4']): any framework; it saves into $BURST_CHECKPOINT_DIR "
        "and burst commits what it saves (docs/your-training.md). Not with entrypoint.",
    )
    launcher: Literal["none", "torchrun"] = Field(
        default="none",
        description="training.command only: torchrun starts processes_per_node copies of the "
        "command on each node (none: the command is started once a node, as written).",
    )
    notice_signal: str = Field(
        default="SIGUSR1",
        description="training.command only: the signal the program receives on a preemption "
        f"notice ({', '.join(NOTICE_SIGNALS)}), with $BURST_NOTICE_FILE written first.",
    )
    steps: Int = Field(ge=1, le=STEPS_MAX, description="Optimizer steps in all.")
    seed: Int = Field(
        default=0,
        ge=0,
        le=SEED_MAX,
        description="Seed for torch, numpy and python RNGs.",
    )
    batch_size: Int = Field(default=16, ge=1, le=10**7)
    learning_rate: Float = Field(default=1e-3, gt=0, le=100)
    engine: Literal["torch", "deepspeed", "fsdp2"] = Field(
        default="torch",
        description=(
            "torch (one rank, or DDP with several), deepspeed (ZeRO stage zero_stage), or "
            "fsdp2 (torch fully_shard: parameters and optimizer state sharded over at least "
            "2 ranks)."
        ),
    )
    zero_stage: Int = Field(
        default=2,
        ge=0,
        le=3,
        description="DeepSpeed ZeRO stage (engine: deepspeed only).",
    )
    step_seconds: Float | None = Field(
        default=None,
        ge=1e-6,
        le=86400,
        description="Measured seconds per step on the target GPUs (planning).",
    )
    tokens_per_sample: Int = Field(
        default=2048,
        ge=1,
        le=10**8,
        description="Tokens (or positions) per sample (planning estimate).",
    )
    nodes: Int = Field(
        default=1,
        ge=1,
        le=512,
        description="Nodes the train step runs on (ranks: nodes x processes_per_node).",
    )
    processes_per_node: Int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Ranks on each node (one per GPU on GPU nodes). With more than one rank in all the "
            "train step runs under torchrun, data-parallel; `burst run` runs every rank here."
        ),
    )
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)
    strategy: Literal["single-region", "regional-sync"] = Field(
        default="single-region",
        description="single-region (default) or regional-sync: a worker per data.shards region, "
        "synchronised by compressed pseudo-gradients (docs/regional.md).",
    )
    regional_sync: RegionalSync | None = Field(
        default=None,
        description="Settings of strategy regional-sync (required then, refused otherwise).",
    )

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node

    @property
    def own_program(self) -> bool:
        """The user's own program (``command``) rather than burst's loop (``entrypoint``)."""
        return self.command is not None

    @field_validator("notice_signal")
    @classmethod
    def _known_signal(cls, v: str) -> str:
        if v not in NOTICE_SIGNALS:
            raise ValueError(f"must be one of {', '.join(NOTICE_SIGNALS)}")
        return v

    @model_validator(mode="after")
    def _entrypoint_or_command(self) -> Training:
        if self.command is None:
            if self.launcher != "none":
                raise ValueError("launcher applies to training.command only (set command)")
            return self
        if "entrypoint" in self.model_fields_set:
            raise ValueError(
                "set entrypoint (burst's loop) or command (your own program), not both"
            )
        if self.strategy != "single-region":
            raise ValueError("strategy regional-sync needs training.entrypoint, not command")
        if self.engine != "torch":
            raise ValueError(
                "engine applies to training.entrypoint only: your command runs its own engine"
            )
        return self

    @model_validator(mode="after")
    def _fsdp2_shards_over_ranks(self) -> Training:
        if self.engine == "fsdp2" and self.world_size < 2:
            raise ValueError(
                "engine fsdp2 shards the model over ranks: it needs nodes x processes_per_node "
                f">= 2 (here {self.world_size}); use engine: torch for one rank"
            )
        return self

    @model_validator(mode="after")
    def _memory_tiers_where_restored(self) -> Training:
        tiers = self.checkpoint.memory_tiers
        if not tiers.enabled:
            return self
        if self.own_program or self.strategy != "single-region" or self.engine != "torch":
            what = (
                "training.command"
                if self.own_program
                else f"strategy {self.strategy}"
                if self.strategy != "single-region"
                else f"engine {self.engine}"
            )
            raise ValueError(
                f"checkpoint.memory_tiers: burst's loop with engine torch only, not {what} "
                "(its restores read the store only); set enabled: false"
            )
        return self


class Budget(Strict):
    max_usd: Float = Field(
        ge=0.01, le=1e9, description="Refuse or stop a run whose cost exceeds this."
    )
    max_hours: Float = Field(
        ge=0.01, le=8760, description="Wall-clock limit (the workflow deadline), at most a year."
    )


class Image(Strict):
    reference: str = Field(description="Training image, pinned by digest (repo@sha256:...).")
    trusted_key: str = Field(min_length=1, description="Name of a key in policies/keys/.")

    @field_validator("reference")
    @classmethod
    def _pinned(cls, v: str) -> str:
        if not DIGEST_RE.search(v):
            raise ValueError("must be pinned by digest (name@sha256:<64 hex>), not a tag")
        return v


class Storage(Strict):
    checkpoint_uri: str = Field(
        description="Checkpoint store: s3://bucket/prefix, or file://path (a relative path is "
        "under the runs root: $BURST_RUNS_ROOT, ./runs by default, the runs volume in a pod; "
        "never beside the spec).",
    )
    replica_uri: str | None = Field(default=None, description="Second store to replicate to.")
    kms_key_id: str | None = Field(default=None, description="SSE-KMS key for S3 stores.")

    @field_validator("checkpoint_uri", "replica_uri")
    @classmethod
    def _scheme(cls, v: str | None) -> str | None:
        return v if v is None else _check_uri(v)

    @field_validator("replica_uri")
    @classmethod
    def _a_second_store(cls, v: str | None, info: ValidationInfo) -> str | None:
        primary = info.data.get("checkpoint_uri")
        if v is None or not isinstance(primary, str):
            return v
        a, b = _store_root(primary), _store_root(v)
        if a == b:
            raise ValueError("is the checkpoint store itself: a replica must be a second store")
        if b.startswith(a + "/") or a.startswith(b + "/"):
            raise ValueError(
                "overlaps storage.checkpoint_uri (one is inside the other): a replica must "
                "be a second store"
            )
        return v


def _check_uri(v: str) -> str:
    """A data or store URI: s3://BUCKET[/PREFIX] or file://PATH (what burst can read)."""
    if not re.match(r"^(s3|file)://.+", v):
        raise ValueError("must start with s3:// or file://")
    if v.startswith("s3://") and not S3_URI_RE.match(v):
        raise ValueError(
            "must be s3://BUCKET[/PREFIX] with a bucket name (3-63 lowercase letters, "
            "digits, dots, hyphens)"
        )
    return v


def _store_root(uri: str) -> str:
    """A store URI normalised for comparison (no trailing slash, no ``.`` or ``..``)."""
    scheme, _, rest = uri.partition("://")
    rest = rest.split("?", 1)[0]
    if scheme == "file" and not rest.startswith("/"):
        from burst.settings import current

        # relative to the runs root, as a run resolves it (burst.storage.location.store_url)
        rest = str(current().runs_root.resolve() / rest)
    norm = posixpath.normpath(rest) if rest else rest
    return f"{scheme}://{norm.rstrip('/')}"


class BurstJob(Strict):
    """A burst training job: what to train, on what, where it may go, and at what cost."""

    api_version: Literal["burst/v1"] = Field(default="burst/v1", alias="apiVersion")
    name: str = Field(pattern=NAME_RE, description="DNS-style name, at most 40 characters.")
    owner: str = Field(
        pattern=TAG_VALUE_RE, max_length=TAG_MAX, description="Person responsible (becomes a tag)."
    )
    team: str = Field(
        pattern=TAG_VALUE_RE,
        max_length=TAG_MAX,
        description="Team (a tag; also the GPU quota semaphore).",
    )
    cost_centre: str = Field(
        pattern=TAG_VALUE_RE, max_length=TAG_MAX, description="Cost centre (a tag)."
    )
    priority: Priority = Field(default=Priority.normal)
    experiment: str | None = Field(default=None, description="Experiment label for metrics.")
    organization: Organization
    data: Data
    model: ModelInfo
    compute: Compute
    training: Training
    budget: Budget
    image: Image
    storage: Storage

    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        frozen=True,
        use_enum_values=True,
        populate_by_name=True,
        allow_inf_nan=False,
        str_max_length=STR_MAX,
    )

    @field_validator("training")
    @classmethod
    def _regional_sync_fits_the_data(cls, v: Training, info: ValidationInfo) -> Training:
        data = info.data.get("data")
        shards = data.shards if isinstance(data, Data) else None
        return resolve_regional_sync(v, shards)

    def tags(self, run_id: str, expires_at: str) -> dict[str, str]:
        """The tags every resource of a run carries."""
        return {
            TAG_RUN_ID: run_id,
            TAG_EXPIRES_AT: expires_at,
            TAG_OWNER: self.owner,
            TAG_TEAM: self.team,
            TAG_COST_CENTRE: self.cost_centre,
            TAG_PRIORITY: str(self.priority),
        }

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


def resolve_regional_sync(training: Training, shards: Mapping[str, float] | None) -> Training:
    """Check training.strategy against training.regional_sync and data.shards, and fill in the
    defaults that depend on the data (regions, aggregation_region). One ValueError, naming the
    field, for the first mistake."""
    rs = training.regional_sync
    if training.strategy != "regional-sync":
        if rs is not None:
            raise ValueError(
                "regional_sync is set, but strategy is not regional-sync "
                "(set strategy: regional-sync, or leave regional_sync out)"
            )
        return training
    if rs is None:
        raise ValueError("strategy regional-sync needs training.regional_sync (see `burst schema`)")
    if not shards:
        raise ValueError(
            "strategy regional-sync needs data.shards (region: GB), one worker per region"
        )
    if training.engine != "torch" or training.world_size != 1:
        raise ValueError(
            "strategy regional-sync runs one torch process per region for now "
            "(engine: torch, nodes: 1, processes_per_node: 1)"
        )
    regions = list(rs.regions) if rs.regions is not None else list(shards)
    for region in regions:
        if region not in shards:
            raise ValueError(
                f"regional_sync.regions names {region!r}, which is not a region of data.shards "
                f"({', '.join(sorted(shards))})"
            )
    if len(set(regions)) != len(regions):
        raise ValueError("regional_sync.regions names a region twice")
    if len(regions) < 2:
        raise ValueError(
            "regional_sync needs at least two regions (one region is strategy single-region)"
        )
    aggregation = rs.aggregation_region if rs.aggregation_region is not None else regions[0]
    if aggregation not in regions:
        raise ValueError(
            f"regional_sync.aggregation_region {aggregation!r} is not one of "
            f"regional_sync.regions ({', '.join(regions)})"
        )
    if rs.local_steps is not None and rs.local_steps > training.steps:
        raise ValueError(
            f"regional_sync.local_steps ({rs.local_steps}) is more than training.steps "
            f"({training.steps}): not one round would complete"
        )
    resolved = rs.model_copy(update={"regions": regions, "aggregation_region": aggregation})
    return training.model_copy(update={"regional_sync": resolved})


# --------------------------------------------------------------------------- loading


def _describe(err: ErrorDetails) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field (not part of the spec; see `burst schema`)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if kind == "string_pattern_mismatch" and (err.get("ctx") or {}).get("pattern") == TAG_VALUE_RE:
        msg = (
            "must be a cloud tag value: letters, digits, spaces and _ . : / = + - @ only, "
            "not starting with a space (AWS tag rules)"
        )
    if (
        "input" in err
        and kind not in ("model_type", "dict_type")
        and not isinstance(err["input"], dict | list)
    ):
        msg += f" (got {short(err['input'])})"
        if kind == "string_type" and isinstance(err["input"], bool):
            # YAML 1.1 reads yes/no/on/off (any case) as booleans: `headquarters: NO` (Norway)
            msg += "; YAML reads yes/no/on/off as true/false: quote the value"
    return msg


def parse_spec(text: str, source: str = "<spec>") -> BurstJob:
    """Parse and validate spec text. Raises SpecError with one line per problem."""
    try:
        data = parse_yaml(text, source, what="spec")
    except BadInputError as exc:
        raise SpecError([exc.one_line()]) from None
    if not isinstance(data, dict):
        raise SpecError([f"{source}:1: a spec must be a YAML mapping of fields"])
    try:
        return BurstJob.model_validate(data)
    except ValidationError as exc:
        index = line_index(text)
        problems = []
        for err in exc.errors():
            loc = tuple(err["loc"])
            field = ".".join(str(p) for p in loc) or "(spec)"
            at = line_for(index, loc)
            where = f"{source}:{at}" if at else source
            problems.append(f"{where}: {field}: {_describe(err)}")
        raise SpecError(problems) from None


#: The tags every resource of a run carries (``BurstJob.tags``): the run id and the expiry
#: find a run's resources (teardown's leak scan, the reaper); the rest attribute its cost.
TAG_RUN_ID = "burst:run-id"
TAG_EXPIRES_AT = "burst:expires-at"
TAG_OWNER = "burst:owner"
TAG_TEAM = "burst:team"
TAG_COST_CENTRE = "burst:cost-centre"
TAG_PRIORITY = "burst:priority"
#: The keys the stacks take as variables of their own (the rest go in extra_tags).
RUN_TAG_KEYS = (TAG_RUN_ID, TAG_EXPIRES_AT, TAG_OWNER, TAG_TEAM, TAG_COST_CENTRE)


def node_count(job: BurstJob, candidate: Mapping[str, Any] | None = None) -> int:
    """The nodes a run rents: what the planner sized the candidate to (its offer's GPUs per
    instance), else the spec's GPUs over GPUs per node, rounded up. The one formula: the
    provisioner, the checkpoint schedule and the workflow's parameters all use it."""
    nodes = (candidate or {}).get("nodes")
    if isinstance(nodes, int) and not isinstance(nodes, bool) and nodes >= 1:
        return nodes
    return max(1, -(-job.compute.gpu_count // job.compute.gpus_per_node))


def gpus_per_pod(job: BurstJob, candidate: Mapping[str, Any] | None = None) -> int:
    """The GPUs each node's train pod requests: the spec's GPUs spread over the nodes the run
    rents (``node_count``), never more than ``compute.gpus_per_node``. A 1-GPU job asks for 1
    GPU, not for the 8 of ``gpus_per_node``'s default (on a cluster such a pod never fits a
    1-GPU node)."""
    nodes = node_count(job, candidate)
    return max(1, min(job.compute.gpus_per_node, -(-job.compute.gpu_count // nodes)))


def load_spec(path: str | Path) -> BurstJob:
    p = Path(path)
    try:
        text = read_text(p, what="spec")
    except BadInputError as exc:
        raise SpecError([exc.one_line()]) from None
    return parse_spec(text, str(p))


def json_schema() -> dict[str, Any]:
    schema = BurstJob.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://burst.dev/schema/burst-job-v1.json"
    return schema
