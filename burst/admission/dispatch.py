"""Multi-region dispatch (issue 47): a run's candidates as an ordered set of queues, one per
region (MultiKueue's shape), and which to try, which to wait in, and why each other is skipped.

One function, :func:`dispatch`, for the provision step (``burst.steps.provision``: where it
chooses a candidate), the queue simulator (``burst.admission.simulate``: its flavor choice)
and ``burst plan --explain`` (the dispatch order under the plan's text):

1. **Law**: a candidate whose (provider, region) the preflight's legal decision denies
   (``burst.infra.provision.gate_candidates``' refused list) is never dispatched to, however
   cheap and free it is (skip ``law``).
2. **Flavor**: a candidate no flavor of the team's queue covers is skipped (``no_flavor``).
3. **Room**: a queue whose free quota of the team's flavor cannot hold the run's GPUs now is
   not tried (``full``); it can still be the queue the run waits in.
4. **Pin**: a resumed run is pinned to the region holding its checkpoint: every other
   candidate is skipped (``pinned``) unless moving there is cheaper, counting egress. The
   move's cost is :func:`burst.recovery.back_to_spot`'s terms (the save, provisioning, image
   pull and restore at the pinned rate, plus the checkpoint's GB x the egress price) and its
   saving is the same rule's (the price difference over the remaining hours, the target's
   expected spot losses included), plus one term of dispatch's own: the hours the run has
   waited for its full pinned region, each valued at the pinned placement's hourly price
   (the price of an hour of the run's progress). A big checkpoint keeps a run pinned; a small
   one moves once its region has been full long enough.

Everything else keeps the plan's order (the recovery strategy's, on a requeue): among equal
queues, the first in the plan is tried first.

Queue state: locally the ledger admits by budget, not by per-region quota, so every region's
queue is open (:func:`open_queue`); on a cluster it is the team's ClusterQueue, as the Kueue
reader returns it (:func:`kueue_queues`: the flavor that covers the candidate, its quota less
what Kueue has reserved of it).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

from burst.documents.plan import Candidate
from burst.recovery import MoveCost, MoveDecision, MoveInputs, back_to_spot

if TYPE_CHECKING:
    from burst.admission.kueue_reader import KueueView

log = logging.getLogger(__name__)

SkipReason = Literal["law", "no_flavor", "full", "pinned"]

#: The MTBF the move rule is given for a target that is not spot (it is not pre-empted).
NEVER_PREEMPTED_H = 1e12


@dataclass(frozen=True)
class FloorQueue:
    """The flavor an AWS spot run's on-demand floor is charged to (its own podSet,
    burst.admission.podsets): its free GPUs now (None: not limited) and the floor's GPUs."""

    flavor: str
    free_gpus: int | None
    need_gpus: int


@dataclass(frozen=True)
class RegionQueue:
    """One queue's state for the team's flavor: ``flavor`` names it (None: no flavor of the
    team covers the candidate); ``free_gpus`` is the quota free now (None: not limited by a
    quota, as on the local ledger); ``floor``: a spot run's on-demand floor, charged to a
    flavor of its own (the run's other GPUs are ``flavor``'s)."""

    flavor: str | None
    free_gpus: int | None = None
    floor: FloorQueue | None = None

    def lacks(self, need: int) -> str | None:
        """Why this queue cannot take a run of ``need`` GPUs now (None: it can)."""
        parts = [(self.flavor, self.free_gpus, need)]
        if self.floor is not None:
            parts = [(self.flavor, self.free_gpus, max(0, need - self.floor.need_gpus))]
            parts.append((self.floor.flavor, self.floor.free_gpus, self.floor.need_gpus))
        short = [
            f"flavor {flavor} has {free} GPU(s) free, needs {want}"
            for flavor, free, want in parts
            if free is not None and free < want
        ]
        return "; ".join(short) or None


def open_queue(_: Candidate) -> RegionQueue:
    """The local path: the ledger admits by budget, so every region's queue has room."""
    return RegionQueue(flavor="ledger", free_gpus=None)


@dataclass(frozen=True)
class Pin(MoveCost):
    """Where a resumed run's checkpoint is (``provider``/``region``), how long it has waited
    for room there (``waited_h``), and what moving it would cost: the move rule's own terms
    (:class:`burst.recovery.MoveCost`, the fields :class:`burst.recovery.MoveInputs` takes)."""

    region: str
    provider: str
    waited_h: float = 0.0


@dataclass(frozen=True)
class Skip:
    candidate: Candidate
    reason: SkipReason
    detail: str

    def as_dict(self) -> dict[str, Any]:
        return {"queue": name(self.candidate), "reason": self.reason, "detail": self.detail}


@dataclass(frozen=True)
class Dispatch:
    """``order``: the queues to try now, best first; ``wait_in``: the queue to wait in when
    none of them has room (None: no queue is allowed at all); ``skipped``: every other
    candidate with its reason; ``move``: for a pinned run, the rule's verdict on the first
    place it could move to."""

    order: list[Candidate]
    wait_in: Candidate | None
    skipped: list[Skip] = field(default_factory=list)
    move: MoveDecision | None = None

    def candidates(self) -> list[Candidate]:
        """What provision tries, in order: the queues with room, else the one to wait in."""
        if self.order:
            return list(self.order)
        return [self.wait_in] if self.wait_in is not None else []

    def as_dict(self) -> dict[str, Any]:
        return {
            "order": [name(c) for c in self.order],
            "wait_in": name(self.wait_in) if self.wait_in is not None else None,
            "skipped": [s.as_dict() for s in self.skipped],
            "move": self.move.as_dict() if self.move is not None else None,
        }

    def lines(self) -> list[str]:
        """The dispatch order in words (``burst plan --explain``, the provision log)."""
        order = ", ".join(f"{i}. {name(c)}" for i, c in enumerate(self.order, 1)) or "none"
        out = [f"dispatch order: {order}"]
        if self.wait_in is not None:
            out.append(f"  wait in: {name(self.wait_in)} (when no queue has room)")
        out += [f"  skipped {name(s.candidate)}: {s.reason}: {s.detail}" for s in self.skipped]
        return out


def name(c: Candidate) -> str:
    return f"{c.provider}/{c.region}" + (f" {c.capacity}" if c.capacity else "")


def _gpus(c: Candidate) -> int:
    return int(c.gpus or 1)


def _move(pin: Pin, stay: Candidate, to: Candidate, waited_h: float) -> MoveDecision:
    """``back_to_spot``'s terms for moving the checkpoint from ``stay`` to ``to``, with the
    waited hours added to the saving (a :class:`MoveDecision` whose ``move`` is dispatch's)."""
    stay_rate = float(stay.price_per_hour or 0.0)
    spot = (to.capacity or "") == "spot" and to.mtbf_hours
    rule = back_to_spot(
        MoveInputs(
            **pin.move_cost(),
            on_demand_usd_per_hour=stay_rate,
            spot_usd_per_hour=float(to.price_per_hour or 0.0),
            spot_mtbf_hours=float(to.mtbf_hours) if spot and to.mtbf_hours else NEVER_PREEMPTED_H,
            checkpoint_interval_s=float(to.checkpoint_interval_s or 0.0) if spot else 0.0,
            spot_candidate=name(to),
        )
    )
    wait_usd = stay_rate * max(0.0, waited_h)
    saving = rule.saving_usd + wait_usd
    move = math.isfinite(saving) and saving > rule.cost_usd + rule.margin_usd
    verb = "move" if move else "stay pinned"
    reason = (
        f"{verb}: moving the {pin.checkpoint_gb:.4g} GB checkpoint from {pin.provider}/"
        f"{pin.region} to {name(to)} saves ${saving:,.2f} (price ${rule.saving_usd:,.2f} + "
        f"{waited_h:.3g} h waited ${wait_usd:,.2f}) against the move's ${rule.cost_usd:,.2f} "
        f"(egress ${dict((t.term, t.usd) for t in rule.terms)['egress']:,.2f}) + margin "
        f"${rule.margin_usd:,.2f}"
    )
    return MoveDecision(move, reason, saving, rule.cost_usd, rule.margin_usd, rule.terms)


def dispatch(
    candidates: Sequence[Candidate],
    denied: Iterable[tuple[str, str]],
    queue: Callable[[Candidate], RegionQueue] = open_queue,
    pin: Pin | None = None,
    *,
    need: Callable[[Candidate], int] = _gpus,
) -> Dispatch:
    """The queues to try, in the plan's order, and the one to wait in.

    ``candidates``: the plan's (or the recovery strategy's) order; ``denied``: the (provider,
    region) pairs the legal decision refuses; ``queue``: each candidate's queue state;
    ``pin``: a resumed run's checkpoint (None: a first placement); ``need``: the GPUs a
    candidate's queue must have free."""
    law = set(denied)
    skipped: list[Skip] = []
    eligible: list[tuple[Candidate, bool]] = []  # (candidate, has room now)
    for c in candidates:
        if (c.provider, c.region) in law:
            skipped.append(Skip(c, "law", "the preflight's legal decision denies this region"))
            continue
        q = queue(c)
        if q.flavor is None:
            skipped.append(Skip(c, "no_flavor", "no flavor of the team's queue covers it"))
            continue
        lacks = q.lacks(need(c))
        room = lacks is None
        if lacks is not None:
            skipped.append(Skip(c, "full", lacks))
        eligible.append((c, room))
    if not eligible:
        return Dispatch([], None, skipped)
    if pin is None:
        return Dispatch([c for c, room in eligible if room], eligible[0][0], skipped)
    here = [(c, room) for c, room in eligible if (c.provider, c.region) == (pin.provider,
                                                                          pin.region)]  # fmt: skip
    if not here:  # nothing may run where the checkpoint is: it moves, in the plan's order
        return Dispatch([c for c, room in eligible if room], eligible[0][0], skipped)
    stay, stay_room = here[0][0], any(room for _, room in here)
    waited = 0.0 if stay_room else pin.waited_h
    order: list[Candidate] = []
    first: MoveDecision | None = None
    for c, room in eligible:
        if (c.provider, c.region) == (pin.provider, pin.region) or not room:
            continue
        decision = _move(pin, stay, c, waited)
        first = first or decision
        if decision.move:
            order.append(c)
        else:
            skipped.append(Skip(c, "pinned", decision.reason))
    if order:  # moving is cheaper: the movers in the plan's order, then the pinned region
        order += [c for c, room in here if room]
        return Dispatch(order, order[0], skipped, first)
    return Dispatch([c for c, room in here if room], stay, skipped, first)


# -- queue state on a cluster ------------------------------------------------------------------


def _reserved_gpus(cluster_queue: dict[str, Any], flavor: str) -> int:
    """The GPUs Kueue has reserved of ``flavor`` in the ClusterQueue (its status)."""
    from burst.admission.coverage import GPU

    status = cluster_queue.get("status") or {}
    for entry in status.get("flavorsReservation") or status.get("flavorsUsage") or []:
        if entry.get("name") != flavor:
            continue
        for r in entry.get("resources") or []:
            if r.get("name") == GPU:
                text = str(r.get("total", "0")).strip()
                return int(text) if text.isdigit() else 0
    return 0


def kueue_queues(job: Any, team_queue: Any) -> Callable[[Candidate], RegionQueue]:
    """Each candidate's queue on a cluster: the flavor of the team's ClusterQueue that covers
    each podSet of its Workload (``burst.admission.coverage``, ``burst.admission.podsets``:
    an AWS spot run's on-demand floor is charged to the on-demand flavor) and its quota
    (nominal + borrowing limit) less what Kueue has reserved of it (None: no limit known)."""
    from burst.admission.coverage import GPU, _gpu_group, _reachable, coverage
    from burst.admission.podsets import FLOOR, run_pod_sets

    cq = team_queue.cluster_queue
    borrows = bool((cq.get("spec") or {}).get("cohortName"))
    quota = {
        str(e.get("name", "")): _reachable(e.get("resources") or [], borrows)
        for e in (_gpu_group(cq) or {}).get("flavors") or []
    }

    def free(flavor: str) -> int | None:
        reach = quota.get(flavor)
        return None if reach is None else max(0, reach - _reserved_gpus(cq, flavor))

    def state(c: Candidate) -> RegionQueue:
        shares = run_pod_sets(job, c)
        flavors = [coverage(sh.placement, cq, team_queue.flavors).flavor for sh in shares]
        if None in flavors:
            return RegionQueue(None)
        by_set = {sh.name: (str(f), sh.gpus) for sh, f in zip(shares, flavors, strict=True)}
        main = str(flavors[0])
        floor = None
        if FLOOR in by_set:
            flavor, gpus = by_set[FLOOR]
            floor = FloorQueue(flavor, free(flavor), gpus)
        got = RegionQueue(main, free(main), floor)
        log.debug("queue %s: %s (%s free)", name(c), got, GPU)
        return got

    return state


# -- the provision step's hook -------------------------------------------------------------------


def _pin(job: Any, previous: Any, plan: Any) -> Pin | None:
    """A requeued run's pin: where its last placement trained (its checkpoint's region), the
    plan's checkpoint size, the provider's inter-region price, the catalog's image pull."""
    from burst.plan.catalog import load_catalog
    from burst.plan.datastrategy import inter_region_price

    last = previous.candidate
    workload = getattr(plan, "workload", None)
    if last is None or workload is None:
        return None
    cat = load_catalog()
    ok = [a.seconds for a in previous.attempts if a.result == "ok" and a.seconds]
    return Pin(
        region=last.region,
        provider=last.provider,
        checkpoint_gb=float(workload.checkpoint_gb),
        remaining_hours=float(last.expected_hours or job.budget.max_hours),
        egress_usd_per_gb=inter_region_price(cat, last.provider)[0],
        provision_s=float(ok[-1]) if ok else 0.0,
        pull_s=float(cat.assumption("restart_s")),
        margin=float(job.compute.recovery.move_margin),
    )


def dispatch_run(
    ctx: Any,
    candidates: Sequence[Candidate],
    refused: Sequence[Any],
    previous: Any,
    last_source: Callable[[], str | None],
    kueue: KueueView,
    *,
    waited_s: float = 0.0,
    room_only: bool = False,
) -> list[Candidate]:
    """Provision's dispatch: the candidates to try, in order (:func:`dispatch`), after the
    legal gate and the Kueue gate. ``kueue``: provision's one read of the team's Kueue queue
    (``burst.admission.kueue_reader.read_kueue``; empty: no Kueue here). On a cluster with
    Kueue, a requeue whose last attempt the
    control plane stopped (a Kueue preemption, an eviction: its region still has the
    capacity, its team's quota there was taken) is pinned to its last region unless moving is
    cheaper; after a provider's pre-emption or a node loss, and on the local path (no region
    queues: a SIGTERM there is no quota preemption), the recovery strategy's order stands (the
    lost region last). Every queue full: the queue to wait in. ``last_source``: what ended
    the run's last train attempt (read only for a requeue on a cluster).

    Asked again while the run waits in a full queue (``burst.admission.kueue_workload.
    reserve_quota``'s ``redispatch``): ``waited_s`` is the time waited so far (a pinned run's
    ``waited_h``, the term that lets it move once waiting costs more than moving) and
    ``room_only`` returns only the queues with room now (none: stay where it waits)."""
    from burst.documents import PlanDocument
    from burst.recovery import CONTROL_PLANE, QUOTA, REQUEUE
    from burst.settings import current

    queue: Callable[[Candidate], RegionQueue] = open_queue
    if kueue.queue is not None:
        queue = kueue_queues(ctx.spec, kueue.queue)
    pin = None
    placed = kueue.queue is not None and previous is not None and previous.candidate is not None
    requeue = placed and current().recovery_event == REQUEUE
    if requeue and last_source() in (CONTROL_PLANE, QUOTA):
        pin = _pin(ctx.spec, previous, ctx.optional_input("plan", PlanDocument))
        if pin is not None and waited_s > 0:
            pin = replace(pin, waited_h=waited_s / 3600.0)
    got = dispatch(candidates, [(r.provider, r.region) for r in refused], queue, pin)
    if room_only:
        return list(got.order)
    for line in got.lines():
        log.info("%s", line)
    return got.candidates()


def dispatch_of(doc: dict[str, Any]) -> Dispatch:
    """The plan's dispatch (issue 47): its candidates as queues
    in the plan's order, a region the legal decision denies (``excluded`` with verdict deny)
    never among them. Queue state is the local ledger's (every region open): on a cluster
    provision reads the team's Kueue quota, and a requeue is pinned to its checkpoint."""
    cands = [Candidate.model_validate(c) for c in doc.get("candidates") or []]
    denied = [(e["provider"], e["region"]) for e in doc.get("excluded") or []
              if e.get("verdict") == "deny"]  # fmt: skip
    return dispatch(cands, denied)


def dispatch_lines(doc: dict[str, Any]) -> list[str]:
    """The dispatch order in words, under ``burst plan --explain``."""
    denied = [e for e in doc.get("excluded") or [] if e.get("verdict") == "deny"]
    lines = dispatch_of(doc).lines()
    lines += [f"  never dispatched to {e['provider']}/{e['region']}: law ({e['reason']})"
              for e in denied]  # fmt: skip
    return lines
