"""`burst run` executes the compiled burst-train WorkflowTemplate: real steps as processes,
real Terraform, real training, teardown always (slow: a few runs of the quickstart). A
preemption retried by the template's retryStrategy is checked on the shared preempted run of
tests/obs/test_quickstart_runs.py; a failed train's teardown in tests/teardown/
test_fault_injection.py; a capacity failover's site files in tests/infra/
test_provision_step.py; the template's requeue in another region in tests/infra/
test_recovery_runs.py."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.runner.local import TEMPLATE, LocalRunner, RunOptions
from burst.runs import run_paths

REPO = Path(__file__).resolve().parents[2]
LAYOUT = REPO / "examples" / "images" / "quickstart-oci"
PIPELINE = ["preflight", "plan", "verify-image", "provision", "train", "teardown"]

pytestmark = [pytest.mark.slow, pytest.mark.e2e]


@pytest.fixture
def spec(quickstart_in: Path) -> Path:
    """The quickstart (store in tmp) with the committed, signed demo image (an OCI layout)."""
    index = json.loads((LAYOUT / "index.json").read_text())
    digest = next(
        m["digest"]
        for m in index["manifests"]
        if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == "quickstart"
    )
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["image"]["reference"] = f"oci-layout://examples/images/quickstart-oci@{digest}"
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return quickstart_in


def _run(
    burst_cmd: list[str], spec: Path, run_id: str, *extra: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", run_id, *extra],
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )


def _report(runs_root: Path, run_id: str) -> dict[str, Any]:
    return json.loads((runs_root / run_id / "report.json").read_text())


@pytest.mark.e2e
def test_node_lost_after_the_30th_minute_is_retried_then_requeued(
    runs_root: Path, spec: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 19's Done-when: train's node is lost 31 (virtual) minutes into every attempt in
    the first candidate. As Argo would: each loss (Error, "pod deleted", no exit code) is
    retried in the region (no maxDuration to end the retries), then the placement is
    requeued in the plan's next candidate, where train succeeds. Nothing hangs, nothing
    gives up, teardown leaves nothing."""
    limit = 1  # retries per region: two pods lost in the first candidate
    # the named fault point (burst/faults.py), armed by its setting as `burst run` would be
    monkeypatch.setenv(
        "BURST_NODE_LOSS", ",".join(f"train@{i}+{31 * 60}" for i in range(limit + 1))
    )
    paths = run_paths("wf-lost", runs_root)
    options = RunOptions(parameters={"preemptions-per-region": str(limit)})
    r = LocalRunner(paths, spec, options).run()
    assert r["status"] == "succeeded", r["failure"]
    assert r["workflow"]["phase"] == "Succeeded"
    train = {s["name"]: s for s in r["steps"]}["train"]
    assert train["placements"] == 2
    details = train["attempt_details"]
    assert [(a["exit_code"], a["phase"], a["message"]) for a in details[:2]] == [
        (None, "Error", "pod deleted")
    ] * 2
    assert (details[2]["exit_code"], details[2]["phase"]) == (0, "Succeeded")
    second = json.loads((paths.dir / "docs" / "provision.json").read_text())
    assert second["placement"] == 1
    assert r["resources_remaining"] == 0


def test_the_pre_issue_19_template_is_refused_by_name(
    runs_root: Path, spec: Path, burst_cmd: list[str]
) -> None:
    """The old template read steps.train.exitCode after node loss (Argo >= 3.7.11 would
    requeue that step forever) and wrote an artifact without a repository: refused."""
    old = REPO / "tests" / "data" / "burst-train.before-issue-19.yaml"
    proc = _run(burst_cmd, spec, "wf-old", "--template", str(old))
    assert proc.returncode == 2, proc.stderr
    assert "requeues this step forever" in proc.stderr
    assert "needs an artifact repository" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (runs_root / "wf-old").exists()


def test_unsupported_template_is_refused_before_anything_runs(
    runs_root: Path, spec: Path, burst_cmd: list[str], tmp_path: Path
) -> None:
    manifest = yaml.safe_load(TEMPLATE.read_text())
    main = next(t for t in manifest["spec"]["templates"] if t["name"] == "main")
    # withParam and withItems run (tests/runner/test_fanout.py); withSequence does not
    main["steps"][0][0]["withSequence"] = {"count": "2"}
    broken = tmp_path / "broken.yaml"
    broken.write_text(yaml.safe_dump(manifest))
    proc = _run(burst_cmd, spec, "wf-bad", "--template", str(broken))
    assert proc.returncode == 2
    assert "'withSequence'" in proc.stderr and "not supported by the local runner" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not (runs_root / "wf-bad").exists()


def test_a_template_of_another_kind_is_refused_before_the_runs_root_exists(
    spec: Path, burst_cmd: list[str], tmp_path: Path
) -> None:
    """A ConfigMap given as --template: exit 2 naming the kind; no runs root, no run id."""
    other = tmp_path / "cm.yaml"
    other.write_text("apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n")
    fresh_root = tmp_path / "fresh-runs"
    proc = subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", "wf-cm", "--template", str(other),
         "--runs-root", str(fresh_root)],
        capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "kind 'ConfigMap'" in proc.stderr
    assert "Traceback" not in proc.stderr and "run id" not in proc.stderr
    assert not fresh_root.exists()


def test_sigterm_to_burst_run_runs_teardown_and_writes_the_report(
    runs_root: Path, spec: Path, burst_cmd: list[str]
) -> None:
    """`burst run` stopped by SIGTERM while train runs behaves like `argo stop`: train is
    stopped, teardown runs, report.json is written, nothing is left."""
    import signal
    import time

    proc = subprocess.Popen(
        [*burst_cmd, "run", str(spec), "--run-id", "wf-stop"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    pods = runs_root / "wf-stop" / "pods"
    try:
        while not (pods.exists() and any(p.name.endswith("-train") for p in pods.iterdir())):
            assert proc.poll() is None, proc.communicate()
            time.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    r = _report(runs_root, "wf-stop")
    assert proc.returncode == (r["exit_code"] if r["exit_code"] > 0 else 1), (err, r["steps"])
    assert "Traceback" not in err
    assert r["workflow"]["phase"] == "Failed"
    assert "stopped by signal 15" in r["workflow"]["message"]
    statuses = {s["name"]: s["status"] for s in r["steps"]}
    assert statuses["train"] == "failed" and statuses["teardown"] == "succeeded"
    assert r["resources_remaining"] == 0
