"""Back to spot, at run time: a train attempt on an on-demand fallback probes spot at its
checkpoint boundaries and, when :func:`burst.recovery.back_to_spot` says so, commits its
checkpoint there and ends (exit 76, ``recovery_source`` ``back_to_spot``: no recovery budget
spent), so that the requeue places train on spot again (docs/preemption.md "Back to spot").

* :class:`SpotProbe` is what says whether spot has capacity: a placement score 0..10 for
  each spot candidate of the plan (None: not known). :class:`LocalProbe` reads the local
  fault point (``burst.faults.spot_capacity``: what the local node group emulates, or a
  test's file); :class:`AwsSpotPlacementProbe` asks EC2's spot placement score API
  (``GetSpotPlacementScores``, through ``burst.infra.remote_errors.aws_client``). A score of
  :data:`MIN_SCORE` or more is capacity.
* :class:`SpotMover` is armed only for an attempt whose placement is an on-demand fallback
  (its provision document's recovery record: on-demand after ``spot_losses``) that may be
  requeued, with ``compute.recovery.probe_interval_s`` set. It probes at the first checkpoint
  boundary and then every ``probe_interval_s``; a probe that fails is logged and the attempt
  stays: a probe never stops training.
* The rule's inputs come from the plan and this run's measurements (:meth:`SpotMover.inputs`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from burst import faults, recovery
from burst.documents import PlanDocument, ProvisionDocument
from burst.documents.base import Detail
from burst.documents.plan import Candidate
from burst.documents.train import Notice as NoticeRecord
from burst.documents.train import TrainAttempt
from burst.errors import CheckpointError, MovedBackToSpot
from burst.spec import BurstJob
from burst.storage.base import StoreError
from burst.train.checkpoints import RunCheckpoints
from burst.train.ranks import Ranks
from burst.train.records import AttemptRecords

log = logging.getLogger(__name__)

#: A placement score at or above this is capacity (EC2 scores 1..10: 10 "highly likely").
MIN_SCORE = 7.0
#: The notice source an attempt that moves back to spot records.
NOTICE_SOURCE = "back-to-spot"
#: Seconds the commit at the boundary may take before the move is abandoned (stay).
COMMIT_S = 120.0


class SpotProbe(Protocol):
    name: str

    def scores(self, candidates: Sequence[Candidate]) -> list[float | None]:
        """A placement score (0..10) for each candidate, None where not known."""


@dataclass
class LocalProbe:
    """The local runner's probe: the fault point ``burst.faults.spot_capacity``."""

    run_dir: Path
    name: str = "local"

    def scores(self, candidates: Sequence[Candidate]) -> list[float | None]:
        capacity = faults.spot_capacity(self.run_dir)
        return [capacity.get(c.region, 10.0) for c in candidates]


@dataclass
class AwsSpotPlacementProbe:
    """EC2's spot placement scores (``ec2:GetSpotPlacementScores``): one call per instance
    type and node count, over the candidates' regions; a region's score is its best.
    ``client`` makes the EC2 client (``aws_client(service, region)``); candidates of other
    providers are not known (None)."""

    region: str
    client: Callable[[str, str | None], Any] | None = None
    name: str = "aws-spot-placement-score"

    def scores(self, candidates: Sequence[Candidate]) -> list[float | None]:
        if self.client is None:
            from burst.infra.remote_errors import aws_client

            self.client = aws_client
        ec2 = self.client("ec2", self.region)
        out: list[float | None] = [None] * len(candidates)
        groups: dict[tuple[str, int], list[int]] = {}
        for i, c in enumerate(candidates):
            if c.provider == "aws" and c.instance:
                groups.setdefault((c.instance, c.nodes or 1), []).append(i)
        for (instance, nodes), idx in groups.items():
            regions = sorted({candidates[i].region for i in idx})
            got = ec2.get_spot_placement_scores(
                InstanceTypes=[instance],
                TargetCapacity=nodes,
                TargetCapacityUnitType="units",
                SingleAvailabilityZone=True,
                RegionNames=regions,
            )
            best: dict[str, float] = {}
            for s in got.get("SpotPlacementScores") or []:
                r, score = s.get("Region"), s.get("Score")
                if isinstance(r, str) and isinstance(score, int | float):
                    best[r] = max(best.get(r, 0.0), float(score))
            for i in idx:
                out[i] = best.get(candidates[i].region, 0.0)
        return out


def probe_for(infra: ProvisionDocument, run_dir: Path) -> SpotProbe | None:
    """The probe for a placement: local on the local node group, EC2's score on AWS; None
    where burst has no probe (the attempt then stays)."""
    cand = infra.candidate
    if infra.terraform is None or infra.terraform.kind == "local":
        return LocalProbe(run_dir)
    if cand is not None and cand.provider == "aws":
        return AwsSpotPlacementProbe(cand.region)
    return None


def _spot(c: Candidate, default: str | None) -> bool:
    return (c.capacity or default) == "spot"


@dataclass
class SpotMover:
    """The probe and the rule for one attempt on an on-demand fallback."""

    job: BurstJob
    plan: PlanDocument
    infra: ProvisionDocument
    probe: SpotProbe
    interval_s: float
    clock: Callable[[], float] = time.monotonic
    next_at: float | None = None  # None: at the first checkpoint boundary
    probes: int = 0
    last: recovery.MoveDecision | None = None
    errors: list[str] = field(default_factory=list)

    @classmethod
    def for_attempt(
        cls,
        job: BurstJob,
        plan: PlanDocument | None,
        infra: ProvisionDocument | None,
        run_dir: Path,
        probe: SpotProbe | None = None,
        past: Sequence[TrainAttempt] = (),
    ) -> SpotMover | None:
        """The mover of an attempt that probes spot; None (and why, logged) otherwise.
        ``past``: the run's earlier attempts; when the last of them moved back to spot, this
        one does not probe (it is that move retried in place, or a requeue that found no
        spot capacity: moving again at once would only repeat it)."""
        interval = job.compute.recovery.probe_interval_s
        if interval is None or plan is None or infra is None:
            return None
        if past and past[-1].recovery_source == recovery.BACK_TO_SPOT:
            log.warning(
                "back to spot: the attempt before this one moved back to spot, and this one "
                "is on demand again: not probing in this attempt"
            )
            return None
        rec, cand = infra.recovery, infra.candidate
        if rec is None or cand is None or cand.capacity != "on_demand" or rec.spot_losses < 1:
            log.info("back to spot: not probing (not an on-demand fallback)")
            return None
        why = None
        if not rec.may_requeue:
            why = "this placement may not be requeued (max_placements, max_preemptions)"
        elif not any(_spot(c, None) for c in plan.candidates):
            why = "the plan has no spot candidate"
        if why is not None:
            log.info("back to spot: not probing (%s)", why)
            return None
        chosen = probe if probe is not None else probe_for(infra, run_dir)
        if chosen is None:
            log.warning("back to spot: no spot probe for %s: staying on demand", cand.provider)
            return None
        log.info(
            "back to spot: on an on-demand fallback after %d spot loss(es): probing spot "
            "(%s) every %g s at checkpoint boundaries",
            rec.spot_losses,
            chosen.name,
            interval,
        )
        return cls(job, plan, infra, chosen, float(interval))

    def due(self) -> bool:
        return self.next_at is None or self.clock() >= self.next_at

    def spot_candidates(self) -> list[Candidate]:
        return [c for c in self.plan.candidates if _spot(c, None)]

    def inputs(
        self,
        spot: Candidate,
        available: bool,
        remaining_s: float,
        save_s: float,
        restore_s: float,
        checkpoint_bytes: int,
    ) -> recovery.MoveInputs:
        """The rule's inputs: prices, MTBF and interval from the plan; the save and restore
        from this run's save meter; provisioning measured by this placement's provision
        step; the image pull and start from the catalog's ``restart_s``; egress at the
        provider's inter-region price when the spot candidate is in another region."""
        from burst.plan.catalog import load_catalog
        from burst.plan.cost import BYTES_PER_GB
        from burst.plan.datastrategy import inter_region_price

        here = self.infra.candidate
        assert here is not None
        cat = load_catalog()
        ok = [a.seconds for a in self.infra.attempts if a.result == "ok" and a.seconds]
        provision_s = float(ok[-1]) if ok else 0.0
        egress = 0.0
        if spot.region != here.region:
            egress = inter_region_price(cat, here.provider)[0]
        mtbf_h = spot.mtbf_hours
        if mtbf_h is None:  # the planner's own formula for a spot candidate
            from burst.plan.reliability import job_mtbf, node_mtbf_hours

            node = node_mtbf_hours(cat, None, spot.provider, "spot")
            mtbf_h = job_mtbf(self.job, "spot", spot.nodes or 1, 0, node).hours
        return recovery.MoveInputs(
            on_demand_usd_per_hour=float(here.price_per_hour or 0.0),
            spot_usd_per_hour=float(spot.price_per_hour or 0.0),
            spot_mtbf_hours=float(mtbf_h),
            remaining_hours=max(0.0, remaining_s) / 3600.0,
            save_s=save_s,
            provision_s=provision_s,
            pull_s=float(cat.assumption("restart_s")),
            restore_s=restore_s,
            checkpoint_gb=checkpoint_bytes / BYTES_PER_GB,
            egress_usd_per_gb=egress,
            checkpoint_interval_s=float(spot.checkpoint_interval_s or 0.0),
            margin=self.job.compute.recovery.move_margin,
            spot_available=available,
            spot_candidate=f"{spot.provider}/{spot.region} spot",
        )

    def check(
        self, remaining_s: float, save_s: float, restore_s: float, checkpoint_bytes: int
    ) -> dict[str, Any] | None:
        """At a checkpoint boundary, when due: probe, and weigh the first spot candidate (in
        plan order) with capacity, else the plan's first spot candidate (the rule then says
        stay). None: not due, or the probe failed (logged: the attempt stays)."""
        if not self.due():
            return None
        self.next_at = self.clock() + self.interval_s
        self.probes += 1
        spots = self.spot_candidates()
        try:
            scores = self.probe.scores(spots)
            ok = [c for c, s in zip(spots, scores, strict=True) if s is not None and s >= MIN_SCORE]
            spot = ok[0] if ok else spots[0]
            decision = recovery.back_to_spot(
                self.inputs(spot, bool(ok), remaining_s, save_s, restore_s, checkpoint_bytes)
            )
        except Exception as exc:  # a probe never stops training: log and stay
            why = f"{exc.__class__.__name__}: {exc}"
            self.errors.append(why)
            log.warning(
                "back to spot: the %s probe failed (%s): staying on demand", self.probe.name, why
            )
            return None
        self.last = decision
        log.info("back to spot: %s", decision.reason)
        return {
            **decision.as_dict(),
            "probe": self.probe.name,
            "candidate": spot.model_dump(include={"region", "provider", "capacity"}),
        }


def move(
    records: AttemptRecords,
    store: RunCheckpoints,
    ranks: Ranks,
    step: int,
    decision: dict[str, Any],
) -> None:
    """End the attempt at ``step`` to move back to spot: its full checkpoint of ``step``
    (handed to the writer by the caller) commits (every rank waits for its own part; rank 0
    says whether the full checkpoint of ``step`` is in the store), the attempt records why
    (``back_to_spot``) and ``recovery_source`` ``back_to_spot`` (no budget spent), and exit
    76 requeues it (not retried in place). Raises ``MovedBackToSpot``; returns (the attempt
    stays on demand) when the checkpoint did not commit."""
    problem: str | None = None
    try:
        store.commit(COMMIT_S)
    except (CheckpointError, StoreError) as exc:
        problem = exc.one_line()

    def verdict() -> str | None:
        last = store.mgr.status().last_committed
        if last is not None and last.step == step and last.tier == "full":
            return None
        return problem or f"no full checkpoint of step {step} committed"

    why = ranks.decide(verdict)
    if why is not None:
        log.warning("back to spot: %s: staying on demand", why)
        return
    records.learn(store)
    rec = records.record
    rec.outcome = "moved"
    rec.ended_at_step = step
    rec.recovery_source = recovery.BACK_TO_SPOT
    rec.notice = NoticeRecord(source=NOTICE_SOURCE, received_at=time.time())
    rec.back_to_spot = Detail.model_validate({**decision, "at_step": step})
    records.finish(store)
    log.warning("back to spot at step %d: %s; exit 76 to requeue", step, decision["reason"])
    stop = MovedBackToSpot(
        f"back to spot at step {step}: {decision['reason']}; the checkpoint of step {step} "
        "is committed; exit 76 to requeue on spot"
    )
    stop.doc = records.doc(store, step)
    raise stop
