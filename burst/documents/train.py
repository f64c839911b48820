"""The train document and the attempt records (``burst.train``).

Each attempt of the train step appends one ``TrainAttempt`` record to the run's checkpoint
store under ``ATTEMPTS_PREFIX`` (and to ``runs/<run-id>/train-attempts.jsonl``); the train
document summarises every attempt so far. Teardown reads the same records to know which
checkpoint must reach the store before the nodes go (``burst.infra.ckptsync``).
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from burst.documents.base import Detail, Document, StepDocument

#: Where the attempt records live in the run's checkpoint store: ``<prefix><NNNN>.json``.
ATTEMPTS_PREFIX = "train/attempts/"
#: The local copy in the run directory, one JSON object a line.
ATTEMPTS_FILE = "train-attempts.jsonl"

Outcome = str  # done, preempted, failed, budget-exceeded


class CheckpointInterval(Detail):
    """``burst.train.schedule.CheckpointSchedule.describe``: how often the run checkpoints
    and why (spec, Young/Daly from measured costs, the plan)."""

    mode: str | None = None
    interval_steps: int | None = None
    interval_s: float | None = None
    mtbf_s: float | None = None
    why: str | None = None


class EmergencySave(Detail):
    """What the emergency save chose at a preemption notice, and whether it committed."""

    tier: str | None = None
    reason: str | None = None
    committed: bool | None = None
    committed_step: int | None = None
    committed_at: float | None = Field(default=None, description="Epoch seconds.")
    in_flight_step: int | None = None


class Notice(Detail):
    """``burst.preempt.notice.Notice``: who gave notice and when."""

    source: str | None = None
    received_at: float | None = Field(default=None, description="Epoch seconds.")
    deadline: float | None = Field(default=None, description="Epoch seconds.")


class RankFigures(Detail):
    """One rank's share of an attempt (several ranks): checkpoint bytes, uploads, stall."""

    rank: int = Field(ge=0)
    checkpoint_bytes: int | None = None
    uploaded_bytes: int | None = None
    stall_s: float | None = None


class TrainAttempt(Document):
    """One attempt of the train step (a record under ``ATTEMPTS_PREFIX``)."""

    attempt: int | None = Field(default=None, ge=1)
    started_at: str | None = None
    finished_at: str | None = None
    engine: str | None = None
    resumed_from: int | None = None
    restored_from_tier: str | None = Field(
        default=None,
        description="checkpoint.memory_tiers: the tier the resumed checkpoint was read from "
        "(local, peer or store: burst.checkpoint.restore.Restored.source).",
    )
    ended_at_step: int | None = None
    preempted: bool = False
    outcome: Outcome | None = None
    error: str | None = None
    notice: Notice | None = None
    late_notice: Notice | None = None
    emergency_save: EmergencySave | None = None
    advisories: list[Detail] | None = None
    watchers: list[str] | None = None
    replica: Detail | None = None
    usd_per_hour: float | None = None
    cost_usd: float | None = None
    hours: float | None = None
    gpus: int | None = Field(
        default=None, ge=1, description="GPUs rented: the GPU-hours billed are gpus x hours."
    )
    commits: int | None = None
    save_failures: list[str] | None = None
    measured: dict[str, float] | None = None
    save_meter: dict[str, Any] | None = None
    checkpoint_interval: CheckpointInterval | None = None
    world_size: int | None = Field(default=None, ge=1)
    ranks: list[RankFigures] | None = None
    notice_to_exit_s: float | None = Field(
        default=None, description="Seconds from the preemption notice to the exit."
    )
    losses: list[float] | None = Field(
        default=None,
        description="The training loss of each step of this attempt, rank 0's (its slice of "
        "the global batch); the first 2000 steps of an attempt only.",
    )
    # issue 16: the record is opened at the start and kept current while the attempt runs
    recovery_source: str | None = Field(
        default=None,
        description="What ended the attempt, for the recovery budgets (burst.recovery): "
        "preemption, failure, node_loss, control_plane or cancel; none when it finished.",
    )
    back_to_spot: Detail | None = Field(
        default=None,
        description="The attempt ended itself to move from an on-demand fallback back to spot "
        "(burst.recovery.back_to_spot): the decision, its terms and the probe.",
    )
    spot_probe: Detail | None = Field(
        default=None,
        description="On an on-demand fallback that stayed: the last back-to-spot probe's "
        "decision (stay: saving_usd against move_cost_usd + margin_usd, the reason, the "
        "candidate, at_step, probes so far).",
    )
    killed: bool = Field(default=False, description="Died without closing its record.")
    at_step: int | None = Field(default=None, description="The last step it finished.")
    saving_step: int | None = Field(default=None, description="The last save it handed off.")
    last_seen_at: str | None = None
    budget_spent_before: dict[str, float] | None = None
    checkpoint_retries: list[str] | None = None
    program: Detail | None = Field(
        default=None,
        description="training.command: the program's exit code, last log lines, the "
        "checkpoints seen, what was not committed and why, warnings, work lost on a notice.",
    )


class TrainDocument(StepDocument):
    """The train step's document (also written with exit 3 when the budget stops the run)."""

    final_step: int | None = None
    resumed_from: int | None = None
    checkpoints: int = 0
    checkpoints_retained: int | None = None
    checkpoint_store: str | None = None
    checkpoint_interval: CheckpointInterval | None = None
    preemptions: int = 0
    killed_attempts: int | None = None
    recovery_sources: dict[str, int] | None = Field(
        default=None,
        description="What ended the attempts, counted by recovery_source (burst.recovery: "
        "preemption, control_plane and node_loss spend max_preemptions, failure "
        "max_failures, cancel neither).",
    )
    cost_usd: float | None = None
    usd_per_hour: float | None = None
    attempts: list[TrainAttempt] = Field(default_factory=list)
    watchers: list[str] | None = None
    replica: Detail | None = None
    final_loss: float | None = None
    final_weights_sha256: str | None = None
    world_size: int | None = Field(default=None, ge=1)
    ranks: list[RankFigures] | None = None
    notice_to_exit_s: float | None = None
    ranks_here: list[int] | None = Field(
        default=None,
        description="A gang pod without rank 0: the ranks it ran (rank 0's pod writes the "
        "document).",
    )
