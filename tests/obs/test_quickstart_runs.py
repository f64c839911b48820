"""The quickstart end to end, twice: real Terraform, real training processes, real SIGTERMs,
real teardown, then `burst report` and `burst runs` on what the runs left and the page in
headless Chromium.

Two runs are shared by the tests of this module (each a whole pipeline: about 15 CPU-seconds):
one without faults, and one preempted at steps 7 and 19. They were five runs in three files
(tests/skeleton/test_run_local.py's determinism test, tests/preempt/test_preempt_quickstart.py
and tests/obs/test_obs_real_run.py); what each checked is checked here, once."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from test_first_screen import first_screen
from test_obs_html_chromium import _count_near, screenshot

from burst.infra.terraform import count_state_resources
from burst.runner.local import TEMPLATE

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)
REPO = Path(__file__).resolve().parents[2]


def _run(burst_cmd: list[str], spec: Path, run_id: str, *extra: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", run_id, *extra], capture_output=True, text=True
    )
    return proc.returncode, proc.stdout, proc.stderr  # type: ignore[return-value]


def _report(runs_root: Path, run_id: str) -> dict:
    return json.loads((runs_root / run_id / "report.json").read_text())


@dataclass(frozen=True)
class Runs:
    root: Path  # the runs root
    plain: dict[str, Any]  # report.json of the run without faults
    pre: dict[str, Any]  # report.json of the run preempted at 7 and 19
    plain_err: str
    pre_err: str


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Runs]:
    tmp = tmp_path_factory.mktemp("quickstart-runs")
    spec = tmp / "quickstart.yaml"
    spec.write_text(
        (REPO / "examples" / "quickstart.yaml")
        .read_text()
        .replace("checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp}/store")
    )
    root = tmp / "runs"
    burst = [sys.executable, "-m", "burst.cli.main"]
    code, _, plain_err = _run(burst, spec, "plain", "--runs-root", str(root))
    assert code == 0, plain_err
    steps = ("--preempt-at-step", "7", "--preempt-at-step", "19")
    code, _, pre_err = _run(burst, spec, "pre", "--runs-root", str(root), *steps)
    assert code == 0, pre_err
    yield Runs(root, _report(root, "plain"), _report(root, "pre"), plain_err, pre_err)


def test_quickstart_succeeds_and_tears_down(runs: Runs) -> None:
    a = runs.plain
    assert a["status"] == "succeeded"
    assert a["checkpoints"] >= 2
    assert a["resources_remaining"] == 0
    assert count_state_resources(Path(a["terraform_state"])) == 0
    assert [s["name"] for s in a["steps"]] == [
        "preflight",
        "plan",
        "verify-image",
        "provision",
        "train",
        "teardown",
    ]
    assert "Traceback" not in runs.plain_err
    # one machine has no cloud metadata service: a local run watches signals only, and never
    # polls a provider's metadata address
    train = json.loads((runs.root / "plain" / "docs" / "train.json").read_text())
    assert train["watchers"] == ["signals"]
    assert train["preemptions"] == 0 and len(train["attempts"]) == 1


def test_preempted_at_7_and_19_ends_with_the_weights_of_the_run_without(runs: Runs) -> None:
    """Two real SIGTERMs, two emergency saves, two resumes: the weights of the run without
    faults, bit for bit. (This is also the determinism check: two runs from the same spec
    end with the same weights, or a preempted one could not equal the plain one.)"""
    pre, root = runs.pre, runs.root
    assert pre["status"] == "succeeded"
    assert pre["final_weights_sha256"] == runs.plain["final_weights_sha256"]
    assert len(pre["final_weights_sha256"]) == 64
    train = json.loads((root / "pre" / "docs" / "train.json").read_text())
    assert train["preemptions"] == 2
    assert [a["resumed_from"] for a in train["attempts"]] == [0, 7, 19]
    assert [a["preempted"] for a in train["attempts"]] == [True, True, False]
    assert [a["emergency_save"]["tier"] for a in train["attempts"][:2]] == ["full", "full"]
    assert pre.get("preemptions", train["preemptions"]) == 2
    lines = (root / "pre" / "train-attempts.jsonl").read_text().splitlines()
    assert len(lines) == 3
    assert json.loads((root / "pre" / "preempt-demo.json").read_text()) == {"fired": [7, 19]}


def test_the_compiled_template_retries_each_preemption_in_a_pod_of_its_own(runs: Runs) -> None:
    """One executor: the local runner ran the compiled burst-train template; exit 75 was
    retried by its retryStrategy, each attempt in its own pod directory with its outputs."""
    r = runs.pre
    assert r["final_step"] == 30
    assert r["workflow"]["template"] == str(TEMPLATE)
    assert r["workflow"]["phase"] == "Succeeded"
    train = r["steps"][4]
    assert train["name"] == "train"
    assert [a["exit_code"] for a in train["attempt_details"]] == [75, 75, 0]
    assert train["attempts"] == 3
    assert len({a["pod_dir"] for a in train["attempt_details"]}) == 3
    for a in train["attempt_details"]:
        assert (Path(a["outputs_dir"]) / "train.json").exists()
    assert "requeued" in runs.pre_err and "Traceback" not in runs.pre_err


@pytest.mark.slow
def test_report_metrics_and_page_of_the_preempted_run(runs: Runs, tmp_path: Path) -> None:
    """`burst report` and `burst runs` on what the preempted run left behind, its metrics
    (what Prometheus scrapes or the Pushgateway gets, summed over the train attempts' files),
    and the page in headless Chromium."""
    from burst.obs.metrics import read_metric_files
    from burst.obs.report_html import PREEMPT, STATUS_COLOURS

    root, burst = runs.root, [sys.executable, "-m", "burst.cli.main"]
    files = sorted((root / "pre" / "metrics").glob("*.prom"))
    assert {f.name for f in files} >= {"train.prom", "train.2.prom", "provision.prom"}
    m = read_metric_files(files)
    report = runs.pre
    assert m.total("burst_preemptions_total", run_id="pre", team="ml-research") == 2
    # what ended the two attempts the run recovered from: notices (the preemption budget)
    assert sum(report["recovery_sources"].values()) == 2
    assert set(report["recovery_sources"]) <= {"preemption", "control_plane", "node_loss"}
    assert m.total("burst_checkpoints_committed_total", run_id="pre") == report["checkpoints"]
    assert m.total("burst_checkpoint_bytes_count") == report["checkpoints"]
    assert set(m.by_label("burst_checkpoint_bytes_count", "tier")) == {"full", "weights"}
    assert m.total("burst_provision_attempts_total", outcome="ok") == 1
    assert m.total("burst_resources_leaked") == 0

    page = tmp_path / "out.html"
    res = subprocess.run(
        [*burst, "report", "pre", "--runs-root", str(root), "--json", "--html", str(page)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert res.returncode == 0, res.stderr
    s = json.loads(res.stdout)
    assert s["status"] == "succeeded"
    assert s["preemptions"] == 2
    assert s["recovery_sources"] == report["recovery_sources"]
    assert s["checkpoints"] >= 2
    assert s["resources_remaining"] == 0
    train = next(st for st in s["steps"] if st["name"] == "train")
    assert train["attempts"] == 3
    pre = [e for e in s["events"] if e["kind"] == "preemption"]
    assert len(pre) == 2 and all(e["at"] is not None for e in pre)

    listing = subprocess.run(
        [*burst, "runs", "--runs-root", str(root), "--json"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert sorted(r["run_id"] for r in json.loads(listing.stdout)) == ["plain", "pre"]

    img = screenshot(page, tmp_path / "shot.png", tmp_path / "profile")
    assert _count_near(img, STATUS_COLOURS["succeeded"]) > 2000
    assert _count_near(img, PREEMPT) > 40

    # The first screen (issue 29): where the run ran, why there, under which law, from what
    # image and spec, the loss curve, the preemptions with notice-to-exit and restart times,
    # lost work, and cost planned against actual with emulated hardware labelled.
    o = s["overview"]
    where = o["where"]
    assert (where["provider"], where["ranks"], where["emulated"]) == ("aws", 1, True)
    assert where["region"] and where["instance"]
    assert o["why"]["rank"] == 1 and o["why"]["candidates"] >= 2
    assert o["law"]["verdict"] == "allow" and o["law"]["sign_offs"]
    assert o["source"]["image_digest"].startswith("sha256:") and o["source"]["spec_sha256"]
    assert len(o["loss"]) >= 2
    first, second = o["attempts"][:2]
    assert first["outcome"] == "preempted" and first["restart_s"] is not None
    assert first["lost_steps"] is not None and second["resumed_from"] == 7
    assert o["cost"]["emulated"] and "emulated" in o["cost"]["note"]
    text = subprocess.run(
        [*burst, "report", "pre", "--runs-root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    ).stdout
    for head in ("where:", "why:", "law:", "from:", "loss by step:", "attempt 1: preempted"):
        assert head in text, head
    first_screen(img, page)


def test_the_run_summary_names_where_law_image_loss_cost_and_what_next(runs: Runs) -> None:
    """What `burst run` (and `make demo`) prints at the end (issue 46: it left out where the
    run ran, the law, the image, the loss and the cost, and never named `burst report`)."""
    lines = runs.plain_err.splitlines()
    end = lines[next(i for i, ln in enumerate(lines) if ln.startswith("run plain: succeeded (")) :]
    by = {ln.split(":", 1)[0]: ln for ln in end if ":" in ln}
    assert by["run plain"] == (
        "run plain: succeeded (exit 0): every step succeeded and teardown left nothing"
    )
    cand = runs.plain["candidate"]
    assert by["where"].startswith(f"where: {cand['provider']}/{cand['region']} ")
    assert by["law"].startswith(f"law: preflight {cand['verdict']} (rules ")
    image = json.loads((runs.root / "plain" / "docs" / "verify-image.json").read_text())
    assert image["digest"] in by["image"]
    assert by["loss"].startswith("loss: ") and "at step 30" in by["loss"]
    assert by["cost"].startswith("cost: $") and "(planned $" in by["cost"]
    assert by["next"] == f"next: burst report plain --runs-root {runs.root}"


def test_each_restart_of_the_preempted_run_is_split_into_its_terms(runs: Runs) -> None:
    """The recovery split on the real run (burst.obs.recovery_split; test_recovery_split)."""
    from test_recovery_split import check_real_split

    check_real_split(runs.root / "pre", restarts=2)
