"""A deterministic queue simulator: a trace of arrivals, priorities, spot losses and capacity
windows, replayed against burst's admission policy and two baselines.

Policies (all three: the same GPUs in flavors tried spot first, then on-demand, each flavor a
queue of the runtime's dispatch, ``burst.admission.dispatch``, which picks the first with room;
the same per-team semaphore, as deploy/gpu-quota.yaml; backfill: any waiting run that fits
starts):

* ``fifo-semaphore``: what burst had before team budgets (Argo's per-team semaphore): first
  come first served, no preemption, no budgets; a run lost to spot goes to the tail.
* ``priority``: a priority queue with preemption as Kueue does it by default (strictly lower
  priority, the most recently started victim first, killed at once: it loses the work since
  its last periodic checkpoint), no budgets; a run lost to spot goes back by priority.
* ``burst``: the priority queue; admission is the runtime's (``burst.admission.policy``:
  ``reserve_usd`` and ``decide``: admitted, queued for its team's budget renting nothing,
  admitted with what is left and stopped there by the guard, or refused: never an overrun)
  and settles to what it used; the victims are Kueue's choice (``policy.victims``), each
  preempted only after its emergency save (it holds its GPUs for the save, then loses
  nothing); a run lost to spot saves within the notice when its save fits, keeps its
  reservation and goes to the head of its band; capacity that is dry delays it, never
  deactivates it.

The baselines' runs do nothing on a spot notice (a scheduler that knows nothing of notices:
the work since the last periodic checkpoint is lost); burst's train step saves on the notice.
The report separates lost GPU-hours by cause (preemption, spot) so the two effects can be
told apart.

Metrics: priority inversions (runs that waited while only strictly lower-priority runs held
the GPUs they needed, and were not given them within one emergency save), budget overruns
(teams whose spend passed their budget, and by how much), GPU-hours lost (recomputation since
each victim's last checkpoint, plus emergency-save time), mean and p95 wait per priority band,
utilisation (useful GPU-hours over available GPU-hours until the policy's last run ends; and
busy over available GPU-hours while some run waits), runs refused (and their GPU-hours) and
completed. Everything is seeded; the same trace and seed give the same numbers.

Utilisation is reported two ways (``utilisation_definition`` in the report). The raw figure,
``utilisation``, divides each arm's useful GPU-hours by the GPUs available until that arm's
own last event, so an arm that finishes more work later is divided by a longer horizon, and
work a team's budget forbade (an arm without budgets overruns) counts as useful. The goal uses
``utilisation_fair``: useful GPU-hours within each team's budget (a team's useful GPU-hours x
min(1, limit / spend)) over the GPU-hours available until the last run of *any* arm ends
(one denominator for every arm).
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import dataclass, field
from typing import Any

from burst.admission.dispatch import RegionQueue, dispatch
from burst.admission.policy import decide, reserve_usd, victims
from burst.documents.plan import Candidate
from burst.errors import BadInputError

BANDS = ("low", "normal", "high", "critical")
POLICIES = ("fifo-semaphore", "priority", "burst")
EPS = 1e-9


@dataclass
class Flavor:
    name: str
    capacity: str  # spot | on_demand
    gpus: int
    usd_per_gpu_hour: float
    available: int = 0  # now (spot windows lower it)


@dataclass
class Job:
    id: str
    team: str
    band: str
    arrival: float
    gpus: int
    work: float  # hours of training at its GPU count
    checkpoint_every: float
    save: float  # hours an emergency save takes
    # state
    state: str = "new"  # new waiting running saving done refused stopped
    done: float = 0.0
    committed: float = 0.0
    seg_start: float = 0.0
    flavor: str | None = None
    first_start: float | None = None
    finished: float | None = None
    queued_at: float = 0.0
    head: bool = False  # burst: requeued at the head of its band
    spent: float = 0.0
    reserved: float = 0.0
    inverted: bool = False
    waiting_for_save: int = 0  # burst: victims still saving for it
    for_job: str | None = None  # burst: the run this one is saving for
    preempted: int = 0
    version: int = 0

    @property
    def prio(self) -> int:
        return BANDS.index(self.band)


@dataclass
class Result:
    policy: str
    jobs: list[Job]
    useful_gpu_h: float = 0.0
    useful_by_team: dict[str, float] = field(default_factory=dict)
    available_gpu_h: float = 0.0
    lost_preemption_gpu_h: float = 0.0
    lost_spot_gpu_h: float = 0.0
    save_gpu_h: float = 0.0
    preemptions: int = 0
    spot_evictions: int = 0
    spend: dict[str, float] = field(default_factory=dict)
    makespan_h: float = 0.0
    stopped_by_guard: int = 0
    busy_while_waiting_gpu_h: float = 0.0
    available_while_waiting_gpu_h: float = 0.0
    rented_while_queued_gpu_h: float = 0.0
    queued_for_budget: int = 0

    def within_budget_gpu_h(self, budgets: dict[str, float]) -> float:
        """Useful GPU-hours a budget allowed: each team's x min(1, limit / spend)."""
        total = 0.0
        for team, useful in self.useful_by_team.items():
            spent, limit = self.spend.get(team, 0.0), budgets.get(team)
            share = 1.0 if limit is None or spent <= limit + EPS else limit / spent
            total += useful * share
        return total

    def summary(self, budgets: dict[str, float]) -> dict[str, Any]:
        waits: dict[str, list[float]] = {b: [] for b in BANDS}
        for j in self.jobs:
            if j.first_start is not None:
                waits[j.band].append(j.first_start - j.arrival)
        over = {t: round(s - budgets[t], 2) for t, s in self.spend.items() if t in budgets
                and s > budgets[t] + 1e-6}  # fmt: skip
        lost = self.lost_preemption_gpu_h + self.lost_spot_gpu_h + self.save_gpu_h
        return {
            "policy": self.policy,
            "runs": len(self.jobs),
            "completed": sum(1 for j in self.jobs if j.state == "done"),
            "refused": sum(1 for j in self.jobs if j.state == "refused"),
            "stopped_by_budget_guard": self.stopped_by_guard,
            "queued_for_budget": self.queued_for_budget,
            "gpu_hours_rented_while_queued": round(self.rented_while_queued_gpu_h, 3),
            "budget_used": {
                t: round(s / budgets[t], 4) for t, s in sorted(self.spend.items()) if budgets.get(t)
            },
            "priority_inversions": sum(1 for j in self.jobs if j.inverted),
            "budget_overruns": len(over),
            "budget_overrun_usd": round(sum(over.values()), 2),
            "overrun_by_team": over,
            "lost_gpu_hours": round(lost, 3),
            "lost_gpu_hours_preemption": round(self.lost_preemption_gpu_h, 3),
            "lost_gpu_hours_spot": round(self.lost_spot_gpu_h, 3),
            "emergency_save_gpu_hours": round(self.save_gpu_h, 3),
            "preemptions": self.preemptions,
            "spot_evictions": self.spot_evictions,
            "wait_hours": {
                b: {
                    "runs": len(w),
                    "mean": round(sum(w) / len(w), 3) if w else None,
                    "p95": round(percentile(w, 0.95), 3) if w else None,
                }
                for b, w in waits.items()
            },
            "utilisation": round(self.useful_gpu_h / self.available_gpu_h, 4)
            if self.available_gpu_h
            else None,
            "utilisation_while_runs_wait": round(
                self.busy_while_waiting_gpu_h / self.available_while_waiting_gpu_h, 4
            )
            if self.available_while_waiting_gpu_h
            else None,
            "useful_gpu_hours": round(self.useful_gpu_h, 3),
            "refused_gpu_hours": round(
                sum(j.work * j.gpus for j in self.jobs if j.state == "refused"), 3
            ),
            "makespan_hours": round(self.makespan_h, 3),
            "spend_usd": {t: round(s, 2) for t, s in sorted(self.spend.items())},
        }


def percentile(xs: list[float], q: float) -> float:
    s = sorted(xs)
    k = max(0, math.ceil(q * len(s)) - 1)
    return s[k]


# -- the trace ----------------------------------------------------------------------------------


def _need(d: dict[str, Any], key: str, where: str) -> Any:
    if key not in d:
        raise BadInputError(f"missing {key!r}", where=where)
    return d[key]


def generate(gen: dict[str, Any], seed: int) -> list[dict[str, Any]]:
    """Runs drawn from the trace's ``generate`` section (seeded): Poisson arrivals with a
    day/night cycle, GPU counts and log-normal run times in the shape published for the
    Microsoft Philly trace (Jeon et al., USENIX ATC 2019: most runs take 1 GPU, a few take
    8 or more; run times heavy-tailed, minutes to days); not the trace itself."""
    rng = random.Random(seed)
    teams: dict[str, float] = gen["teams"]  # team -> share of arrivals
    bands: dict[str, float] = gen.get("bands", {"low": 0.3, "normal": 0.5, "high": 0.15,
                                                "critical": 0.05})  # fmt: skip
    gpus: dict[str, float] = gen.get("gpus", {"1": 0.6, "2": 0.1, "4": 0.12, "8": 0.13,
                                              "16": 0.04, "32": 0.01})  # fmt: skip
    n, horizon = int(gen["runs"]), float(gen["hours"])
    median, sigma, cap = float(gen.get("median_hours", 1.5)), float(gen.get("sigma", 1.2)), 48.0
    out: list[dict[str, Any]] = []
    t = 0.0
    rate = n / horizon
    i = 0
    while i < n:
        t += rng.expovariate(rate * 2)
        if rng.random() > 0.5 * (1 + 0.6 * math.sin(2 * math.pi * (t % 24) / 24)):
            continue  # thinning: a day/night cycle
        team = rng.choices(list(teams), list(teams.values()))[0]
        band = rng.choices(list(bands), list(bands.values()))[0]
        g = int(rng.choices(list(gpus), list(gpus.values()))[0])
        work = min(cap, max(0.05, rng.lognormvariate(math.log(median), sigma)))
        out.append({"id": f"r{i:04d}", "team": team, "priority": band, "arrival_h": round(t, 4),
                    "gpus": g, "hours": round(work, 4)})  # fmt: skip
        i += 1
    return out


@dataclass
class Trace:
    flavors: list[Flavor]
    semaphore: dict[str, int]
    budgets: dict[str, float]
    jobs: list[dict[str, Any]]
    windows: list[dict[str, Any]]  # {flavor, start_h, end_h, gpus}
    notice_s: float
    checkpoint_every_h: float
    save_s: float
    budget_factor: float
    shape: dict[str, Any]


def load_trace(doc: dict[str, Any], seed: int | None, where: str) -> Trace:
    try:
        flavors = [
            Flavor(str(f["name"]), str(f["capacity"]), int(f["gpus"]), float(f["usd_per_gpu_hour"]))
            for f in _need(doc, "flavors", where)
        ]
        teams = _need(doc, "teams", where)
        semaphore = {t: int(v.get("semaphore", 1)) for t, v in teams.items()}
        budgets = {t: float(v["budget_usd"]) for t, v in teams.items() if "budget_usd" in v}
        gen = doc.get("generate")
        use_seed = int(seed if seed is not None else doc.get("seed", 0))
        jobs = list(doc.get("runs") or []) + (generate(gen, use_seed) if gen else [])
        for f in flavors:
            if f.capacity not in ("spot", "on_demand"):
                raise BadInputError(f"flavor {f.name}: capacity must be spot or on_demand")
        for j in jobs:
            if j.get("priority", "normal") not in BANDS:
                raise BadInputError(f"run {j.get('id')}: priority must be one of {BANDS}")
            if j["team"] not in semaphore:
                raise BadInputError(f"run {j.get('id')}: team {j['team']!r} is not in teams")
        return Trace(
            flavors,
            semaphore,
            budgets,
            jobs,
            list(doc.get("capacity_windows") or []),
            float(doc.get("notice_s", 120)),
            float(doc.get("checkpoint_every_h", 0.5)),
            float(doc.get("emergency_save_s", 60)),
            float(doc.get("budget_hours_factor", 2.0)),
            {"seed": use_seed, "generate": gen},
        )
    except BadInputError as exc:
        raise BadInputError(exc.message, where=where) from exc
    except (KeyError, TypeError, ValueError) as exc:
        raise BadInputError(f"bad trace: {type(exc).__name__}: {exc}", where=where) from exc


# -- the simulation -----------------------------------------------------------------------------


class Sim:
    def __init__(self, trace: Trace, policy: str) -> None:
        self.t = trace
        self.policy = policy
        self.flavors = [Flavor(f.name, f.capacity, f.gpus, f.usd_per_gpu_hour, f.gpus)
                        for f in trace.flavors]  # fmt: skip
        # spot first (cheapest first), then on-demand
        self.flavors.sort(key=lambda f: (f.capacity != "spot", f.usd_per_gpu_hour, f.name))
        self.by_name = {f.name: f for f in self.flavors}
        # each flavor a queue of the runtime's dispatch (burst.admission.dispatch), in order
        self.queues = [
            Candidate.model_validate({"region": f.name, "provider": "sim",
                                      "capacity": f.capacity, "price_per_hour": f.usd_per_gpu_hour})
            for f in self.flavors
        ]  # fmt: skip
        self.od_price = max(f.usd_per_gpu_hour for f in self.flavors)
        self.jobs = [
            Job(str(j["id"]), str(j["team"]), str(j.get("priority", "normal")),
                float(j["arrival_h"]), int(j["gpus"]), float(j["hours"]),
                trace.checkpoint_every_h, trace.save_s / 3600.0)
            for j in trace.jobs
        ]  # fmt: skip
        self.now = 0.0
        self.events: list[tuple[float, int, str, Any]] = []
        self.seq = 0
        self.res = Result(policy, self.jobs)
        self.spent_settled: dict[str, float] = {t: 0.0 for t in trace.semaphore}
        self.reserved: dict[str, float] = {t: 0.0 for t in trace.semaphore}
        self.last_t = 0.0
        self.usage: dict[str, int] = {f.name: 0 for f in self.flavors}
        self.holding: dict[str, int] = {t: 0 for t in trace.semaphore}
        self.active: dict[str, Job] = {}  # running or saving, by id

    # -- events
    def push(self, t: float, kind: str, data: Any) -> None:
        self.seq += 1
        heapq.heappush(self.events, (t, self.seq, kind, data))

    def used(self, f: Flavor) -> int:
        return self.usage[f.name]

    def free(self, f: Flavor) -> int:
        return f.available - self.usage[f.name]

    def team_running(self, team: str) -> int:
        return self.holding[team]

    def hold(self, j: Job, flavor: str) -> None:
        j.flavor = flavor
        self.usage[flavor] += j.gpus
        self.holding[j.team] += 1
        self.active[j.id] = j

    def unhold(self, j: Job) -> None:
        if j.id in self.active:
            assert j.flavor is not None
            self.usage[j.flavor] -= j.gpus
            self.holding[j.team] -= 1
            del self.active[j.id]
        j.flavor = None

    def progress(self, j: Job) -> float:
        return j.done + (self.now - j.seg_start if j.state == "running" else 0.0)

    def accrue(self, until: float) -> None:
        """Spend and availability between the last event and ``until``."""
        dt = until - self.last_t
        if dt > 0:
            for f in self.flavors:
                self.res.available_gpu_h += f.available * dt
            if any(j.state == "waiting" for j in self.jobs):
                self.res.available_while_waiting_gpu_h += dt * sum(
                    f.available for f in self.flavors
                )
                self.res.busy_while_waiting_gpu_h += dt * min(
                    sum(f.available for f in self.flavors), sum(self.usage.values())
                )
            if self.policy == "priority":  # the old order: provision rented, then Kueue queued
                self.res.rented_while_queued_gpu_h += dt * sum(
                    j.gpus for j in self.jobs if j.state == "waiting"
                )
            for j in self.active.values():
                if j.flavor is not None:
                    cost = j.gpus * dt * self.by_name[j.flavor].usd_per_gpu_hour
                    j.spent += cost
                    self.res.spend[j.team] = self.res.spend.get(j.team, 0.0) + cost
        self.last_t = until

    # -- ordering
    def order(self) -> list[Job]:
        waiting = [j for j in self.jobs if j.state == "waiting"]
        if self.policy == "fifo-semaphore":
            return sorted(waiting, key=lambda j: (j.queued_at, j.id))
        return sorted(waiting, key=lambda j: (-j.prio, not j.head, j.queued_at, j.id))

    def start(self, j: Job, f: Flavor) -> None:
        j.state, j.seg_start = "running", self.now
        self.hold(j, f.name)
        if j.first_start is None:
            j.first_start = self.now
        j.version += 1
        self.push(self.now + (j.work - j.done), "finish", (j.id, j.version))
        if self.policy == "burst" and j.reserved > 0:  # the budget guard: stop at the reservation
            rate = j.gpus * f.usd_per_gpu_hour
            left = (j.reserved - j.spent) / rate if rate > 0 else math.inf
            if left < j.work - j.done:
                self.push(self.now + max(0.0, left), "guard", (j.id, j.version))

    def stop_segment(self, j: Job) -> None:
        j.done = self.progress(j)
        j.committed = max(
            j.committed, math.floor(j.done / j.checkpoint_every + EPS) * j.checkpoint_every
        )
        j.version += 1

    def lose(self, j: Job, *, saved: bool) -> float:
        """Back to the last committed checkpoint (``saved``: the emergency save committed
        everything). Returns the GPU-hours lost."""
        if saved:
            j.committed = j.done
        lost = (j.done - j.committed) * j.gpus
        j.done = j.committed
        return lost

    def requeue(self, j: Job) -> None:
        self.unhold(j)
        j.state = "waiting"
        j.queued_at = self.now
        j.head = self.policy == "burst"

    def settle(self, j: Job) -> None:
        if self.policy == "burst":
            self.reserved[j.team] -= j.reserved
            self.spent_settled[j.team] += j.spent
            for q in [q for q in self.jobs if q.state == "budget" and q.team == j.team]:
                self.admit(q)  # a run queued for its team's budget: looked at again

    # -- scheduling
    def fits(self, j: Job) -> Flavor | None:
        """The first flavor the runtime's dispatch tries (the queues in order, those with room
        for the run's GPUs), or None."""
        if self.team_running(j.team) >= self.t.semaphore[j.team]:
            return None
        got = dispatch(
            self.queues,
            (),
            lambda c: RegionQueue(c.region, self.free(self.by_name[c.region])),
            need=lambda _: j.gpus,
        )
        return self.by_name[got.order[0].region] if got.order else None

    def victims(self, j: Job) -> tuple[Flavor, list[Job]] | None:
        """The running runs of strictly lower priority whose GPUs would let ``j`` start."""
        if self.team_running(j.team) >= self.t.semaphore[j.team]:
            return None
        for f in self.flavors:
            if f.available < j.gpus:
                continue
            chosen = victims(
                [v for v in self.active.values() if v.state == "running" and v.flavor == f.name],
                j.gpus,
                self.free(f),
                priority=lambda v: v.prio,
                admitted_at=lambda v: v.seg_start,
                gpus=lambda v: v.gpus,
                of=j.prio,
            )
            if chosen is not None:
                return f, chosen
        return None

    def schedule(self) -> None:
        requeued = False
        for j in self.order():
            f = self.fits(j)
            if f is not None:
                self.start(j, f)
                continue
            if j.waiting_for_save or self.policy == "fifo-semaphore":
                if self.policy == "fifo-semaphore" and self.victims(j) is not None:
                    j.inverted = True  # only lower-priority runs stand in its way
                continue
            found = self.victims(j)
            if found is None:
                continue
            f, chosen = found
            for v in chosen:
                self.res.preemptions += 1
                v.preempted += 1
                self.stop_segment(v)
                if self.policy == "burst":  # save first, holding the GPUs, then lose nothing
                    v.state, v.for_job = "saving", j.id
                    self.res.save_gpu_h += v.save * v.gpus
                    self.push(self.now + v.save, "saved", (v.id, v.version))
                else:
                    self.res.lost_preemption_gpu_h += self.lose(v, saved=False)
                    self.requeue(v)
                    requeued = True
            if self.policy == "burst":
                j.waiting_for_save = len(chosen)
            else:
                self.start(j, f)
        if requeued:  # the victims just requeued may fit elsewhere now (each round's victims
            self.schedule()  # are of a strictly lower band: at most one round per band)

    # -- the run
    def run(self) -> Result:
        for j in self.jobs:
            self.push(j.arrival, "arrive", j.id)
        for w in self.t.windows:
            self.push(float(w["start_h"]), "window", (str(w["flavor"]), int(w["gpus"])))
            self.push(float(w["end_h"]), "window", (str(w["flavor"]), None))
        byid = {j.id: j for j in self.jobs}
        while self.events:
            t, _, kind, data = heapq.heappop(self.events)
            if (kind == "deadline" and byid[data].state != "budget") or (
                kind in ("finish", "guard", "saved") and byid[data[0]].version != data[1]
            ):
                # stale (admitted before its deadline; stopped or moved before this end):
                # nothing happens, and the clock does not move, so it is no policy's last
                # event; the schedule the events of this instant deferred still runs
                if t <= self.now + EPS and (not self.events or self.events[0][0] > t + EPS):
                    self.schedule()
                continue
            self.accrue(t)
            self.now = t
            if kind == "arrive":
                self.arrive(byid[data])
            elif kind == "finish":
                j = byid[data[0]]
                if j.state == "running" and j.version == data[1]:
                    self.stop_segment(j)
                    self.unhold(j)
                    j.state, j.finished = "done", self.now
                    self.useful(j, j.work)
                    self.settle(j)
            elif kind == "guard":
                j = byid[data[0]]
                if j.state == "running" and j.version == data[1]:
                    self.stop_segment(j)
                    self.unhold(j)
                    j.state, j.finished = "stopped", self.now
                    self.res.stopped_by_guard += 1
                    self.useful(j, j.done)
                    self.settle(j)
            elif kind == "saved":
                j = byid[data[0]]
                if j.state == "saving" and j.version == data[1]:
                    self.lose(j, saved=True)
                    self.requeue(j)
                    waiting = byid.get(j.for_job or "")
                    if waiting is not None and waiting.waiting_for_save > 0:
                        waiting.waiting_for_save -= 1
                    j.for_job = None
            elif kind == "window":
                self.window(*data)
            elif kind == "deadline":
                j = byid[data]
                if j.state == "budget":  # still queued for its budget at its deadline
                    self.admit(j, at_deadline=True)
            if not self.events or self.events[0][0] > self.now + EPS:
                self.schedule()
        self.res.makespan_h = self.now
        return self.res

    def useful(self, j: Job, hours: float) -> None:
        self.res.useful_gpu_h += hours * j.gpus
        self.res.useful_by_team[j.team] = self.res.useful_by_team.get(j.team, 0.0) + hours * j.gpus

    def arrive(self, j: Job) -> None:
        j.queued_at = self.now
        if self.policy == "burst" and j.team in self.t.budgets:
            # the runtime's reservation (burst.admission.admit.reservation): the dearest
            # flavor's rate for the run's budget hours (its work x budget_hours_factor)
            j.reserved, _ = reserve_usd(
                j.gpus * self.od_price, j.work * self.t.budget_factor, math.inf
            )
            self.admit(j)
            if j.state == "budget":  # queued: its deadline is its budget hours away
                self.push(self.now + j.work * self.t.budget_factor, "deadline", j.id)
            return
        j.state = "waiting"

    def admit(self, j: Job, *, at_deadline: bool = False) -> None:
        """The runtime's decision (burst.admission.policy.decide): admitted (it waits for
        GPUs), with its reservation or what its team has left; queued for its team's budget
        (renting nothing); or refused."""
        v, amount = decide(
            self.t.budgets[j.team],
            self.spent_settled[j.team],
            self.reserved[j.team],
            j.reserved,
            at_deadline=at_deadline,
        )
        if v == "admit":
            j.reserved = amount
            self.reserved[j.team] += amount
            j.state, j.queued_at = "waiting", self.now
        elif v == "queue":
            if j.state != "budget":
                self.res.queued_for_budget += 1
            j.state = "budget"
        else:
            j.state = "refused"

    def window(self, name: str, gpus: int | None) -> None:
        f = self.by_name.get(name)
        if f is None:
            return
        f.available = f.gpus if gpus is None else min(f.gpus, gpus)
        # spot capacity withdrawn: evict the most recently started runs until the rest fit
        running = sorted((j for j in self.active.values() if j.flavor == name
                          and j.state == "running"),
                         key=lambda j: (-j.seg_start, j.id))  # fmt: skip
        for j in running:
            if self.used(f) <= f.available:
                break
            self.res.spot_evictions += 1
            self.stop_segment(j)
            saved = self.policy == "burst" and j.save * 3600 <= self.t.notice_s
            if saved:
                self.res.save_gpu_h += j.save * j.gpus
            self.res.lost_spot_gpu_h += self.lose(j, saved=saved)
            self.requeue(j)


def capacity_gpu_h(trace: Trace, until: float) -> float:
    """GPU-hours the trace's flavors make available from 0 to ``until`` (capacity windows
    applied as the simulator applies them: a window's start, then its end, in file order)."""
    gpus = {f.name: f.gpus for f in trace.flavors}
    now = {f.name: f.gpus for f in trace.flavors}
    events: list[tuple[float, int, str, int | None]] = []
    for i, w in enumerate(trace.windows):
        events += [(float(w["start_h"]), 2 * i, str(w["flavor"]), int(w["gpus"])),
                   (float(w["end_h"]), 2 * i + 1, str(w["flavor"]), None)]  # fmt: skip
    total, last = 0.0, 0.0
    for t, _, name, g in sorted(events):
        if t >= until:
            break
        total += sum(now.values()) * (t - last)
        last = t
        if name in now:
            now[name] = gpus[name] if g is None else min(gpus[name], g)
    return total + sum(now.values()) * max(0.0, until - last)


#: What the report's utilisation figures mean (``utilisation_definition``).
UTILISATION_DEFINITION = {
    "utilisation": "raw: useful GPU-hours / GPU-hours available until this arm's own last "
    "event (each arm its own horizon; work past a budget counts)",
    "utilisation_fair": "useful GPU-hours within each team's budget (a team's useful GPU-hours "
    "x min(1, limit / spend)) / GPU-hours available until the last run of any arm ends (one "
    "horizon for every arm); the goal's basis",
}


def simulate(trace: Trace) -> dict[str, Any]:
    """Every policy on the trace; the report with the shape of the trace and the goals."""
    runs = {p: Sim(trace, p).run() for p in POLICIES}
    results = {p: r.summary(trace.budgets) for p, r in runs.items()}
    horizon = max(r.makespan_h for r in runs.values())
    available = capacity_gpu_h(trace, horizon)
    for p, r in runs.items():
        within = r.within_budget_gpu_h(trace.budgets)
        results[p]["useful_gpu_hours_within_budget"] = round(within, 3)
        results[p]["utilisation_fair"] = round(within / available, 4) if available else None
    b = results["burst"]
    base = [results["fifo-semaphore"], results["priority"]]
    best_util = max(r["utilisation_fair"] or 0 for r in base)
    demand = results["fifo-semaphore"]["spend_usd"]
    over_demand = sorted(t for t, lim in trace.budgets.items() if demand.get(t, 0.0) > lim)
    goals = {
        "zero_inversions": b["priority_inversions"] == 0,
        "zero_overruns": b["budget_overruns"] == 0,
        "lost_at_most_half_of_baselines": all(
            b["lost_gpu_hours"] <= 0.5 * r["lost_gpu_hours"] + EPS for r in base
        ),
        "utilisation_within_5pct_of_best_baseline": (b["utilisation_fair"] or 0)
        >= best_util * 0.95 - EPS,
        "zero_gpu_hours_rented_while_queued": b["gpu_hours_rented_while_queued"] == 0,
        # a team whose demand (its spend with no budget: the FIFO arm) passes its limit ends
        # between 95 % and 100 % of it: no overrun, little left unused by over-reserving
        "over_demand_teams_use_95_to_100pct": all(
            0.95 - EPS <= b["budget_used"].get(t, 0.0) <= 1.0 + EPS for t in over_demand
        ),
    }
    jobs = trace.jobs
    return {
        "trace": {
            **trace.shape,
            "runs": len(jobs),
            "gpu_hours_demanded": round(sum(j["gpus"] * j["hours"] for j in jobs), 1),
            "flavors": [
                {
                    "name": f.name,
                    "capacity": f.capacity,
                    "gpus": f.gpus,
                    "usd_per_gpu_hour": f.usd_per_gpu_hour,
                }
                for f in trace.flavors
            ],
            "capacity_windows": len(trace.windows),
            "notice_s": trace.notice_s,
            "checkpoint_every_h": trace.checkpoint_every_h,
            "emergency_save_s": trace.save_s,
            "semaphore": trace.semaphore,
            "budgets_usd": trace.budgets,
            "teams_over_demand": over_demand,
        },
        "policies": results,
        "utilisation_definition": {
            **UTILISATION_DEFINITION,
            "horizon_hours": round(horizon, 3),
            "available_gpu_hours": round(available, 3),
            "goal": "burst's utilisation_fair >= 95 % of the best baseline's",
        },
        "goals": goals,
    }
