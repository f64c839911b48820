"""An attempt on an on-demand fallback that stays records its last back-to-spot decision
(``TrainAttempt.spot_probe``), so that the report can say it stayed and why; a real train
attempt (the quickstart model) whose probe sees no spot capacity."""

from __future__ import annotations

import json
from pathlib import Path

from burst.faults import SPOT_CAPACITY_FILE
from tests.recovery.fallback_docs import A, B, fallback_docs


def test_an_attempt_that_stays_on_demand_records_its_last_probe(
    tmp_path: Path, runs_root: Path
) -> None:
    from burst.train.loop import TrainRun

    job, plan, infra = fallback_docs(tmp_path)
    run_dir = runs_root / "r1"
    run_dir.mkdir(parents=True)
    (run_dir / SPOT_CAPACITY_FILE).write_text(json.dumps({A: 0, B: 0}))
    doc = TrainRun(job, "r1", run_dir, plan, infra).run()
    assert doc.final_step == job.training.steps
    [rec] = doc.attempts
    assert rec.outcome == "done" and rec.back_to_spot is None  # (it did not move)
    assert rec.spot_probe is not None
    d = rec.spot_probe.model_dump()
    assert d["decision"] == "stay" and d["reason"].startswith("stay: no spot capacity")
    assert d["probe"] == "local" and d["probes"] == 1 and d["at_step"] == 5
    assert {"saving_usd", "move_cost_usd", "margin_usd", "terms"} <= d.keys()
