"""The job spec: ``BurstJob``, loaded from YAML, validated with pydantic v2.

Every problem is reported with its field path and the line of the YAML it comes from, so
``burst validate`` can print one line per problem and exit 2 (see ``SpecError``).
"""

from __future__ import annotations

import hashlib
import json
import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from burst.errors import SpecError
from burst.yamllines import line_for, line_index, yaml_error

DIGEST_RE = re.compile(r"@sha256:[0-9a-f]{64}$")
NAME_RE = r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$"


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, use_enum_values=True)


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
    uri: str = Field(min_length=1, description="Where the training data lives (s3://, file://).")
    size_gb: float = Field(ge=0, description="Dataset size in GB (decides the data strategy).")
    classification: DataClass = Field(description="The most sensitive class in the dataset.")
    origin: str = Field(
        pattern=r"^[A-Z]{2}(-[A-Z]{2,5})?$",
        description="Jurisdiction the data comes from (ISO country, or e.g. AE-DIFC, EU).",
    )
    region: str | None = Field(
        default=None, description="Cloud region where the data is stored today, if any."
    )
    shards: dict[str, Annotated[float, Field(ge=0)]] | None = Field(
        default=None,
        description="The dataset split over regions (region: GB), when it is; lets the plan "
        "choose training on regional shards. Default: all of size_gb in data.region.",
    )
    transfer_safeguards: list[str] = Field(
        default_factory=list,
        description="Transfer safeguards on record (e.g. scc, bcr, consent, tia, cbpr).",
    )


class ModelInfo(Strict):
    parameters: float = Field(gt=0, description="Parameter count.")
    trainable_fraction: float = Field(
        default=1.0, gt=0, le=1, description="Fraction of parameters trained (fine-tunes < 1)."
    )
    weights: Literal["open", "closed"] = Field(
        default="open", description="Whether the weights are published (open) or not (closed)."
    )
    training_ops: float | None = Field(
        default=None, ge=0, description="Total training operations (for export classes, 1e26)."
    )
    export_sensitivity: Literal["none", "dual_use", "controlled"] = Field(
        default="none", description="Export sensitivity of the model as classified by the owner."
    )


class Compute(Strict):
    gpu_type: str = Field(min_length=1, description="GPU type from the catalog (e.g. rubin, h100).")
    gpu_count: int = Field(ge=1, le=4096, description="GPUs in all.")
    gpus_per_node: int = Field(default=8, ge=1, le=16, description="GPUs per node.")
    capacity: Capacity = Field(default=Capacity.spot_with_fallback, description="Capacity type.")
    regions: list[str] = Field(min_length=1, description="Candidate regions, in preference order.")
    providers: list[str] = Field(min_length=1, description="Candidate providers (aws, gcp, ...).")
    mtbf_hours: float | None = Field(
        default=None, gt=0, description="Override the catalog's mean time between preemptions."
    )


class CheckpointPolicy(Strict):
    interval_steps: int | Literal["auto"] = Field(
        default="auto", description="Steps between checkpoints, or auto (Young/Daly)."
    )
    full_every: int = Field(default=2, ge=1, description="Every Nth checkpoint is a full one.")
    keep_full: int = Field(default=2, ge=1, description="Full checkpoints kept.")
    keep_weights: int = Field(default=3, ge=0, description="Weights-only checkpoints kept.")

    @field_validator("interval_steps")
    @classmethod
    def _positive(cls, v: int | str) -> int | str:
        if isinstance(v, int) and v < 1:
            raise ValueError("must be at least 1, or 'auto'")
        return v


class Training(Strict):
    entrypoint: str = Field(
        default="burst.train.example:build",
        pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$",
        description="module:function that builds the model, optimizer and data (see docs).",
    )
    steps: int = Field(ge=1, description="Optimizer steps in all.")
    seed: int = Field(default=0, ge=0, description="Seed for torch, numpy and python RNGs.")
    batch_size: int = Field(default=16, ge=1)
    learning_rate: float = Field(default=1e-3, gt=0)
    engine: Literal["torch", "deepspeed"] = Field(default="torch")
    zero_stage: int = Field(
        default=2, ge=0, le=3, description="DeepSpeed ZeRO stage (engine: deepspeed only)."
    )
    step_seconds: float | None = Field(
        default=None, gt=0, description="Measured seconds per step on the target GPUs (planning)."
    )
    tokens_per_sample: int = Field(
        default=2048, ge=1, description="Tokens (or positions) per sample (planning estimate)."
    )
    nodes: int = Field(
        default=1,
        ge=1,
        le=512,
        description="Nodes the train step runs on (ranks: nodes x processes_per_node).",
    )
    processes_per_node: int = Field(
        default=1,
        ge=1,
        le=64,
        description=(
            "Ranks on each node (one per GPU on GPU nodes). With more than one rank in all the "
            "train step runs under torchrun, data-parallel; `burst run` runs every rank here."
        ),
    )
    checkpoint: CheckpointPolicy = Field(default_factory=CheckpointPolicy)

    @property
    def world_size(self) -> int:
        return self.nodes * self.processes_per_node


class Budget(Strict):
    max_usd: float = Field(gt=0, description="Refuse or stop a run whose cost exceeds this.")
    max_hours: float = Field(gt=0, description="Wall-clock limit (the workflow deadline).")


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
        description="Checkpoint store: s3://bucket/prefix, or file://path (relative to the spec).",
    )
    replica_uri: str | None = Field(default=None, description="Second store to replicate to.")
    kms_key_id: str | None = Field(default=None, description="SSE-KMS key for S3 stores.")

    @field_validator("checkpoint_uri", "replica_uri")
    @classmethod
    def _scheme(cls, v: str | None) -> str | None:
        if v is not None and not re.match(r"^(s3|file)://.+", v):
            raise ValueError("must start with s3:// or file://")
        return v


class BurstJob(Strict):
    """A burst training job: what to train, on what, where it may go, and at what cost."""

    api_version: Literal["burst/v1"] = Field(default="burst/v1", alias="apiVersion")
    name: str = Field(pattern=NAME_RE, description="DNS-style name, at most 40 characters.")
    owner: str = Field(min_length=1, description="Person responsible (becomes a tag).")
    team: str = Field(min_length=1, description="Team (a tag; also the GPU quota semaphore).")
    cost_centre: str = Field(min_length=1, description="Cost centre (a tag).")
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
        extra="forbid", frozen=True, use_enum_values=True, populate_by_name=True
    )

    @model_validator(mode="after")
    def _unique_candidates(self) -> BurstJob:
        if len(set(self.compute.regions)) != len(self.compute.regions):
            raise ValueError("compute.regions lists a region twice")
        return self

    def tags(self, run_id: str, expires_at: str) -> dict[str, str]:
        """The tags every resource of a run carries."""
        return {
            "burst:run-id": run_id,
            "burst:expires-at": expires_at,
            "burst:owner": self.owner,
            "burst:team": self.team,
            "burst:cost-centre": self.cost_centre,
            "burst:priority": str(self.priority),
        }

    def canonical_json(self) -> str:
        return json.dumps(self.model_dump(mode="json", by_alias=True), sort_keys=True)

    def sha256(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()


# --------------------------------------------------------------------------- loading


def _describe(err: dict[str, Any]) -> str:
    kind = err["type"]
    if kind == "missing":
        return "required field is missing"
    if kind == "extra_forbidden":
        return "unknown field (not part of the spec; see `burst schema`)"
    msg = str(err["msg"]).removeprefix("Value error, ")
    if (
        "input" in err
        and kind not in ("model_type", "dict_type")
        and not isinstance(err["input"], dict | list)
    ):
        msg += f" (got {err['input']!r})"
    return msg


def parse_spec(text: str, source: str = "<spec>") -> BurstJob:
    """Parse and validate spec text. Raises SpecError with one line per problem."""
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        line, problem = yaml_error(exc)
        raise SpecError([f"{source}{line}: not valid YAML: {problem}"]) from None
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
            line = line_for(index, loc)
            where = f"{source}:{line}" if line else source
            problems.append(f"{where}: {field}: {_describe(err)}")
        raise SpecError(problems) from None


def load_spec(path: str | Path) -> BurstJob:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError([f"{p}: no such file"]) from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as exc:
        raise SpecError([f"{p}: cannot read the spec ({exc.__class__.__name__})"]) from None
    return parse_spec(text, str(p))


def json_schema() -> dict[str, Any]:
    schema = BurstJob.model_json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://burst.dev/schema/burst-job-v1.json"
    return schema
