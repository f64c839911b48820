"""A preempted aggregator is requeued as every step is (issue 42): on a stop notice (a real
SIGTERM, as the kubelet sends on preemption) it exits 75 and the template's retry restarts it
from its last committed round. Before the fix it handled no notice, died of the signal (143),
which no retry rule takes, and the run ended failed."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import EXIT_PREEMPTED
from burst.runner.regional import RegionalOptions, run_regional
from burst.spec import load_spec

from .regional_specs import TWO, regional_spec

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def test_a_preempted_aggregator_exits_75_and_its_retry_completes_the_run(tmp_path: Path) -> None:
    spec = regional_spec(tmp_path, TWO)
    faults = {"aggregator:ap-southeast-1": {"aggregator-after-commit@1": "preempt"}}
    opts = RegionalOptions(time_scale=0.0, faults=faults, wait_limit_s=120, stores="dir")
    report = run_regional(load_spec(spec), spec, tmp_path / "agg", "agg", opts)
    assert report.status == "succeeded", report.failure
    r = report.regional
    assert r is not None and r.rounds_completed == r.rounds_planned == 3
    attempts = {(a.role, a.region): a.exit_codes for a in r.attempts}
    assert attempts[("aggregator", "ap-southeast-1")] == [EXIT_PREEMPTED, 0], attempts
    # its retry went on from its committed state: round 1 aggregated once
    assert [x.round for x in r.rounds] == [0, 1, 2]
