"""The recovery split (burst.obs.recovery_split): each restart's gap cut at recorded moments.

The run directories here are built from the real document models and the real JSON-line log
formatter (obs_run); the real preempted quickstart (tests/obs/test_quickstart_runs.py's shared
run, preempted at 7 and 19) is checked by ``check_real_split`` from that module, so no pipeline
run is added for it."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pytest
from obs_run import T0, _log_records

from burst.documents import TrainAttempt
from burst.documents.train import EmergencySave, Notice
from burst.obs import events as ev
from burst.obs.recovery_split import TERMS, Restart, export_metrics, medians, split_run

WATCHERS = "preemption watchers: signals"
RESTORED = "resumed from the full checkpoint at step 7"


def _iso(t: float) -> str:
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _log(d: Path, recs: list[tuple[float, str, str]]) -> None:
    """Records (time, event, message) through the real JSON-line formatter."""
    _log_records(
        d / "logs" / "train.log",
        "train",
        [(t, e, {"train_step": 7} if e else {"msg": m}) for t, e, m in recs],
    )
    # the formatter writes the message of an event-less record as "working": set the text
    path = d / "logs" / "train.log"
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    texts = iter(m for _t, e, m in recs if not e)
    for rec in lines:
        if "event" not in rec:
            rec["msg"] = next(texts)
    path.write_text("".join(json.dumps(r) + "\n" for r in lines))


def _run(tmp: Path, *, notice: bool = True, watchers: bool = True) -> Path:
    """Attempt 1 on [0, 10] noticed at 8.0 (acted 8.1, saved 8.4); attempt 2 on [11, 20]:
    up at 12.0, restored at 15.5, first step at 15.75."""
    d = tmp / "run"
    (d / "logs").mkdir(parents=True)
    first: dict[str, Any] = {"attempt": 1, "outcome": "preempted", "preempted": True}
    if notice:
        first["notice"] = Notice(source="sigterm", received_at=T0 + 8.0, deadline=T0 + 38.0)
        first["emergency_save"] = EmergencySave(
            tier="full", committed=True, committed_step=7, committed_at=T0 + 8.4
        )
    else:  # died without closing its record (a lost node)
        first = {"attempt": 1, "outcome": "running", "at_step": 7}
    records = [TrainAttempt(**first), TrainAttempt(attempt=2, outcome="done", resumed_from=7)]
    (d / "train-attempts.jsonl").write_text(
        "".join(json.dumps(r.to_json()) + "\n" for r in records)
    )
    pods = [
        {"started_at": _iso(T0), "seconds": 10.0},
        {"started_at": _iso(T0 + 11), "seconds": 9.0},
    ]
    report = {
        "steps": [{"name": "train", "image_provenance": "in-process", "attempt_details": pods}]
    }
    (d / "report.json").write_text(json.dumps(report))
    recs = [(T0 + 8.1, ev.PREEMPTION, "")] if notice else []
    if watchers:
        recs.append((T0 + 12.0, "", WATCHERS))
    recs += [(T0 + 15.5, "", RESTORED), (T0 + 15.75, ev.FIRST_TRAIN_STEP, "")]
    _log(d, recs)
    return d


def _seconds(r: Restart) -> dict[str, float | None]:
    return {t.name: t.seconds for t in r.terms}


def test_a_noticed_restart_is_cut_at_its_recorded_moments(tmp_path: Path) -> None:
    (r,) = split_run(_run(tmp_path))
    assert (r.from_attempt, r.to_attempt, r.gap_from) == (1, 2, "notice")
    # log times are truncated to the millisecond
    assert _seconds(r) == pytest.approx(
        {
            "detect": 0.1,
            "save": 0.3,
            "teardown": 1.6,
            "provision": 1.0,
            "pull": 0.0,
            "startup": 1.0,
            "restore": 3.5,
            "first_step": 0.25,
        },
        abs=0.0015,
    )
    assert r.gap_s == 7.75
    assert medians([r, r])["restore"] == 3.5


def test_a_moment_not_recorded_is_none_with_its_reason_and_its_time_goes_on(
    tmp_path: Path,
) -> None:
    (r,) = split_run(_run(tmp_path, watchers=False))
    start, restore = r.term("startup"), r.term("restore")
    assert start.seconds is None and "no 'preemption watchers' line" in start.why
    assert restore.seconds == pytest.approx(4.5, abs=0.0015) and "includes startup" in restore.why
    assert sum(t.seconds or 0.0 for t in r.terms) == pytest.approx(r.gap_s, abs=0.001)
    assert r.gap_s == 7.75


def test_a_lost_attempt_has_no_detect_or_save_and_starts_at_its_end(tmp_path: Path) -> None:
    (r,) = split_run(_run(tmp_path, notice=False))
    assert r.gap_from == "placement end" and r.recovery_source is None  # left open
    assert r.term("detect").seconds is None and "not recorded" in r.term("detect").why
    assert r.term("save").seconds is None
    assert r.term("provision").seconds == 1.0 and r.gap_s == pytest.approx(5.75, abs=0.0015)


def test_a_run_without_restarts_has_no_split(tmp_path: Path) -> None:
    assert split_run(tmp_path) == []


def check_real_split(run_dir: Path, restarts: int) -> None:
    """A real preempted run: every term known and non-negative, adding up to the gap."""
    split = split_run(run_dir)
    assert len(split) == restarts
    for r in split:
        assert r.gap_from == "notice" and r.gap_s is not None and r.gap_s > 0
        seconds = [r.term(n).seconds for n in TERMS]
        assert all(s is not None and s >= 0 for s in seconds), r.as_dict()
        assert abs(sum(s or 0.0 for s in seconds) - r.gap_s) <= 0.001 * len(TERMS), r.as_dict()
        assert r.term("pull").seconds == 0.0  # in-process pods
    # the report builder wrote the medians as gauges (metrics/recovery.prom) and put the
    # split in report.json, which burst report's text shows
    text = (run_dir / "metrics" / "recovery.prom").read_text()
    assert "burst_restarts{" in text and 'term="restore"' in text
    report = json.loads((run_dir / "report.json").read_text())
    assert len(report["recovery_split"]["restarts"]) == restarts
    assert report["recovery_split"]["median_s"]["restore"] is not None


def test_the_medians_are_prometheus_gauges_by_term(tmp_path: Path) -> None:
    from prometheus_client.parser import text_string_to_metric_families

    d = _run(tmp_path)
    steps = json.loads((d / "report.json").read_text())["steps"]
    (d / "report.json").unlink()  # the runner's steps, before report.json is written
    export_metrics(d, "r-1", steps)
    text = (d / "metrics" / "recovery.prom").read_text()
    samples = {
        (s.name, s.labels.get("term")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    assert samples[("burst_restarts", None)] == 1.0
    assert samples[("burst_recovery_seconds", "restore")] == pytest.approx(3.5, abs=0.0015)
    assert samples[("burst_recovery_seconds", "gap")] == 7.75
    assert len([k for k in samples if k[0] == "burst_recovery_seconds"]) == len(TERMS) + 1
