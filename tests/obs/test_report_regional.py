"""The one report builder (``burst.obs.report.build_report``) fills a regional-sync run's
``regional`` section from its branches' documents (issue 42): before, ``burst.runner.regional``
built a second report type of its own. Each test reads what the builder writes with the one
report model, ``RunReport``."""

from __future__ import annotations

import json
from pathlib import Path

from obs_regional import EVENTS, LOSSES, REGIONS, RUN_ID, make_regional_run, step_record

from burst.documents import RunReport
from burst.documents.regional import (
    AggregateDocument,
    LinkTransfer,
    RegionalMeasures,
    RegionalRound,
)
from burst.errors import EXIT_INFRA
from burst.obs.report import build_report
from burst.runs import RunPaths


def _rounds() -> list[RegionalRound]:
    return [
        RegionalRound(
            round=i,
            accepted=REGIONS,
            dropped=[],
            late=[],
            staleness=dict.fromkeys(REGIONS, 0),
            tokens=1024,
            delta_bytes=100,
            update_bytes=50,
            loss=loss,
            loss_by_region={r: loss for r in REGIONS},
        )
        for i, loss in enumerate(LOSSES)
    ]


def _branch_run(root: Path) -> RunPaths:
    """A regional run directory whose aggregation region's workspace holds the aggregate
    step's document; the report is the builder's to write."""
    make_regional_run(root)
    (root / RUN_ID / "report.json").unlink()
    agg = AggregateDocument(
        final_round=3, rounds=_rounds(), final_weights_sha256="cd" * 32, run_id=f"{RUN_ID}-x"
    )
    docs = root / f"{RUN_ID}-{REGIONS[0]}" / "docs"
    (docs / "aggregate.json").write_text(json.dumps(agg.to_json()))
    for region in REGIONS:  # what each region's train step derived (its role config)
        cfg = {"role": "worker", "region": region, "local_steps": 4, "rounds": 3}
        (root / f"{RUN_ID}-{region}" / "worker.config.json").write_text(json.dumps(cfg))
    return RunPaths(root, RUN_ID)


def _transfers() -> list[LinkTransfer]:
    a, b = REGIONS
    return [
        LinkTransfer(src=b, dst=a, kind="delta", bytes=60, usd=0.001, seconds=0.1, round=0),
        LinkTransfer(src=a, dst=b, kind="update", bytes=50, usd=0.002, seconds=0.1, round=0),
        LinkTransfer(src=a, dst=b, kind="update", bytes=40, usd=0.001, seconds=0.1, round=1),
        LinkTransfer(src=a, dst=a, kind="shard", bytes=999, usd=0.0, seconds=0.0),
    ]


def test_the_builder_fills_the_regional_section_from_the_branches(tmp_path: Path) -> None:
    paths = _branch_run(tmp_path / "runs")
    steps = [step_record(*e).to_json() for e in EVENTS]
    measures = RegionalMeasures(transfers=_transfers(), stores="s3", terraform=True)
    report = RunReport.model_validate(build_report(paths, steps, None, measures))
    assert report.status == "succeeded" and report.exit_code == 0, report.failure
    assert report.final_weights_sha256 == "cd" * 32  # the aggregate step's document
    r = report.regional
    assert r is not None and r.regions == REGIONS and r.aggregation_region == REGIONS[0]
    assert [x.loss for x in r.rounds] == LOSSES
    assert r.local_steps == 4 and r.rounds_completed == r.rounds_planned == 3
    assert [x.bytes_crossing for x in r.rounds] == [110, 40, 0]  # the link log, by round
    assert r.links is not None and r.links.bytes_crossing == 150 and r.links.transfers == 3
    assert r.links.shard_bytes_crossing == 0 and r.bytes_per_round == 50.0
    assert r.provisioned == r.torn_down == REGIONS
    assert {(a.role, a.region) for a in r.attempts} == {
        ("worker", REGIONS[0]),
        ("worker", REGIONS[1]),
        ("aggregator", REGIONS[0]),
    }


def test_a_region_not_proven_empty_fails_the_run(tmp_path: Path) -> None:
    """A region provisioned whose teardown wrote no document: the run did not succeed, and
    the one line names the region."""
    paths = _branch_run(tmp_path / "runs")
    (tmp_path / "runs" / f"{RUN_ID}-{REGIONS[1]}" / "docs" / "teardown.json").unlink()
    steps = [step_record(*e).to_json() for e in EVENTS]
    report = RunReport.model_validate(build_report(paths, steps))
    assert report.status == "failed" and report.exit_code == EXIT_INFRA
    assert report.failure is not None and report.failure.step == "teardown"
    assert f"teardown of {REGIONS[1]} not proven" in str(report.failure.message)
    assert report.regional is not None and report.regional.torn_down == REGIONS[:1]


def test_without_the_aggregate_document_the_committed_rounds_are_reported(
    tmp_path: Path,
) -> None:
    """The aggregate step wrote no document (it failed): the rounds its store holds as
    committed are what completed, and fewer than planned fail the run."""
    paths = _branch_run(tmp_path / "runs")
    (tmp_path / "runs" / f"{RUN_ID}-{REGIONS[0]}" / "docs" / "aggregate.json").unlink()
    steps = [step_record(*e).to_json() for e in EVENTS]
    measures = RegionalMeasures(committed=_rounds()[:2])
    report = RunReport.model_validate(build_report(paths, steps, None, measures))
    r = report.regional
    assert r is not None and r.rounds_completed == 2 and r.links is None
    assert report.final_weights_sha256 is None
    assert report.status == "failed" and report.failure is not None
    assert report.failure.step == "aggregate"


def test_a_burst_train_report_has_no_regional_section(run_dir: Path) -> None:
    report = RunReport.model_validate(build_report(RunPaths(run_dir.parent, run_dir.name), []))
    assert report.regional is None
