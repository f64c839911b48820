"""A realistic run directory (the shape `burst run` leaves behind): report.json, the train
attempt records and the step documents' envelopes built from the real models
(burst.documents: they cannot drift from what `burst run` writes), JSON-line logs written
through the real logging setup and event helper, and metric files written by the real
RunMetrics.

The quickstart preempted once at step 7: train ran twice (attempt 1 exit 75, attempt 2 exit 0),
checkpoints committed at steps 5, 10, 15, 20, 25, 30."""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from burst.documents import (
    Candidate,
    ProvisionAttempt,
    RunReport,
    StepDocument,
    StepRecord,
    TrainAttempt,
)
from burst.documents.report import TeardownSummary
from burst.documents.train import EmergencySave, Notice
from burst.obs import events as ev
from burst.obs.logs import JsonLineFormatter
from burst.obs.metrics import RunMetrics, metrics_file

REPO = Path(__file__).resolve().parents[2]
RUN_ID = "quickstart-20261121-230000-ab12"
T0 = dt.datetime(2026, 11, 21, 23, 0, 0, tzinfo=dt.UTC).timestamp()
# name, start offset, seconds, status, exit code, attempts
STEPS = [
    ("preflight", 0.0, 0.8, "succeeded", 0, 1),
    ("plan", 1.0, 0.6, "succeeded", 0, 1),
    ("verify-image", 1.8, 0.5, "succeeded", 0, 1),
    ("provision", 2.5, 6.0, "succeeded", 0, 1),
    ("train", 9.0, 40.0, "succeeded", 0, 2),
    ("teardown", 49.5, 5.0, "succeeded", 0, 1),
]
CHECKPOINT_STEPS = (5, 10, 15, 20, 25, 30)


def _log_records(path: Path, step: str, records: list[tuple[float, str, dict[str, Any]]]) -> None:
    """Write JSON-line logs through the real formatter, with record times set explicitly."""
    fmt = JsonLineFormatter(RUN_ID, step)
    lines = []
    for t, event, fields in records:
        rec = logging.LogRecord(
            f"burst.steps.{step}", logging.INFO, __file__, 0, event or "working", None, None
        )
        if event:
            rec.fields = {"event": event, **fields}
        rec.created, rec.msecs = t, (t % 1) * 1000
        lines.append(fmt.format(rec))
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def make_run(
    root: Path, run_id: str = RUN_ID, *, with_report: bool = True, leaked: int = 0
) -> Path:
    d = root / run_id
    for sub in ("docs", "logs", "terraform", "metrics"):
        (d / sub).mkdir(parents=True, exist_ok=True)
    (d / "spec.yaml").write_text(
        (REPO / "examples" / "quickstart.yaml").read_text(encoding="utf-8"), encoding="utf-8"
    )

    for name, start, secs, _status, _code, _att in STEPS:
        recs: list[tuple[float, str, dict[str, Any]]] = [
            (T0 + start, "", {}),
            (T0 + start + secs, "", {}),
        ]
        if name == "train":
            # attempt 1: steps 1..7 (checkpoint at 5), preempted at 7 after ~12 s
            recs.append((T0 + start + 1.0, ev.FIRST_TRAIN_STEP, {"train_step": 1}))
            recs.append(
                (
                    T0 + start + 8.0,
                    ev.CHECKPOINT,
                    {"train_step": 5, "tier": "full", "bytes": 812_000},
                )
            )
            recs.append((T0 + start + 12.0, ev.PREEMPTION, {"train_step": 7, "source": "sigterm"}))
            # attempt 2: resumes from 5, checkpoints 10..30
            for i, k in enumerate(CHECKPOINT_STEPS[1:]):
                recs.append(
                    (
                        T0 + start + 18.0 + 4.0 * i,
                        ev.CHECKPOINT,
                        {"train_step": k, "tier": "full", "bytes": 812_000},
                    )
                )
        _log_records(d / "logs" / f"{name}.log", name, recs)
        doc = StepDocument(step=name, run_id=run_id, seconds=secs).to_json()
        (d / "docs" / f"{name}.json").write_text(json.dumps(doc), encoding="utf-8")

    # The train step's attempt records (burst.attempt_records), as the lead's loop writes them.
    def iso(t: float) -> str:
        return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")

    attempts = [
        TrainAttempt(
            attempt=1,
            started_at=iso(T0 + 9),
            finished_at=iso(T0 + 22),
            preempted=True,
            outcome="preempted",
            ended_at_step=7,
            notice=Notice(source="sigterm", received_at=T0 + 21.0, deadline=T0 + 51.0),
            emergency_save=EmergencySave(
                tier="weights", committed_step=7, committed_at=T0 + 21.4, bytes=400_000
            ),
        ),
        TrainAttempt(
            attempt=2,
            started_at=iso(T0 + 22),
            finished_at=iso(T0 + 49),
            preempted=False,
            outcome="done",
            resumed_from=5,
        ),
    ]
    (d / "train-attempts.jsonl").write_text(
        "".join(json.dumps(a.to_json()) + "\n" for a in attempts), encoding="utf-8"
    )

    labels = {
        "run_id": run_id,
        "team": "ml-research",
        "experiment": "quickstart",
        "priority": "normal",
    }
    prov = RunMetrics(**labels)
    prov.record_provision_attempt("ap-southeast-1", "ok")
    prov.write_textfile(metrics_file(d, "provision"))
    # train attempt 1: one checkpoint, then the preemption
    t1 = RunMetrics(**labels)
    t1.set_gpu_wait(10.0)
    t1.record_checkpoint("full", 812_000, 0.2)
    t1.record_stall(0.01)
    t1.record_preemption()
    t1.set_cost("compute", 0.90)
    t1.write_textfile(metrics_file(d, "train", attempt=1))
    # train attempt 2: five checkpoints, egress of the final weights home
    t2 = RunMetrics(**labels)
    for _ in CHECKPOINT_STEPS[1:]:
        t2.record_checkpoint("full", 812_000, 0.2)
        t2.record_stall(0.01)
    t2.record_egress("ap-southeast-1", "ap-southeast-1", 4_000_000)
    t2.record_egress("ap-southeast-1", "me-central-1", 2_500_000)
    t2.set_cost("compute", 1.60)
    t2.set_cost("egress", 0.12)
    t2.set_cost("storage", 0.03)
    t2.write_textfile(metrics_file(d, "train", attempt=2))
    down = RunMetrics(**labels)
    down.set_leaked(leaked)
    down.write_textfile(metrics_file(d, "teardown"))

    if with_report:
        report = RunReport(
            run_id=run_id,
            status="succeeded" if not leaked else "failed",
            exit_code=0 if not leaked else 4,
            finished_at="2026-11-21T23:00:55Z",
            steps=[
                StepRecord(name=n, status=st, exit_code=c, seconds=s, attempts=a)
                for n, _o, s, st, c, a in STEPS
            ],
            failure=None,
            checkpoints=len(CHECKPOINT_STEPS),
            final_step=30,
            final_weights_sha256="9f" * 32,
            preemptions=1,
            recovery_sources={"preemption": 1},
            candidate=Candidate(
                region="ap-southeast-1", provider="aws", capacity="spot", expected_cost_usd=2.4
            ),
            provision_attempts=[
                ProvisionAttempt(
                    index=1, region="ap-southeast-1", provider="aws", capacity="spot", result="ok"
                )
            ],
            terraform_state=str(d / "terraform" / "terraform.tfstate"),
            resources_remaining=leaked,
            teardown=TeardownSummary(destroyed=not leaked, attempts=1, errors=[]),
        )
        (d / "report.json").write_text(json.dumps(report.to_json(), indent=2), encoding="utf-8")
    return d
