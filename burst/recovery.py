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
spot nodes, on-demand candidates go first.

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
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final, Literal

from burst.documents.plan import Candidate
from burst.documents.provision import PlacedCandidate, RecoveryRecord
from burst.errors import EXIT_FAILURE, BadInputError, BurstError, CapacityError, InfraError
from burst.spec import BurstJob, Recovery, RecoveryStrategyName

log = logging.getLogger(__name__)

#: Exit codes, as Argo reports them (strings): train preempted, its store down (burst.errors).
EXIT_PREEMPTED: Final = 75
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
SOURCES: Final = (PREEMPTION, FAILURE, NODE_LOSS, CONTROL_PLANE, CANCEL)
#: Which budget each source spends (a cancel spends none).
PREEMPTION_BUDGET: Final = frozenset({PREEMPTION, NODE_LOSS, CONTROL_PLANE})
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
_LOST = f"(steps.train.status == 'Error' || {_CODE} == '{EXIT_PREEMPTED}')"
_KILLED = f"({_CODE} == '{EXIT_KILLED}')"
_RECORD = "steps.provision.outputs.parameters.infra"


def _may(field: str) -> str:
    return f"(jsonpath({_RECORD}, '$.recovery.{field}') == true)"


def exit_code_expression() -> str:
    """train's exit code in the ``place`` template ('' when it left none)."""
    return _CODE


def requeue_when() -> str:
    """The requeue step's ``when``: train lost (preempted, node lost) and the strategy has
    another candidate for it."""
    return f"{_NOT_DONE} && {_LOST} && {_may('may_requeue')}"


def restart_when() -> str:
    """The restart step's ``when``: train killed, restarts left."""
    return f"{_NOT_DONE} && {_KILLED} && {_may('may_restart')}"


def give_up_when() -> str:
    """give-up's ``when``: train did not succeed and is neither requeued nor restarted."""
    return (
        f"{_NOT_DONE} && !({_LOST} && {_may('may_requeue')}) "
        f"&& !({_KILLED} && {_may('may_restart')})"
    )


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

    # -- the place template's decisions
    def place(
        self, allowed: Sequence[Candidate], previous: RecoveryRecord | None, event: str
    ) -> Placement:
        """The candidates to provision, in order, for a placement that starts on ``event``
        after the placement ``previous`` recorded (None: the run's first)."""
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
        losses = self.retries_in_place() + 1 if lost.capacity == "spot" else 0
        record = previous.model_copy(
            update={
                "event": REQUEUE,
                "history": history,
                "requeues": previous.requeues + 1,
                "spot_losses": previous.spot_losses + losses,
            }
        )
        order = self.requeue_order(allowed, lost, record)
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
        left = self.requeue_order(list(allowed), candidate, record)
        return record.model_copy(
            update={
                # the loss that would requeue is at least the run's (requeues + 1)-th
                "may_requeue": bool(left)
                and record.requeues + 1 < self.settings.max_placements
                and (
                    self.settings.max_preemptions is None
                    or record.requeues + 1 <= self.settings.max_preemptions
                ),
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
