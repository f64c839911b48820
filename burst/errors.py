"""Typed errors and the exit codes they map to at the CLI edge.

Library code raises these; only the CLI (and the step modules) turn them into one line and an
exit code. The codes are part of the public contract (README "Exit codes"); how a whole run
ends, and the code `burst run` exits with for each ending, is ``burst.endings``.
"""

from __future__ import annotations

EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_BAD_INPUT = 2
EXIT_REFUSED = 3
EXIT_INFRA = 4
EXIT_PREEMPTED = 75  # EX_TEMPFAIL: the pipeline's retry policy requeues on it
EXIT_MOVED = 76  # train left its placement (back to spot, quota taken): requeued at once
EXIT_CANCELLED = 130  # 128 + SIGINT, as a shell reports Ctrl-C: a run stopped on request
EXIT_LOST = 137  # 128 + SIGKILL: a run, step or node killed (the OOM killer too) or lost

EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILURE: "anything else (a bug, an unexpected failure)",
    EXIT_BAD_INPUT: "bad input: spec, policy file, catalog, CLI argument, corrupt checkpoint",
    EXIT_REFUSED: "refused by policy: legal preflight, budget, unsigned image, no Kueue flavor",
    EXIT_INFRA: "infrastructure failure: provision, destroy, leak found",
    EXIT_PREEMPTED: "preempted: the step saved what fitted and should be requeued",
    EXIT_MOVED: "train left its placement: moved back to spot from an on-demand fallback, "
    "or its Kueue quota was taken by a higher-priority run (a step's code: the pipeline "
    "requeues it at once, never retried in place; a run with no requeue left ends "
    "preempted, 75)",
    EXIT_CANCELLED: "a run cancelled (burst cancel, Ctrl-C, argo stop); teardown ran",
    EXIT_LOST: "a run killed or lost (SIGKILL, the OOM killer, a lost node)",
}


class BurstError(Exception):
    """Base of every error burst raises on purpose. ``exit_code`` is what the CLI exits with."""

    exit_code: int = EXIT_FAILURE
    #: the failing step's document, when it has one (a ``StepDocument`` or a dict):
    #: ``burst.stepio`` writes it as the step's output
    doc: object | None = None

    def __init__(self, message: str, *, where: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.where = where

    def one_line(self) -> str:
        text = f"{self.where}: {self.message}" if self.where else self.message
        return " ".join(text.split())


class BadInputError(BurstError):
    """A user mistake in a spec, policy file, catalog, argument or stored artefact."""

    exit_code = EXIT_BAD_INPUT


class SpecError(BadInputError):
    """A job spec that does not validate. ``problems`` holds one line per problem."""

    def __init__(self, problems: list[str], *, where: str | None = None) -> None:
        super().__init__("; ".join(problems), where=where)
        self.problems = problems


class PolicyRefusal(BurstError):
    """Refused by policy: preflight, budget, image verification."""

    exit_code = EXIT_REFUSED


class InfraError(BurstError):
    """Provisioning, destroy, or leak-scan failure."""

    exit_code = EXIT_INFRA


class CapacityError(InfraError):
    """The provider had no capacity for the request (failover candidates may)."""


class LeakError(InfraError):
    """Resources of a run remain after teardown."""


class Preempted(BurstError):
    """The step stopped on a preemption notice and must be requeued."""

    exit_code = EXIT_PREEMPTED


class MovedBackToSpot(Preempted):
    """Train committed its checkpoint and ended to move from an on-demand fallback back to
    spot (``burst.recovery.back_to_spot``): requeued at once on spot, never retried in the
    on-demand placement it chose to leave."""

    exit_code = EXIT_MOVED


class QuotaTaken(Preempted):
    """Kueue evicted the run's Workload (a higher-priority run took its team's quota): train
    saved and ends to give the rental up, requeued at once to wait in the queue again
    (``burst.recovery.QUOTA``), never retried in place on nodes its quota no longer
    covers."""

    exit_code = EXIT_MOVED


class CheckpointError(BurstError):
    """A checkpoint is missing, partial or corrupt."""

    exit_code = EXIT_BAD_INPUT


class InjectedFailure(BurstError):
    """A failure injected on purpose by the fault-injection harness (--fail-at)."""

    exit_code = EXIT_FAILURE
