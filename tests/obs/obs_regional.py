"""A regional-sync run directory as `burst run examples/regional.yaml` leaves it (the local
runner executing the burst-regional template): ``report.json`` is a ``RegionalReport``, the
runner's timeline ``events.jsonl``, each region's ``teardown-<region>.json`` and its workspace
``<run-id>-<region>/``. Built from the real models so it cannot drift from what the runner
writes."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from burst.documents import StepDocument, TeardownDocument
from burst.documents.regional import (
    LinkTotals,
    RegionalReport,
    RegionalRound,
    RegionAttempts,
)
from burst.documents.report import WorkflowResult

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "regional-20261124-230000-cd34"
REGIONS = ["ap-southeast-1", "me-central-1"]
T0 = 1795562271.0
# step, start, end (seconds from T0), as the runner names the template's nodes
EVENTS = [
    ("preflight", 0.0, 2.3),
    ("plan", 2.3, 7.0),
    ("verify-image", 7.0, 7.9),
    ("stacks(0:ap-southeast-1)", 7.9, 12.1),
    ("stacks(1:me-central-1)", 7.9, 13.3),
    ("regions(0:ap-southeast-1).provision", 13.3, 17.9),
    ("regions(1:me-central-1).provision", 13.3, 17.4),
    ("regions(0:ap-southeast-1).worker", 17.9, 40.0),
    ("regions(1:me-central-1).worker", 17.4, 40.4),
    ("regions(0:ap-southeast-1).aggregator", 17.9, 40.3),
    ("teardown(0:ap-southeast-1)", 40.4, 43.0),
    ("teardown(1:me-central-1)", 40.4, 43.3),
]
LOSSES = [0.7312, 0.3998, 0.2655]


def make_regional_run(root: Path, status: str = "succeeded") -> Path:
    d = root / RUN_ID
    d.mkdir(parents=True)
    shutil.copy(REPO / "examples" / "regional.yaml", d / "spec.yaml")
    # the run's own steps' documents, as the runner keeps them (as tests/obs/obs_run.py): with
    # them, `burst runs`/`report`/`status`/`logs` failed with KeyError 'preflight' (issue 42)
    (d / "docs").mkdir()
    for step, start, end in EVENTS[:3]:
        doc = StepDocument(step=step, run_id=RUN_ID, seconds=round(end - start, 3))
        (d / "docs" / f"{step}.json").write_text(json.dumps(doc.to_json()))
    with (d / "events.jsonl").open("w", encoding="utf-8") as fh:
        for step, start, _end in EVENTS:
            fh.write(json.dumps({"t": T0 + start, "step": step, "status": "started"}) + "\n")
        for step, _, end in sorted(EVENTS, key=lambda e: e[2]):
            fh.write(json.dumps({"t": T0 + end, "step": step, "status": "succeeded"}) + "\n")
    rounds = [
        RegionalRound(
            round=i,
            accepted=REGIONS,
            dropped=[],
            late=[],
            staleness=dict.fromkeys(REGIONS, 0),
            tokens=524288,
            delta_bytes=44526,
            update_bytes=22263,
            loss=loss,
            loss_by_region={r: loss for r in REGIONS},
            bytes_crossing=74174,
        )
        for i, loss in enumerate(LOSSES)
    ]
    report = RegionalReport(
        run_id=RUN_ID,
        status=status,
        exit_code=0,
        regions=REGIONS,
        aggregation_region=REGIONS[0],
        local_steps=4,
        local_steps_basis="planner: H = 4",
        rounds_planned=3,
        rounds_completed=3,
        codec="int8",
        rounds=rounds,
        bytes_per_round=74174.0,
        links=LinkTotals(
            bytes_crossing=222522,
            bytes_by_kind={"delta": 133578, "update": 88944},
            shard_bytes_crossing=0,
            egress_usd=0.000011,
            link_seconds=0.8,
            transfers=12,
        ),
        attempts=[
            RegionAttempts(region=r, role="worker", attempts=1, exit_codes=[0]) for r in REGIONS
        ]
        + [RegionAttempts(region=REGIONS[0], role="aggregator", attempts=1, exit_codes=[0])],
        provisioned=REGIONS,
        torn_down=REGIONS,
        stores="s3",
        terraform=True,
        final_weights_sha256="ab" * 32,
        seconds=43.4,
        workflow=WorkflowResult(
            template="burst/pipelines/compiled/burst-regional.yaml",
            phase="Succeeded",
            exit_handler_phase="Succeeded",
        ),
    )
    (d / "report.json").write_text(json.dumps(report.to_json(), indent=1))
    for region in REGIONS:
        doc = TeardownDocument(
            destroyed=True, attempts=1, resources_remaining=0, run_id=f"{RUN_ID}-{region}"
        )
        (d / f"teardown-{region}.json").write_text(json.dumps(doc.to_json()))
        ws = root / f"{RUN_ID}-{region}" / "docs"  # the region's workspace beside the run
        ws.mkdir(parents=True)
        (ws / "regional-provision.json").write_text("{}")
        (ws / "teardown.json").write_text(json.dumps(doc.to_json()))
    return d
