"""burst report and burst runs on a hand-built run directory (tests/obs/conftest.py): the
figures, robustness to missing or broken inputs, the CLI's exit codes, a self-contained page."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest
from obs_run import CHECKPOINT_STEPS, RUN_ID, make_run

from burst.obs.report_html import render_html
from burst.obs.report_text import render_text
from burst.obs.run_view import load_run


def test_summary_figures(run_dir: Path) -> None:
    s = load_run(run_dir).summary()
    assert s["status"] == "succeeded"
    assert s["preemptions"] == 1
    assert s["checkpoints"] == len(CHECKPOINT_STEPS)
    assert s["cost_usd"] == {"compute": 1.6, "egress": 0.12, "storage": 0.03}
    assert s["cost_total_usd"] == pytest.approx(1.75)
    assert s["expected_cost_usd"] == {"total": 2.4}
    assert s["budget_usd"] == 5000
    assert s["gpu_hours"] == pytest.approx(8 * 40.0 / 3600, abs=1e-4)
    assert s["egress_bytes"] == {
        "ap-southeast-1 -> ap-southeast-1": 4e6,
        "ap-southeast-1 -> me-central-1": 2.5e6,
    }
    assert s["resources_remaining"] == 0
    assert s["wall_seconds"] == pytest.approx(54.5)
    assert s["timeline_source"] == "logs"
    kinds = [(e["kind"], e["at"]) for e in s["events"]]
    assert ("preemption", 21.0) in kinds  # train starts at 9 s, preempted 12 s later
    assert sum(1 for k, _ in kinds if k == "checkpoint") == len(CHECKPOINT_STEPS)
    train = next(st for st in s["steps"] if st["name"] == "train")
    assert train["attempts"] == 2


def test_text_report(run_dir: Path) -> None:
    text = render_text(load_run(run_dir))
    assert text.startswith(f"run {RUN_ID}: SUCCEEDED")
    assert "cost estimate $1.75 (compute $1.60, egress $0.12, storage $0.03)" in text
    assert "budget $5,000 (0.035 % used)" in text
    assert "preemptions 1, checkpoints 6 committed" in text
    assert "attempts ended by: preemption 1" in text
    assert "leaks: none" in text
    assert re.search(r"train\s+succeeded\s+40\.0s\s+\(2 attempts\)", text)


def test_a_leak_is_loud(runs_root: Path) -> None:
    d = make_run(runs_root, "leaky-run", leaked=2)
    text = render_text(load_run(d))
    assert "LEAKS: 2 resource(s) remaining" in text
    assert text.startswith("run leaky-run: FAILED")


def test_a_run_without_report_still_shows_what_is_known(runs_root: Path) -> None:
    d = make_run(runs_root, "crashed-run", with_report=False)
    view = load_run(d)
    s = view.summary()
    assert s["status"] == "lost"  # no report and no driver heartbeat: nothing drives it
    assert s["preemptions"] == 1  # from the metric files
    assert s["checkpoints"] == 6
    assert {st["name"] for st in s["steps"]} >= {"preflight", "train", "teardown"}
    assert any("no report.json" in w for w in s["warnings"])
    render_html(view)


@pytest.mark.parametrize(
    "report",
    [
        "{not json",
        "[1, 2]",
        json.dumps(
            {
                "status": 7,
                "steps": "all of them",
                "checkpoints": "many",
                "cost": [1],
                "budget": {"max_usd": "lots"},
                "candidate": "cheap",
                "events": [1, {"ts": "x"}],
                "provision_attempts": {"n": 1},
                "egress_bytes": "1 GB",
            }
        ),
        json.dumps(
            {
                "steps": [
                    {"name": "train", "seconds": -5, "exit_code": 75},
                    {"status": "failed"},
                    "x",
                ]
            }
        ),
    ],
)
def test_broken_inputs_never_crash_the_report(runs_root: Path, report: str) -> None:
    d = make_run(runs_root, "odd-run")
    (d / "report.json").write_text(report)
    (d / "metrics" / "garbage.prom").write_text("this is not { prometheus\n")
    (d / "logs" / "train.log").write_text("{broken json\nplain text line\n", encoding="utf-8")
    view = load_run(d)
    assert render_text(view)
    page = render_html(view)
    assert "<svg" in page


def test_html_is_self_contained_and_escaped(runs_root: Path) -> None:
    d = make_run(runs_root, "xss-run")
    rep = json.loads((d / "report.json").read_text())
    rep["status"] = "failed"
    rep["failure"] = {
        "step": "train",
        "exit_code": 1,
        "message": '<img src=x onerror="alert(1)"><script>alert(2)</script>',
    }
    (d / "report.json").write_text(json.dumps(rep))
    page = render_html(load_run(d))
    assert "<script" not in page.lower()
    assert "&lt;img src=x" in page
    assert not re.search(r"<[^>]*\s(src|href)\s*=", page, re.IGNORECASE)
    assert "<link" not in page and "@import" not in page and "url(" not in page
    assert page.count('class="checkpoint"') == len(CHECKPOINT_STEPS)
    assert page.count('class="preemption"') == 1
    comps = set(re.findall(r'data-component="([a-z]+)"', page))
    assert comps == {"compute", "egress", "storage", "total"}


def _burst(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*burst_cmd, *args], capture_output=True, text=True, timeout=120, check=False
    )


@pytest.mark.e2e
def test_cli_report_text_json_html(run_dir: Path, burst_cmd: list[str], tmp_path: Path) -> None:
    out = tmp_path / "out" / "report.html"
    res = _burst(burst_cmd, "report", RUN_ID, "--html", str(out))
    assert res.returncode == 0, res.stderr
    assert "preemptions 1, checkpoints 6 committed" in res.stdout
    assert out.read_text().startswith("<!DOCTYPE html>")
    res = _burst(burst_cmd, "report", str(run_dir), "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["preemptions"] == 1


@pytest.mark.e2e
@pytest.mark.parametrize("run", ["no-such-run", "Bad Id!"])
def test_cli_report_unknown_run_is_bad_input(
    runs_root: Path, burst_cmd: list[str], run: str
) -> None:
    res = _burst(burst_cmd, "report", run)
    assert res.returncode == 2
    assert res.stderr.startswith("burst: error: run ")
    assert len(res.stderr.strip().splitlines()) == 1
    assert "Traceback" not in res.stderr


@pytest.mark.e2e
def test_cli_runs_lists_past_runs(runs_root: Path, burst_cmd: list[str]) -> None:
    res = _burst(burst_cmd, "runs")
    assert res.returncode == 0
    assert res.stdout.startswith("no runs in")
    make_run(runs_root, "first-run")
    make_run(runs_root, "second-run", leaked=1)
    (runs_root / "checkpoints").mkdir()  # the quickstart's store is not a run
    res = _burst(burst_cmd, "runs")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0].split()[:2] == ["RUN", "STATUS"]
    assert [ln.split()[0] for ln in lines[1:]] == ["second-run", "first-run"]
    assert lines[1].split()[1] == "failed"
    rows = json.loads(_burst(burst_cmd, "runs", "--json").stdout)
    assert [(r["run_id"], r["resources_remaining"]) for r in rows] == [
        ("second-run", 1),
        ("first-run", 0),
    ]


ODD_VALUES = (None, "x", -1, 0, [], {}, 1e308, float("-inf"), True, [{"a": 1}], {"a": "b"})


def test_any_key_of_any_type_renders(runs_root: Path) -> None:
    """Every key of report.json (and of a step entry) replaced by values of the wrong type."""
    d = make_run(runs_root, "fuzz-run")
    good = json.loads((d / "report.json").read_text())
    keys = [
        *good,
        "cost",
        "budget",
        "events",
        "gpu_hours",
        "egress_bytes",
        "leaks",
        "preemptions",
        "started_at",
        "name",
        "team",
    ]
    rendered = 0
    for key in keys:
        for value in ODD_VALUES:
            rep = dict(good, **{key: value})
            (d / "report.json").write_text(json.dumps(rep))
            view = load_run(d)
            assert render_text(view) and render_html(view)
            rendered += 1
    for key in ("name", "status", "seconds", "exit_code", "attempts", "started_at"):
        for value in ODD_VALUES:
            steps = [dict(s) for s in good["steps"]]
            steps[4][key] = value
            (d / "report.json").write_text(json.dumps(dict(good, steps=steps)))
            view = load_run(d)
            assert render_text(view) and render_html(view)
            rendered += 1
    assert rendered == (len(keys) + 6) * len(ODD_VALUES)


def test_human_logs_fall_back_to_durations_and_attempt_records(runs_root: Path) -> None:
    """Logs that are not JSON lines: steps are laid out from their durations and the train
    step's attempt records place the preemption and the emergency save inside its bar."""
    d = make_run(runs_root, "human-logs")
    for log in (d / "logs").glob("*.log"):
        log.write_text("23:00:01 info    [train] step 3 of 30\n", encoding="utf-8")
    view = load_run(d)
    assert view.timeline_source == "sequential"
    train = next(s for s in view.steps if s.name == "train")
    assert train.start == pytest.approx(0.8 + 0.6 + 0.5 + 6.0)
    pre = [e for e in view.events if e.kind == "preemption"]
    assert len(pre) == 1
    assert pre[0].at == pytest.approx(train.start + 12.0)
    assert "attempt 1 at step 7 (sigterm)" in pre[0].detail
    ck = [e for e in view.events if e.kind == "checkpoint"]
    assert [e.detail for e in ck] == ["emergency weights save at step 7"]
    assert [(a.number, a.outcome) for a in view.attempts] == [(1, "preempted"), (2, "done")]
    assert view.attempts[1].start == pytest.approx(train.start + 13.0)
    page = render_html(view)
    assert page.count('class="attempt"') == 1
    assert page.count('class="preemption"') == 1


def test_cost_falls_back_to_the_plan_rate_for_the_rented_time(runs_root: Path) -> None:
    d = make_run(runs_root, "no-cost-metrics")
    for f in (d / "metrics").glob("train*.prom"):
        f.unlink()
    rep = json.loads((d / "report.json").read_text())
    rep["candidate"]["price_per_hour"] = 36.0
    (d / "report.json").write_text(json.dumps(rep))
    s = load_run(d).summary()
    # provision starts at 2.5 s, teardown ends at 54.5 s: 52 s rented at $36/h
    assert s["cost_usd"] == {"compute": pytest.approx(36.0 * 52 / 3600, abs=1e-4)}
    assert s["cost_source"] == "plan rate x rented time"
    assert "[plan rate x rented time]" in render_text(load_run(d))
    del rep["candidate"]["price_per_hour"]
    (d / "report.json").write_text(json.dumps(rep))
    s = load_run(d).summary()
    assert s["cost_usd"] == {} and s["cost_source"] is None
