"""The checkpoint interval: Young's first-order formula, ``sqrt(2 C M)``.

C is the blocking cost of one checkpoint (seconds training stops), M the mean time between
failures (pre-emptions) of the whole job. This is Young (1974); Daly (2006) adds higher-order
terms (``sqrt(2 C M) - C`` and more) that change little while C << M, and we use Young's form.
Because a checkpoint is committed only when its background upload finishes and the host
buffer is reused, checkpointing more often than the upload time only queues work: the interval
is never shorter than the upload time (nor than one step).

With memory tiers (docs/checkpoints.md, "Tiers") each tier gets its own interval
(``tier_intervals``): a lost node restores from its peer's memory, so the memory tiers are
checkpointed at Young's interval from the staging cost and the job's MTBF, never shorter than
the copy to the peer; the object store is needed only when a node and its peer are both lost
before the copy is made again, so it is committed at Young's interval from its cost and the
mean time between such double losses, never shorter than the upload (every ``store_every``-th
memory save goes to the store too).
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
    checkpoint_cost_s: float,
    mtbf_s: float,
    upload_s: float,
    step_s: float = 0.0,
    *,
    copy: str = "upload time",
) -> IntervalChoice:
    """Young/Daly, clamped so it is never shorter than the upload time (``copy``: what
    ``upload_s`` is, in the reason) or one step."""
    raw = young_daly(checkpoint_cost_s, mtbf_s)
    floor = max(upload_s, step_s)
    if raw >= floor:
        reason = (
            f"Young/Daly sqrt(2 x C {checkpoint_cost_s:.3g} s x MTBF {mtbf_s:.4g} s) = {raw:.4g} s"
        )
        return IntervalChoice(raw, raw, reason)
    what = copy if upload_s >= step_s else "step time"
    reason = (
        f"Young/Daly {raw:.4g} s is shorter than the {what} {floor:.4g} s;"
        f" the interval is the {what}"
    )
    return IntervalChoice(floor, raw, reason)


#: bytes/s a checkpoint is copied into a peer's memory at, where the plan knows no better: a
#: 10 Gbit/s network between the nodes of a node group (the copy is one TCP stream per rank)
PEER_BYTES_S = 1.25e9


@dataclass(frozen=True)
class TierIntervals:
    """The memory tiers' interval, the store's, and how many memory saves one store commit
    spans (``CheckpointManager(store_every=...)``)."""

    memory: IntervalChoice
    store: IntervalChoice
    store_every: int
    both_lost_mtbf_s: float  # mean time between losses of a node and its peer together


def both_lost_mtbf_s(job_mtbf_s: float, node_mtbf_s: float, exposure_s: float) -> float:
    """Mean time between losses the memory tiers cannot cover: a node lost (rate 1 /
    ``job_mtbf_s``) and its peer lost too within ``exposure_s`` (until the lost rank's state
    is in two memories again), each node pre-empted independently (a Poisson process of
    mean ``node_mtbf_s``). Pre-emptions that take many nodes at once (a zone reclaimed) are
    not independent: place the peer on another failure domain, or plan with a smaller
    node MTBF."""
    if job_mtbf_s <= 0 or node_mtbf_s <= 0 or exposure_s < 0:
        raise ValueError("MTBFs must be > 0 and the exposure >= 0")
    p = -math.expm1(-exposure_s / node_mtbf_s)
    return math.inf if p <= 0 else job_mtbf_s / p


def tier_intervals(
    checkpoint_cost_s: float,
    job_mtbf_s: float,
    node_mtbf_s: float,
    *,
    replicate_s: float,
    upload_s: float,
    step_s: float = 0.0,
    store_cost_s: float | None = None,
    restart_s: float = 0.0,
    peer: bool = True,
) -> TierIntervals:
    """Young/Daly per tier. Memory: cost ``checkpoint_cost_s`` (the staging stall), the
    job's MTBF, never shorter than ``replicate_s`` (the copy into the peer's memory).
    Store: cost ``store_cost_s`` (default the same stall), the MTBF of losing a node and
    its peer together (exposed for one memory interval plus ``restart_s``), never shorter
    than the upload nor than the memory interval. ``peer=False`` (one node: no other node
    to hold a copy): a lost node loses its memory too, so the store takes every save, at
    the single-tier interval."""
    if not peer:
        one = choose_interval(checkpoint_cost_s, job_mtbf_s, upload_s, step_s)
        return TierIntervals(one, one, 1, job_mtbf_s)
    memory = choose_interval(
        checkpoint_cost_s, job_mtbf_s, replicate_s, step_s, copy="copy to the peer"
    )
    both = both_lost_mtbf_s(job_mtbf_s, node_mtbf_s, memory.interval_s + restart_s)
    cost = checkpoint_cost_s if store_cost_s is None else store_cost_s
    floor = max(upload_s, memory.interval_s)
    if math.isinf(both) or cost == 0:
        store = IntervalChoice(floor, math.inf, "no double loss expected: the floor")
    else:
        store = choose_interval(cost, both, upload_s, memory.interval_s, copy="upload time")
        if store.interval_s == memory.interval_s and upload_s < memory.interval_s:
            store = IntervalChoice(
                floor,
                store.young_daly_s,
                f"Young/Daly {store.young_daly_s:.4g} s is shorter than the memory interval; "
                "the store takes every memory save",
            )
    every = max(1, math.floor(store.interval_s / memory.interval_s)) if memory.interval_s else 1
    return TierIntervals(memory, store, every, both)
