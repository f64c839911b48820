"""report.json assembly: a run is not 'succeeded' while anything is left in its state."""

from __future__ import annotations

import json
from pathlib import Path

from burst.obs.report import build_report
from burst.runs import RunPaths

STEPS = ["preflight", "plan", "verify-image", "provision", "train", "teardown"]


def _steps(failed: str | None = None, code: int | None = 1) -> list[dict]:
    return [
        {
            "name": n,
            "status": "failed" if n == failed else "succeeded",
            "exit_code": code if n == failed else 0,
            "seconds": 0.1,
        }
        for n in STEPS
    ]


def test_leftover_state_fails_the_run_and_names_it(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1").create()
    state = paths.terraform / "terraform.tfstate"
    state.write_text(json.dumps({"resources": [{"instances": [{}, {}]}]}))
    r = build_report(paths, _steps())
    assert r["status"] == "failed" and r["exit_code"] == 4
    assert r["resources_remaining"] == 2
    assert r["failure"]["step"] == "teardown" and "2 resource(s) remain" in r["failure"]["message"]

    state.write_text(json.dumps({"resources": []}))
    r = build_report(paths, _steps())
    assert r["status"] == "succeeded" and r["exit_code"] == 0 and r["failure"] is None


def test_a_step_lost_with_its_node_ends_the_run_lost_exit_137(tmp_path: Path) -> None:
    """A node lost for good (no exit code, "pod deleted") ends the run "lost", exit 137 as a
    killed one (burst.endings; before: failed, exit 1)."""
    paths = RunPaths(tmp_path, "r2").create()
    steps = _steps("train", None)
    steps[4]["attempt_details"] = [{"message": "pod deleted"}]
    r = build_report(paths, steps)
    assert r["status"] == "lost" and r["exit_code"] == 137
    assert r["failure"]["message"] == "pod deleted"


def test_a_step_stopped_with_the_run_that_exited_0_is_still_a_failed_run_exit_1(
    tmp_path: Path,
) -> None:
    """SIGTERM to `burst run` stops the running pod like `argo stop`; a train step that ends
    0 as it is stopped (it had just finished) left the failed run with exit code 0, and
    `burst run` exited 0 (seen in make test under load)."""
    paths = RunPaths(tmp_path, "r3").create()
    steps = _steps("train", 0)
    steps[4]["attempt_details"] = [{"message": "stopped: the run was stopped"}]
    r = build_report(paths, steps)
    assert r["status"] == "failed" and r["exit_code"] == 1


def test_a_workflow_the_engine_failed_is_a_failed_run_whatever_its_steps_say(
    tmp_path: Path,
) -> None:
    """A stop that a pod starting in a branch thread missed let it run to its end: every
    step succeeded, the workflow Failed ("stopped by signal 15"), and the report said
    succeeded, exit 0 (seen in make test under load). The engine's phase decides: a run
    stopped on request ended cancelled, exit 130 (burst.endings), whatever its steps say."""
    paths = RunPaths(tmp_path, "r4").create()
    r = build_report(paths, _steps(), "stopped by signal 15 (like `argo stop`)")
    assert r["status"] == "cancelled" and r["exit_code"] == 130
    assert r["failure"] == {
        "step": "workflow",
        "exit_code": 1,
        "message": "stopped by signal 15 (like `argo stop`)",
    }
    r = build_report(paths, _steps(), "Error (exit code 1)")  # failed, not on request
    assert r["status"] == "failed" and r["exit_code"] == 1
    assert build_report(paths, _steps())["status"] == "succeeded"
