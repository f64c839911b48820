"""The goodput simulator's on-demand fallback mode: a run on spot falls back to on demand
after ``on_demand_after`` spot losses, probes spot every probe interval (seeded
availability, or a trace of availability windows) and moves back when
:func:`burst.recovery.back_to_spot` says so: the rule the runtime uses
(``burst.train.spot_probe``), looked up on its module at every probe, so the two cannot
differ (docs/preemption.md "Back to spot").

Kept beside ``burst.plan.goodput`` (whose Poisson pre-emptions and seeding it follows) in a
module of its own: the rule's module imports the planner, which imports the simulator.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from burst import recovery
from burst.errors import BadInputError
from burst.plan.goodput import MAX_LOOP_PER_RUN


@dataclass(frozen=True)
class FallbackParams:
    """The on-demand fallback and the move back to spot (docs/preemption.md "Back to spot").

    The job needs ``work_s`` useful seconds and commits a checkpoint every ``interval_s`` of
    work. On spot it is pre-empted as a Poisson process of mean ``spot_mtbf_s`` (seeded), and
    whenever spot capacity goes away (the end of an ``availability`` window); each loss
    loses the work since the last checkpoint and costs ``restart_s``. After
    ``on_demand_after`` spot losses (or when spot has no capacity at a restart) it runs on
    demand, which is not pre-empted. On demand it probes spot at the first checkpoint
    boundary every ``probe_interval_s`` (None: never) and moves back when
    :func:`burst.recovery.back_to_spot` says so, paying the move's seconds on demand;
    the spot losses are then counted afresh, as the runtime counts them."""

    work_s: float
    spot_mtbf_s: float
    interval_s: float
    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    restart_s: float = 300.0
    on_demand_after: int = 1
    probe_interval_s: float | None = 1800.0
    save_s: float = 0.0
    provision_s: float = 0.0
    pull_s: float = 0.0
    restore_s: float = 0.0
    checkpoint_gb: float = 0.0
    egress_usd_per_gb: float = 0.0
    margin: float = 0.1
    #: (start, end) seconds when spot has capacity; None: each probe finds it with
    #: ``p_available`` (seeded), and spot capacity never goes away under a running job
    availability: tuple[tuple[float, float], ...] | None = None
    p_available: float = 0.5


@dataclass
class FallbackResult:
    work_s: float
    spot_s: float = 0.0
    on_demand_s: float = 0.0
    lost_s: float = 0.0
    spot_losses: int = 0
    fallbacks: int = 0
    probes: int = 0
    moves: int = 0
    usd: float = 0.0
    finished: bool = True
    move_reasons: list[str] = field(default_factory=list)

    @property
    def spot_share(self) -> float:
        """The share of paid (GPU-)time on spot."""
        paid = self.spot_s + self.on_demand_s
        return self.spot_s / paid if paid > 0 else 0.0

    @property
    def lost_share(self) -> float:
        """Lost work as a share of the useful work."""
        return self.lost_s / self.work_s if self.work_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "spot_share": self.spot_share, "lost_share": self.lost_share}


def _window_end(windows: Sequence[tuple[float, float]] | None, t: float) -> float | None:
    """The end of the availability window holding ``t``; None: spot has no capacity at t
    (no windows given: always capacity, ending never)."""
    if windows is None:
        return math.inf
    for start, end in windows:
        if start <= t < end:
            return end
    return None


def move_inputs(f: FallbackParams, remaining_s: float, available: bool) -> recovery.MoveInputs:
    """The rule's inputs at a probe, as the runtime builds them from the plan and its
    measurements (``burst.train.spot_probe.SpotMover.inputs``)."""
    return recovery.MoveInputs(
        on_demand_usd_per_hour=f.on_demand_usd_per_hour,
        spot_usd_per_hour=f.spot_usd_per_hour,
        spot_mtbf_hours=f.spot_mtbf_s / 3600.0,
        remaining_hours=remaining_s / 3600.0,
        save_s=f.save_s,
        provision_s=f.provision_s,
        pull_s=f.pull_s,
        restore_s=f.restore_s,
        checkpoint_gb=f.checkpoint_gb,
        egress_usd_per_gb=f.egress_usd_per_gb,
        checkpoint_interval_s=f.interval_s,
        restart_s=f.restart_s,
        margin=f.margin,
        spot_available=available,
    )


def simulate_fallback(f: FallbackParams, *, seed: int = 0) -> FallbackResult:
    """One seeded run on spot with the on-demand fallback (and the move back to spot when
    ``probe_interval_s`` is set). The move's decision is :func:`burst.recovery.back_to_spot`,
    the runtime's own (``burst.train.spot_probe``): looked up on the module at every probe."""
    if not (f.work_s > 0 and f.interval_s > 0 and f.spot_mtbf_s > 0):
        raise BadInputError("fallback simulation: work, interval and spot MTBF must be > 0")
    if f.probe_interval_s is not None and f.probe_interval_s <= 0:
        raise BadInputError("fallback simulation: probe interval must be > 0")
    rng = random.Random(f"fallback:{seed}")
    res = FallbackResult(work_s=f.work_s)
    t = work = 0.0
    losses = 0
    on_spot = _window_end(f.availability, 0.0) is not None
    if not on_spot:
        res.fallbacks += 1
    next_probe = t + (f.probe_interval_s or math.inf)
    move_s = f.save_s + f.provision_s + f.pull_s + f.restore_s
    od_rate, spot_rate = f.on_demand_usd_per_hour / 3600.0, f.spot_usd_per_hour / 3600.0
    loops = 0
    while work < f.work_s:
        loops += 1
        if loops > MAX_LOOP_PER_RUN:
            res.finished = False
            break
        if on_spot:
            end = _window_end(f.availability, t)
            kill = t + rng.expovariate(1.0 / f.spot_mtbf_s)
            if end is not None:
                kill = min(kill, end)
            if t + (f.work_s - work) <= kill:  # done before the next loss
                res.spot_s += f.work_s - work
                t, work = t + (f.work_s - work), f.work_s
                break
            ran = kill - t
            work += ran
            committed = math.floor(work / f.interval_s + 1e-9) * f.interval_s
            res.lost_s += work - committed
            res.spot_s += ran + f.restart_s
            work, t = committed, kill + f.restart_s
            losses += 1
            res.spot_losses += 1
            if losses >= f.on_demand_after or _window_end(f.availability, t) is None:
                on_spot = False
                res.fallbacks += 1
                next_probe = t + (f.probe_interval_s or math.inf)
            continue
        # on demand: train to the first checkpoint boundary at or after the next probe
        boundary = (math.floor(work / f.interval_s + 1e-9) + 1) * f.interval_s
        while t + (boundary - work) < next_probe and boundary < f.work_s:
            boundary += f.interval_s
        step = min(boundary, f.work_s) - work
        res.on_demand_s += step
        t, work = t + step, work + step
        if work >= f.work_s:
            break
        res.probes += 1
        if f.availability is None:
            available = rng.random() < f.p_available
        else:
            available = _window_end(f.availability, t) is not None
        decision = recovery.back_to_spot(move_inputs(f, f.work_s - work, available))
        next_probe = t + (f.probe_interval_s or math.inf)
        if decision.move:
            res.moves += 1
            if len(res.move_reasons) < 10:
                res.move_reasons.append(decision.reason)
            res.on_demand_s += move_s
            res.usd += f.checkpoint_gb * f.egress_usd_per_gb
            t += move_s
            on_spot, losses = True, 0
    res.usd += res.spot_s * spot_rate + res.on_demand_s * od_rate
    return res
