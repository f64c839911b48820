"""A regional-sync run directory as `burst run examples/regional.yaml` leaves it (the local
runner executing the burst-regional template): ``report.json`` is every run's ``RunReport``
with its ``regional`` section and one step record a region's pod, the runner's timeline
``events.jsonl``, each region's ``teardown-<region>.json`` and its workspace
``<run-id>-<region>/``. Built from the real models so it cannot drift from what the runner
writes."""

from __future__ import annotations

import datetime as dt
import json
import shutil
from pathlib import Path
from typing import Literal, cast

from burst.documents import RunReport, StepDocument, StepRecord, TeardownDocument
from burst.documents.regional import (
    LinkTotals,
    RegionalRound,
    RegionalSection,
    RegionAttempts,
)
from burst.documents.report import PodAttempt, WorkflowResult

Ending = Literal[
    "succeeded", "failed", "preempted", "cancelled", "budget-stopped", "lost", "reaped"
]
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
    ("regions(0:ap-southeast-1).train", 17.9, 40.0),
    ("regions(1:me-central-1).train", 17.4, 40.4),
    ("regions(0:ap-southeast-1).aggregate", 17.9, 40.3),
    ("teardown(0:ap-southeast-1)", 40.4, 43.0),
    ("teardown(1:me-central-1)", 40.4, 43.3),
]
LOSSES = [0.7312, 0.3998, 0.2655]


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(T0 + t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def step_record(name: str, start: float, end: float) -> StepRecord:
    """One step record as the local runner writes it (a region's pod: named as the pod)."""
    region = next((r for r in REGIONS if f":{r})" in name), None)
    module = name.rsplit(".", 1)[-1] if "." in name else name.split("(")[0]
    module = {"stacks": "provision"}.get(module, module)
    pod = PodAttempt(exit_code=0, phase="Succeeded", seconds=round(end - start, 3))
    branch = {"region": region, "module": module} if region else {}
    return StepRecord.model_validate(
        {
            "name": name,
            "status": "succeeded",
            "seconds": round(end - start, 3),
            "exit_code": 0,
            "attempts": 1,
            "started_at": _iso(start),
            "ended_at": _iso(end),
            "attempt_details": [pod.to_json()],
            **branch,
        }
    )


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
    report = RunReport(
        run_id=RUN_ID,
        status=cast(Ending, status),
        exit_code=0,
        steps=[step_record(*e) for e in EVENTS],
        final_weights_sha256="ab" * 32,
        workflow=WorkflowResult(
            template="burst/pipelines/compiled/burst-regional.yaml",
            phase="Succeeded",
            exit_handler_phase="Succeeded",
        ),
        regional=RegionalSection(
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
        (ws / "provision.json").write_text("{}")
        (ws.parent / "region").write_text(region + "\n")  # provision's mark of a region's branch
        (ws / "teardown.json").write_text(json.dumps(doc.to_json()))
    return d
