"""Recovery: what a run does after it loses capacity, its node, or its train process.

One concept, written once, with named strategies chosen in the spec (``compute.recovery``):

* capacity failover (provisioning): a candidate without capacity is cleaned up and the next
  one is tried (:meth:`RecoveryStrategy.fails_over`);
* retry in place: train preempted (exit 75), its node lost (Argo: exit ``-1``, "pod deleted")
  or its checkpoint store down past its retry window (exit 4) is started again in the same
  placement, ``retries_in_place`` times (the train template's ``retryStrategy``);
* requeue: after that, train is placed again in another of the plan's candidates
  (:meth:`RecoveryStrategy.requeue_order`), at most ``max_placements`` candidates in all;
* restart: train killed by a signal (exit 128 + SIGKILL = 137: the OOM killer, a kubelet
  after the grace period, an operator) is started again in the same placement from the last
  committed checkpoint, at most ``max_restarts_on_kill`` times per run, then the run fails.
  A ``training.command`` program's worker killed so under a launcher that exits 1 for it
  (torchrun) is a killed program too: the train step exits 137 for it
  (``burst.program.exits.killed_worker``).

Strategies (as SkyPilot's ``sky/jobs/recovery_strategy.py`` names its own):

``failover``
    retry in place ``preemptions_per_region`` times (the region first), then requeue.
``eager_next_region``
    no retry in place: requeue at the first loss.

A requeue goes to the plan's next candidate *after the one train ran in* (plan order,
wrapping around to candidates that had no capacity earlier), another region's first (the
region just left lost the node, its other candidates come last), never a candidate train
already ran in.

Either may fall back to on-demand (``on_demand_after``): once the run has lost that many
spot nodes, on-demand candidates go first. And come back (``probe_interval_s``): a train
attempt on such a fallback probes spot at its checkpoint boundaries
(``burst.train.spot_probe``) and, when :func:`back_to_spot` (the one rule, which the goodput
simulator's fallback mode ``burst.plan.fallback`` calls too) predicts a saving larger than the
move's cost, commits there and ends with exit 76 (requeued at once, never retried in place)
and ``recovery_source`` ``back_to_spot`` (no budget spent); the requeue after it
(``place(..., last_source=BACK_TO_SPOT)``) puts spot candidates first and counts the spot
losses afresh.

Two budgets, kept apart (as SkyPilot and Ray keep them): ``max_preemptions`` (default
unlimited) for capacity taken away (a provider's notice, a lost node, a control-plane
eviction) and ``max_failures`` for what went wrong in the run (train killed, crashed, a rank
lost, its checkpoint store down past its window). Every attempt of the train step records
what ended it (``recovery_source``: :data:`SOURCES`, :func:`source_of`); a cancel counts in
neither budget. The train step checks both at the start of every attempt, from the run's
attempt records (:func:`check_budgets`): the local runner and Argo run that same step, so both
paths spend the same two budgets; the template's counts (``preemptions_per_region``,
``max_placements``, ``max_restarts_on_kill``) only bound where and how recovery happens.

The compiled template (``burst/pipelines/burst_train.py``) takes its expressions from here
(:data:`RETRY_IN_PLACE`, :func:`requeue_when`, :func:`restart_when`, :func:`give_up_when`);
the local runner executes that template, so both decide the same way; the provision step
(``burst/steps/provision.py``) orders the candidates and records what the next decision may do in
its document's ``recovery`` section, which those expressions read.
"""

from __future__ import annotations

import logging
import math
import signal
from collections.abc import Sequence
from dataclasses import dataclass, fields
from typing import Any, Final, Literal

from burst.documents.plan import Candidate
from burst.documents.provision import PlacedCandidate, RecoveryRecord
from burst.errors import EXIT_FAILURE, BadInputError, BurstError, CapacityError, InfraError
from burst.spec import BurstJob, Recovery, RecoveryStrategyName

log = logging.getLogger(__name__)

#: Exit codes, as Argo reports them (strings): train preempted, its store down (burst.errors).
EXIT_PREEMPTED: Final = 75
#: Train moved back to spot (``burst.errors.EXIT_MOVED``): not retried in place (the
#: placement it left), requeued.
EXIT_MOVED: Final = 76
EXIT_INFRA: Final = 4
#: Killed by a signal, as the kubelet records it (128 + N): SIGKILL only, which is what the
#: OOM killer, a kubelet after the grace period and ``kill -9`` send (a SIGTERM is a notice:
#: the train step saves and exits 75).
EXIT_KILLED: Final = 128 + int(signal.SIGKILL)

#: The events a placement starts on (``BURST_RECOVERY_EVENT``): the run's first placement,
#: a requeue after losses, a restart after a kill.
Event = Literal["start", "requeue", "restart"]
START: Final = "start"
REQUEUE: Final = "requeue"
RESTART: Final = "restart"
EVENTS: Final[tuple[Event, ...]] = (START, REQUEUE, RESTART)

# --------------------------------------------------------------------------- sources, budgets
#: What ended an attempt (``TrainAttempt.recovery_source``).
PREEMPTION: Final = "preemption"
FAILURE: Final = "failure"
NODE_LOSS: Final = "node_loss"
CONTROL_PLANE: Final = "control_plane"
CANCEL: Final = "cancel"
#: The attempt ended itself to move from an on-demand fallback back to spot
#: (:func:`back_to_spot`): the run chose it, so it spends neither budget.
BACK_TO_SPOT: Final = "back_to_spot"
#: Kueue evicted the run's Workload: a higher-priority run took its team's quota
#: (burst.admission.kueue_watch). The capacity is not lost: the requeue waits in the queue for
#: the same placement first (exit 76, never retried in place on nodes the quota left).
QUOTA: Final = "quota"
#: The notice source of that eviction (burst.admission.kueue_watch.SOURCE).
QUOTA_NOTICE: Final = "kueue-evicted"
SOURCES: Final = (PREEMPTION, FAILURE, NODE_LOSS, CONTROL_PLANE, CANCEL, BACK_TO_SPOT, QUOTA)
#: Which budget each source spends (a cancel and a move back to spot spend none).
PREEMPTION_BUDGET: Final = frozenset({PREEMPTION, NODE_LOSS, CONTROL_PLANE, QUOTA})
FAILURE_BUDGET: Final = frozenset({FAILURE})

#: Notice sources (``burst.preempt``) that are a provider taking the capacity back.
PROVIDER_NOTICES: Final = ("aws-spot-", "gcp-preempted", "azure-preempt", "local")
#: Outcomes (``TrainAttempt.outcome``) that are the run's own failure.
FAILED_OUTCOMES: Final = frozenset({"failed", "rank-lost", "store-down", "final-save-lost"})


def notice_source(source: str | None, *, cancelled: bool = False) -> str:
    """The recovery source of an attempt stopped by a notice from ``source``: a provider's
    notice is a preemption; SIGINT (Ctrl-C) or a stop on request (``cancelled``) a cancel;
    a SIGTERM alone is the control plane stopping the pod (an eviction, a drain, a Kueue
    preemption: the provider's own notice, when one came, is the one recorded)."""
    src = source or ""
    if cancelled or src == "sigint":
        return CANCEL
    if src == QUOTA_NOTICE:
        return QUOTA
    if src.startswith(PROVIDER_NOTICES):
        return PREEMPTION
    return CONTROL_PLANE


def source_of(outcome: str | None, notice: str | None, recorded: str | None = None) -> str | None:
    """An attempt's recovery source from what its record says (``recorded`` wins): None for
    an attempt that finished, was stopped by the run's money or time budget, or is open."""
    if recorded is not None:
        return recorded
    if outcome == "preempted":
        return notice_source(notice)
    if outcome == "died":  # closed by nobody: the process went with no word (node, SIGKILL)
        return NODE_LOSS
    if outcome in FAILED_OUTCOMES:
        return FAILURE
    return None


@dataclass(frozen=True)
class Spent:
    """What the run's attempts spent of the two budgets."""

    preemptions: int = 0
    failures: int = 0
    cancels: int = 0

    @staticmethod
    def of(sources: Sequence[str | None]) -> Spent:
        return Spent(
            preemptions=sum(1 for s in sources if s in PREEMPTION_BUDGET),
            failures=sum(1 for s in sources if s in FAILURE_BUDGET),
            cancels=sum(1 for s in sources if s == CANCEL),
        )

    def over(self, settings: Recovery) -> str | None:
        """Why another attempt may not start (a budget spent), or None."""
        limit = settings.max_preemptions
        if limit is not None and self.preemptions > limit:
            return (
                f"{self.preemptions} preemption(s) (notices, lost nodes, evictions) and "
                f"compute.recovery.max_preemptions is {limit}"
            )
        if self.failures > settings.max_failures:
            return (
                f"{self.failures} failure(s) (killed, crashed, store down) and "
                f"compute.recovery.max_failures is {settings.max_failures}"
            )
        return None


class RecoveryBudgetSpent(BurstError):
    """A recovery budget is spent: the run fails (exit 1: no retry, requeue or restart)."""

    exit_code = EXIT_FAILURE


def check_budgets(settings: Recovery, sources: Sequence[str | None]) -> Spent:
    """At the start of an attempt: raise :class:`RecoveryBudgetSpent` when the attempts
    before it spent a budget, else say what they spent."""
    spent = Spent.of(sources)
    why = spent.over(settings)
    if why is not None:
        raise RecoveryBudgetSpent(f"recovery budget spent: {why}; the run fails here")
    return spent


# --------------------------------------------------------------------------- back to spot
#: The spec's default margin (``compute.recovery.move_margin``): a move must save this share
#: of what staying on demand would cost, beyond the move's own cost.
DEFAULT_MOVE_MARGIN: Final = 0.1


@dataclass(frozen=True, kw_only=True)
class MoveCost:
    """What moving a run's checkpoint to another placement costs, whatever the prices: the
    one definition of the move's terms, for :class:`MoveInputs` (back to spot) and
    :class:`burst.admission.dispatch.Pin` (a resumed run pinned to its checkpoint's region).

    ``remaining_hours``: the useful training left. The move's seconds (an emergency-style save
    at the boundary, provisioning the new placement, pulling the image, restoring the
    checkpoint) are paid at the rate of the placement left; ``egress_usd_per_gb`` is the price
    of moving the checkpoint's ``checkpoint_gb`` (0 in the same region); ``margin``: the share
    of staying's cost a move must save beyond its own cost."""

    remaining_hours: float
    save_s: float = 0.0
    provision_s: float = 0.0
    pull_s: float = 0.0
    restore_s: float = 0.0
    checkpoint_gb: float = 0.0
    egress_usd_per_gb: float = 0.0
    margin: float = DEFAULT_MOVE_MARGIN

    def move_cost(self) -> dict[str, Any]:
        """This object's :class:`MoveCost` fields, by name (a subclass's too): what a
        :class:`MoveInputs` is built from."""
        return {f.name: getattr(self, f.name) for f in fields(MoveCost)}


@dataclass(frozen=True, kw_only=True)
class MoveInputs(MoveCost):
    """What :func:`back_to_spot` weighs, each from the plan or measured where it exists: the
    move's cost (:class:`MoveCost`, paid at the on-demand rate) and the two placements' prices.

    Prices are USD per hour for the whole placement (every node); ``spot_mtbf_hours`` is the
    job's mean time between pre-emptions on the spot candidate (``burst.plan.reliability``).
    Every spot pre-emption after the move loses ``checkpoint_interval_s / 2`` of work on
    average and costs ``restart_s`` (None: provision + pull + restore again) at the spot rate.
    """

    on_demand_usd_per_hour: float
    spot_usd_per_hour: float
    spot_mtbf_hours: float
    checkpoint_interval_s: float = 0.0
    restart_s: float | None = None
    spot_available: bool = True
    spot_candidate: str = "spot"

    def restart(self) -> float:
        if self.restart_s is not None:
            return self.restart_s
        return self.provision_s + self.pull_s + self.restore_s


@dataclass(frozen=True)
class MoveTerm:
    """One named term of the decision (as ``burst plan --explain`` names cost terms)."""

    term: str
    usd: float
    detail: str

    def as_dict(self) -> dict[str, Any]:
        usd = round(self.usd, 6) if math.isfinite(self.usd) else None  # None: never finishes
        return {"term": self.term, "usd": usd, "detail": self.detail}


@dataclass(frozen=True)
class MoveDecision:
    """Move back to spot or stay on demand, and why, term by term: ``saving_usd`` (staying
    less spot's predicted cost, its lost work included) against ``cost_usd`` (the move) plus
    ``margin_usd``."""

    move: bool
    reason: str
    saving_usd: float
    cost_usd: float
    margin_usd: float
    terms: tuple[MoveTerm, ...]

    def as_dict(self) -> dict[str, Any]:
        return {
            "decision": "move" if self.move else "stay",
            "reason": self.reason,
            "saving_usd": round(self.saving_usd, 6),
            "move_cost_usd": round(self.cost_usd, 6),
            "margin_usd": round(self.margin_usd, 6),
            "terms": [t.as_dict() for t in self.terms],
        }


def _check_inputs(m: MoveInputs) -> None:
    for name in (
        "on_demand_usd_per_hour",
        "spot_usd_per_hour",
        "remaining_hours",
        "save_s",
        "provision_s",
        "pull_s",
        "restore_s",
        "checkpoint_gb",
        "egress_usd_per_gb",
        "checkpoint_interval_s",
        "margin",
    ):
        v = getattr(m, name)
        if not (isinstance(v, int | float) and math.isfinite(v) and v >= 0):
            raise BadInputError(f"back to spot: {name} must be a finite number >= 0 (got {v!r})")
    if not (m.spot_mtbf_hours > 0):
        raise BadInputError(
            f"back to spot: spot_mtbf_hours must be > 0 (got {m.spot_mtbf_hours!r})"
        )
    if m.restart_s is not None and not (math.isfinite(m.restart_s) and m.restart_s >= 0):
        raise BadInputError(f"back to spot: restart_s must be >= 0 (got {m.restart_s!r})")


def back_to_spot(m: MoveInputs) -> MoveDecision:
    """THE rule, for the runtime (``burst.train.spot_probe``) and the simulator
    (``burst.plan.goodput.simulate_fallback``) alike: a run on an on-demand fallback moves
    back to spot when spot is available and the predicted saving exceeds the move's cost
    plus the margin.

    saving = on_demand x remaining - (spot x remaining + spot lost work), where spot's lost
    work is its expected pre-emptions (remaining / MTBF) x (half an interval + a restart);
    cost = (save + provision + pull + restore) x on_demand + checkpoint GB x egress;
    margin = margin x on_demand x remaining."""
    _check_inputs(m)
    od, spot, rest = m.on_demand_usd_per_hour, m.spot_usd_per_hour, m.remaining_hours
    stay = od * rest
    lost_s = m.checkpoint_interval_s / 2.0 + m.restart()
    # each pre-emption (one per MTBF of spot time) costs lost_s, so spot runs rest / (1 - f)
    # hours for rest of work, f = lost_s / MTBF; f >= 1: it never gets there
    share = lost_s / 3600.0 / m.spot_mtbf_hours
    spot_hours = rest / (1.0 - share) if share < 1.0 else math.inf
    preemptions = spot_hours / m.spot_mtbf_hours
    lost_usd = spot * (spot_hours - rest) if spot_hours < math.inf else math.inf

    def paid(seconds: float) -> float:
        return od * seconds / 3600.0

    terms = (
        MoveTerm("stay_on_demand", stay, f"{rest:.4g} h left x ${od:g}/h on demand"),
        MoveTerm("spot_compute", spot * rest, f"{rest:.4g} h x ${spot:g}/h on {m.spot_candidate}"),
        MoveTerm(
            "spot_lost_work",
            lost_usd,
            f"{preemptions:.4g} expected pre-emption(s) ({spot_hours:.4g} h on spot / "
            f"{m.spot_mtbf_hours:.4g} h MTBF) x ({m.checkpoint_interval_s / 2.0:.4g} s half an "
            f"interval + {m.restart():.4g} s restart) at ${spot:g}/h",
        ),
        MoveTerm("save", paid(m.save_s), f"{m.save_s:.4g} s at ${od:g}/h"),
        MoveTerm("provision", paid(m.provision_s), f"{m.provision_s:.4g} s at ${od:g}/h"),
        MoveTerm("image_pull", paid(m.pull_s), f"{m.pull_s:.4g} s at ${od:g}/h"),
        MoveTerm("restore", paid(m.restore_s), f"{m.restore_s:.4g} s at ${od:g}/h"),
        MoveTerm(
            "egress",
            m.checkpoint_gb * m.egress_usd_per_gb,
            f"{m.checkpoint_gb:.4g} GB checkpoint x ${m.egress_usd_per_gb:g}/GB",
        ),
        MoveTerm("margin", m.margin * stay, f"{m.margin:g} x staying on demand"),
    )
    by = {t.term: t.usd for t in terms}
    saving = stay - by["spot_compute"] - by["spot_lost_work"]
    cost = sum(by[k] for k in ("save", "provision", "image_pull", "restore", "egress"))
    margin = by["margin"]
    if not m.spot_available:
        move, reason = False, f"stay: no spot capacity on {m.spot_candidate}"
    elif math.isinf(lost_usd):
        move = False
        reason = (
            f"stay on demand: on {m.spot_candidate} a pre-emption every "
            f"{m.spot_mtbf_hours:.4g} h loses {lost_s:.4g} s: spot would never finish"
        )
    elif saving > cost + margin:
        move = True
        reason = (
            f"move to {m.spot_candidate}: saves ${saving:,.2f} (spot ${by['spot_compute']:,.2f} + "
            f"lost work ${by['spot_lost_work']:,.2f} against ${stay:,.2f} on demand), more than "
            f"the move's ${cost:,.2f} + margin ${margin:,.2f}"
        )
    else:
        move = False
        reason = (
            f"stay on demand: moving to {m.spot_candidate} saves ${saving:,.2f}, not more than "
            f"the move's ${cost:,.2f} (egress ${by['egress']:,.2f}) + margin ${margin:,.2f}"
        )
    return MoveDecision(move, reason, saving, cost, margin, terms)


# --------------------------------------------------------------------------- the template
#: train's ``retryStrategy.expression``: preemption (75), the checkpoint store down past its
#: retry window (4: the next attempt resumes from what the store holds), node loss. Argo
#: gives ``lastRetry.exitCode`` as a string, "-1" when the pod left none (operator.go,
#: buildRetryStrategyLocalScope), with the message "pod deleted" (or "imminent node
#: shutdown") after node loss; a kill (137) is not retried here but restarted by the place
#: template (bounded per run, not per placement).
RETRY_IN_PLACE: Final = (
    f"lastRetry.exitCode == '{EXIT_PREEMPTED}' || lastRetry.exitCode == '{EXIT_INFRA}' || "
    "(lastRetry.exitCode == '-1' && (lastRetry.message contains 'pod deleted' || "
    "lastRetry.message contains 'imminent node shutdown'))"
)

#: In the ``place`` template: train's exit code only through get(...) ?? '' (a lost node
#: leaves none, and naming a missing variable requeues a step forever from Argo v3.7.11 /
#: v4.0.2: steps.go, resolveReferences), its status, and provision's recovery record.
_CODE = "(get(steps.train, 'exitCode') ?? '')"
_NOT_DONE = "steps.train.status != 'Succeeded'"
_LOST = (
    f"(steps.train.status == 'Error' || {_CODE} == '{EXIT_PREEMPTED}' || {_CODE} == '{EXIT_MOVED}')"
)
_KILLED = f"({_CODE} == '{EXIT_KILLED}')"
_RECORD = "steps.provision.outputs.parameters.infra"


def _may(field: str) -> str:
    return f"(jsonpath({_RECORD}, '$.recovery.{field}') == true)"


def exit_code_expression() -> str:
    """train's exit code in the ``place`` template ('' when it left none)."""
    return _CODE


#: train left its placement (exit 76): a move back to spot, or its Kueue quota taken
_LEFT = f"({_CODE} == '{EXIT_MOVED}')"


def _requeued() -> str:
    """Lost with another candidate to go to, or left with the budgets for another wait."""
    return f"(({_LOST} && {_may('may_requeue')}) || ({_LEFT} && {_may('may_wait_again')}))"


def requeue_when() -> str:
    """The requeue step's ``when``: train lost (preempted, node lost) and the strategy has
    another candidate for it; or train left its placement (exit 76) and may wait again."""
    return f"{_NOT_DONE} && {_requeued()}"


def restart_when() -> str:
    """The restart step's ``when``: train killed, restarts left."""
    return f"{_NOT_DONE} && {_KILLED} && {_may('may_restart')}"


def give_up_when() -> str:
    """give-up's ``when``: train did not succeed and is neither requeued nor restarted."""
    return f"{_NOT_DONE} && !{_requeued()} && !({_KILLED} && {_may('may_restart')})"


# --------------------------------------------------------------------------- strategies


@dataclass(frozen=True)
class Placement:
    """Where a placement may go (in order) and the record it starts from."""

    candidates: list[Candidate]
    record: RecoveryRecord


@dataclass(frozen=True)
class RecoveryStrategy:
    """A named recovery strategy with the spec's bounds (this class is ``failover``).
    Subclasses override :meth:`retries_in_place` or :meth:`_order`; the rest is written
    once."""

    settings: Recovery
    name: str = RecoveryStrategyName.failover.value
    #: provisioning stops after this many candidates (None: all of them)
    max_attempts: int | None = None
    #: what a plan candidate without a capacity is provisioned as (the spec's first kind)
    default_capacity: str | None = None

    def _key(self, c: Candidate | PlacedCandidate) -> tuple[str, str, str | None]:
        """A candidate's identity: a plan candidate without a capacity is the spec's."""
        return (c.region, c.provider, c.capacity or self.default_capacity)

    # -- provisioning: capacity failover
    def fails_over(self, exc: InfraError) -> bool:
        """A capacity error moves provisioning to the next candidate; anything else stops."""
        return isinstance(exc, CapacityError)

    # -- retry in place (the template's retryStrategy limit)
    def retries_in_place(self) -> int:
        return self.settings.preemptions_per_region

    # -- requeue
    def _order(self, allowed: list[Candidate], lost: Candidate) -> list[Candidate]:
        """Plan order after the candidate just lost, wrapping around; the lost one's
        region last."""
        keys = [self._key(c) for c in allowed]
        at = keys.index(self._key(lost)) + 1 if self._key(lost) in keys else 0
        order = allowed[at:] + allowed[:at]
        return [c for c in order if c.region != lost.region] + [
            c for c in order if c.region == lost.region
        ]

    def requeue_order(
        self, allowed: list[Candidate], lost: Candidate, record: RecoveryRecord
    ) -> list[Candidate]:
        """Where a requeue may go, best first: the strategy's order, on-demand first once
        ``on_demand_after`` spot nodes were lost; never a candidate train already ran in."""
        if record.back_to_spot:  # the run chose to leave an on-demand fallback for spot
            return self._back_to_spot_order(allowed, lost)
        used = {self._key(p) for p in record.history} | {self._key(lost)}
        order = [c for c in self._order(allowed, lost) if self._key(c) not in used]
        limit = self.settings.on_demand_after
        if limit is not None and record.spot_losses >= limit:
            on_demand = [c for c in order if c.capacity == "on_demand"]
            if on_demand:
                order = on_demand + [c for c in order if c.capacity != "on_demand"]
            else:
                log.warning(
                    "%d spot node(s) lost (on_demand_after %d), but no on-demand candidate is "
                    "left in the plan: requeueing on spot",
                    record.spot_losses,
                    limit,
                )
        return order

    def _back_to_spot_order(self, allowed: list[Candidate], lost: Candidate) -> list[Candidate]:
        """After a move back to spot: the plan's spot candidates first, in plan order (the
        order the probe took them in: ``burst.train.spot_probe``), a spot candidate train ran
        in before included (its capacity came back); then the other candidates, should no
        spot candidate have capacity after all; never the placement just left."""
        rest = [c for c in allowed if self._key(c) != self._key(lost)]
        spot = [c for c in rest if (c.capacity or self.default_capacity) == "spot"]
        return spot + [c for c in rest if c not in spot]

    # -- the place template's decisions
    def place(
        self,
        allowed: Sequence[Candidate],
        previous: RecoveryRecord | None,
        event: str,
        *,
        last_source: str | None = None,
    ) -> Placement:
        """The candidates to provision, in order, for a placement that starts on ``event``
        after the placement ``previous`` recorded (None: the run's first). ``last_source``:
        what ended the previous placement's last train attempt (its ``recovery_source``);
        :data:`BACK_TO_SPOT` after an on-demand placement makes the requeue a move back to
        spot (spot candidates first, the spot losses counted afresh)."""
        allowed = list(allowed)
        if event not in EVENTS:
            raise BadInputError(f"recovery event {event!r} is not one of {', '.join(EVENTS)}")
        if event == START or previous is None or previous.candidate is None:
            if event != START:
                raise BadInputError(
                    f"recovery event {event}: the previous placement's provision document "
                    "(--input previous=...) names no candidate"
                )
            return Placement(allowed, RecoveryRecord(strategy=self.name, event=START))
        last = previous.candidate
        lost = Candidate.model_validate(last.model_dump(exclude={"ended"}))
        history = [*previous.history, last.model_copy(update={"ended": event})]
        if event == RESTART:
            record = previous.model_copy(
                update={"event": RESTART, "history": history, "restarts": previous.restarts + 1}
            )
            same = [c for c in allowed if self._key(c) == self._key(lost)]
            if not same:
                raise CapacityError(
                    f"restart: {lost.provider}/{lost.region} ({lost.capacity}) is no longer "
                    "an allowed candidate of the plan"
                )
            return Placement(same, record)
        moved = last_source == BACK_TO_SPOT and self._key(lost)[2] == "on_demand"
        spot = lost.capacity == "spot" and last_source != QUOTA  # (a quota: no spot loss)
        losses = self.retries_in_place() + 1 if spot else 0
        record = previous.model_copy(
            update={
                "event": REQUEUE,
                "history": history,
                "requeues": previous.requeues + 1,
                # a move back to spot starts the count of on_demand_after afresh
                "spot_losses": 0 if moved else previous.spot_losses + losses,
                "back_to_spot": moved,
            }
        )
        order = self.requeue_order(allowed, lost, record)
        if last_source == QUOTA:  # the quota went, not the capacity: wait for it again here
            order = [c for c in allowed if self._key(c) == self._key(lost)][:1] + order
        if not order:
            raise CapacityError(
                f"requeue: no candidate left after {len(history)} placement(s) "
                f"({len(allowed)} allowed candidate(s) in the plan)"
            )
        return Placement(order, record)

    def placed(
        self, placement: Placement, candidate: Candidate, allowed: Sequence[Candidate]
    ) -> RecoveryRecord:
        """The record of a placement that landed in ``candidate``: what a loss or a kill
        there may do next (the template's ``when``s read ``may_requeue``/``may_restart``)."""
        record = placement.record.model_copy(
            update={
                "candidate": PlacedCandidate(
                    region=candidate.region,
                    provider=candidate.provider,
                    capacity=candidate.capacity,
                )
            }
        )
        # a later loss here requeues the usual way (a move back to spot was this placement)
        later = record.model_copy(update={"back_to_spot": False})
        left = self.requeue_order(list(allowed), candidate, later)
        # the loss that would requeue is at least the run's (requeues + 1)-th
        budgets = record.requeues + 1 < self.settings.max_placements and (
            self.settings.max_preemptions is None
            or record.requeues + 1 <= self.settings.max_preemptions
        )
        return record.model_copy(
            update={
                "may_requeue": bool(left) and budgets,
                # a quota taken (exit 76) requeues into this placement again
                "may_wait_again": budgets,
                # a kill is a failure: its own bound and the run's failure budget
                "may_restart": record.restarts
                < min(self.settings.max_restarts_on_kill, self.settings.max_failures),
                "retries_in_place": self.retries_in_place(),
            }
        )


@dataclass(frozen=True)
class EagerNextRegion(RecoveryStrategy):
    """SkyPilot's EAGER_NEXT_REGION: leave the region at the first loss."""

    name: str = RecoveryStrategyName.eager_next_region.value

    def retries_in_place(self) -> int:
        return 0


STRATEGIES: Final[dict[str, type[RecoveryStrategy]]] = {
    RecoveryStrategyName.failover.value: RecoveryStrategy,
    RecoveryStrategyName.eager_next_region.value: EagerNextRegion,
}


def strategy_for(job: BurstJob, *, max_attempts: int | None = None) -> RecoveryStrategy:
    """The spec's recovery strategy (``compute.recovery``)."""
    from burst.plan.placement import default_capacity

    settings = job.compute.recovery
    return STRATEGIES[str(settings.strategy)](
        settings,
        max_attempts=max_attempts,
        default_capacity=default_capacity(job.compute.capacity),
    )


def template_parameters(job: BurstJob) -> dict[str, str]:
    """The burst-train parameters recovery decides (``burst submit`` and ``burst run``)."""
    return {"preemptions-per-region": str(strategy_for(job).retries_in_place())}
