"""The checkpoint interval: Young's first-order formula, ``sqrt(2 C M)``.

C is the blocking cost of one checkpoint (seconds training stops), M the mean time between
failures (pre-emptions) of the whole job. This is Young (1974); Daly (2006) adds higher-order
terms (``sqrt(2 C M) - C`` and more) that change little while C << M, and we use Young's form.
Because a checkpoint is committed only when its background upload finishes and the host
buffer is reused, checkpointing more often than the upload time only queues work: the interval
is never shorter than the upload time (nor than one step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


def young_daly(checkpoint_cost_s: float, mtbf_s: float) -> float:
    """The raw Young interval ``sqrt(2 C M)`` in seconds."""
    if checkpoint_cost_s < 0 or mtbf_s <= 0:
        raise ValueError("checkpoint cost must be >= 0 and MTBF > 0")
    return math.sqrt(2.0 * checkpoint_cost_s * mtbf_s)


def job_mtbf_s(node_mtbf_hours: float, nodes: int) -> float:
    """Independent nodes, each pre-empted as a Poisson process: the job stops when any does."""
    if node_mtbf_hours <= 0 or nodes < 1:
        raise ValueError("node MTBF must be > 0 and nodes >= 1")
    return node_mtbf_hours * 3600.0 / nodes


@dataclass(frozen=True)
class IntervalChoice:
    interval_s: float
    young_daly_s: float
    reason: str


def choose_interval(
    checkpoint_cost_s: float, mtbf_s: float, upload_s: float, step_s: float = 0.0
) -> IntervalChoice:
    """Young/Daly, clamped so it is never shorter than the upload time or one step."""
    raw = young_daly(checkpoint_cost_s, mtbf_s)
    floor = max(upload_s, step_s)
    if raw >= floor:
        reason = (
            f"Young/Daly sqrt(2 x C {checkpoint_cost_s:.3g} s x MTBF {mtbf_s:.4g} s) = {raw:.4g} s"
        )
        return IntervalChoice(raw, raw, reason)
    what = "upload time" if upload_s >= step_s else "step time"
    reason = (
        f"Young/Daly {raw:.4g} s is shorter than the {what} {floor:.4g} s;"
        f" the interval is the {what}"
    )
    return IntervalChoice(floor, raw, reason)
