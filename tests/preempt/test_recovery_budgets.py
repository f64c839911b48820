"""Issue 44: two recovery budgets kept apart, ``max_preemptions`` (default unlimited) and
``max_failures``, and every attempt's ``recovery_source`` (burst/recovery.py).

The budgets are spent by the train step's attempts, which both paths (the local runner and
Argo) run: the end-to-end test runs real attempts of the train step (forked processes, real
SIGTERMs, a real file store), the rest checks the rule and the template's record at the
cheapest level.
"""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst import recovery
from burst.attempt_records import (
    FILE_NAME,
    after_kill,
    budget_sources,
    read_file,
    recoveries,
    settle_unclosed,
    sources,
)
from burst.documents.plan import Candidate
from burst.documents.train import Notice, TrainAttempt
from burst.errors import EXIT_FAILURE, EXIT_PREEMPTED
from burst.spec import BurstJob, Recovery, load_spec
from burst.train.attempts import CANCEL_MARKER
from tests.conftest import BurstCli
from tests.preempt.attempts_harness import start_attempt, write_spec


def _attempt(outcome: str | None, notice: str | None = None, n: int = 1) -> TrainAttempt:
    rec: dict[str, Any] = {"attempt": n, "outcome": outcome}
    if notice is not None:
        rec["notice"] = Notice.model_validate(
            {"source": notice, "received_at": 1.0, "deadline": 31.0}
        )
    return TrainAttempt.model_validate(rec)


@pytest.mark.parametrize(
    ("outcome", "notice", "expected"),
    [
        ("preempted", "aws-spot-terminate", recovery.PREEMPTION),
        ("preempted", "gcp-preempted", recovery.PREEMPTION),
        ("preempted", "azure-preempt", recovery.PREEMPTION),
        ("preempted", "sigterm", recovery.CONTROL_PLANE),  # an eviction, a drain, a stop
        ("preempted", "sigint", recovery.CANCEL),  # Ctrl-C
        ("died", None, recovery.NODE_LOSS),
        ("failed", None, recovery.FAILURE),
        ("rank-lost", None, recovery.FAILURE),
        ("store-down", None, recovery.FAILURE),
        ("done", None, None),
        ("budget-exceeded", None, None),
    ],
)
def test_what_ended_an_attempt(outcome: str, notice: str | None, expected: str | None) -> None:
    assert sources([_attempt(outcome, notice)]) == [expected]


def test_the_budgets_are_kept_apart() -> None:
    """A spot-heavy day never spends the retries meant for crashes, and a cancel spends
    neither."""
    default = Recovery()
    assert default.max_preemptions is None  # unlimited
    spot_day = [recovery.PREEMPTION] * 60 + [recovery.NODE_LOSS] * 20 + [recovery.CANCEL] * 5
    spent = recovery.check_budgets(default, [*spot_day, recovery.FAILURE] * 1)
    assert (spent.preemptions, spent.failures, spent.cancels) == (80, 1, 5)
    crashes = [recovery.FAILURE] * (default.max_failures + 1)
    with pytest.raises(recovery.RecoveryBudgetSpent, match="max_failures is 3"):
        recovery.check_budgets(default, crashes)
    # failures never spend the preemption budget
    tight = Recovery(max_preemptions=1, max_failures=5)
    recovery.check_budgets(tight, [recovery.FAILURE] * 5 + [recovery.PREEMPTION])
    with pytest.raises(recovery.RecoveryBudgetSpent, match="max_preemptions is 1"):
        recovery.check_budgets(tight, [recovery.CONTROL_PLANE, recovery.NODE_LOSS])
    assert recovery.RecoveryBudgetSpent("x").exit_code == EXIT_FAILURE  # no retry, no requeue


def test_a_killed_train_restarted_is_a_failure_not_a_node_loss() -> None:
    """A record left open is a lost node, unless the placement after it was a restart (the
    template restarts train killed with exit 137: a failure)."""
    records = settle_unclosed([_attempt("preempted", "gcp-preempted", 1), _attempt(None, n=2)])
    assert sources(records) == [recovery.PREEMPTION, recovery.NODE_LOSS]
    assert sources(after_kill(records)) == [recovery.PREEMPTION, recovery.FAILURE]


def test_the_budgets_count_from_where_the_run_last_ended() -> None:
    """A run that ended (finished, failed outright, cancelled) and is resumed starts with
    both budgets whole; within a run, every recovered loss counts."""
    records = settle_unclosed(
        [
            _attempt("store-down", n=1),
            _attempt("failed", n=2),  # the pipeline gave up: the run ended
            _attempt("preempted", "aws-spot-terminate", n=3),
            _attempt("preempted", "sigint", n=4),  # Ctrl-C: the run ended
            _attempt("rank-lost", n=5),
            _attempt(None, n=6),  # left open: a lost node
        ]
    )
    assert budget_sources(records) == [recovery.FAILURE, recovery.NODE_LOSS]
    assert budget_sources(records[:4]) == []


def _job(quickstart_in: Path, **settings: Any) -> BurstJob:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["compute"]["recovery"] = settings
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return load_spec(quickstart_in)


def _c(region: str, capacity: str = "spot") -> Candidate:
    return Candidate.model_validate({"region": region, "provider": "aws", "capacity": capacity})


PLAN = [_c("ap-southeast-1"), _c("ap-southeast-3"), _c("me-central-1")]


def test_the_template_record_reads_the_same_budgets(quickstart_in: Path) -> None:
    """The place template's requeue and restart (provision's recovery record) stop where
    the budgets do: a restart is a failure, a requeue follows a preemption."""
    job = _job(quickstart_in, max_failures=1, max_preemptions=1, max_placements=5)
    s = recovery.strategy_for(job)
    first = s.placed(s.place(PLAN, None, "start"), PLAN[0], PLAN)
    assert first.may_restart and first.may_requeue
    restarted = s.place(PLAN, first, "restart")
    after_restart = s.placed(restarted, restarted.candidates[0], PLAN)
    assert not after_restart.may_restart  # one failure spent of max_failures 1
    assert after_restart.may_requeue  # failures do not spend the preemption budget
    requeued = s.place(PLAN, first, "requeue")
    after_requeue = s.placed(requeued, requeued.candidates[0], PLAN)
    assert not after_requeue.may_requeue  # one preemption spent of max_preemptions 1
    assert after_requeue.may_restart


def _spec(tmp_path: Path, **settings: Any) -> Path:
    spec = write_spec(tmp_path, steps=100_000, interval=50)
    doc = yaml.safe_load(spec.read_text())
    doc["compute"]["recovery"] = settings
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    return spec


def _stopped(spec: Path, run_id: str, runs_root: Path, *, cancel: bool = False) -> int:
    """One attempt, stopped by SIGTERM once it watches (after ``burst cancel``'s marker)."""
    a = start_attempt(spec, run_id, runs_root)
    assert a.wait_until_watching(), "the attempt ended before it watched for SIGTERM"
    if cancel:
        (runs_root / run_id / CANCEL_MARKER).touch()
    os.kill(a.pid, signal.SIGTERM)
    return a.wait(300)


def test_a_cancel_is_not_a_preemption_and_the_budget_stops_the_run(
    tmp_path: Path, burst_cli: BurstCli
) -> None:
    """Real attempts of the train step: a SIGTERM (the control plane) spends the preemption
    budget, a cancel (``burst cancel``'s marker) is recorded as one and spends nothing (the
    run stopped there: a resume starts with both budgets whole), and the attempt after the
    budget is spent refuses to train (exit 1, one line naming the budget), recording
    nothing."""
    spec = _spec(tmp_path, max_preemptions=1)
    runs_root = tmp_path / "runs"
    run_id = "budgets"
    assert _stopped(spec, run_id, runs_root) == EXIT_PREEMPTED
    assert _stopped(spec, run_id, runs_root, cancel=True) == EXIT_PREEMPTED
    assert not (runs_root / run_id / CANCEL_MARKER).exists()  # spent by the cancel
    # resumed after the cancel: 1 preemption of max_preemptions 1, then a second
    assert _stopped(spec, run_id, runs_root) == EXIT_PREEMPTED
    assert _stopped(spec, run_id, runs_root) == EXIT_PREEMPTED
    records = read_file(runs_root / run_id / FILE_NAME)
    assert [r.recovery_source for r in records] == [
        recovery.CONTROL_PLANE,
        recovery.CANCEL,
        recovery.CONTROL_PLANE,
        recovery.CONTROL_PLANE,
    ]
    # two preemptions since the run was resumed: the next attempt refuses before it trains
    a = start_attempt(spec, run_id, runs_root)
    assert a.wait(300) == EXIT_FAILURE
    assert len(read_file(runs_root / run_id / FILE_NAME)) == 4
    # burst status shows each attempt's source and the budget it spent
    shown = burst_cli(["status", run_id, "--runs-root", runs_root, "--json"])
    got = json.loads(shown.stdout)["recoveries"]
    assert [(r["recovery_source"], r["budget"]) for r in got] == [
        (recovery.CONTROL_PLANE, "max_preemptions"),
        (recovery.CANCEL, None),
        (recovery.CONTROL_PLANE, "max_preemptions"),
        (recovery.CONTROL_PLANE, "max_preemptions"),
    ]
    text = burst_cli(["status", run_id, "--runs-root", runs_root]).stdout
    assert "train attempt 2: preempted" in text and "cancel" in text
    assert recoveries(records, cancelled=True)[-1]["recovery_source"] == recovery.CANCEL
