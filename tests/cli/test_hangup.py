"""A hang-up is a stop on request (issue 46, "Exit codes and meanings", the sibling of Ctrl-C and
`burst cancel`): the terminal `burst run` runs in closes (an ssh session drops) and the run ends
cancelled, exit 130, with its train step stopped, teardown run and the resume line printed.
Before: SIGHUP's default action killed the runner (exit 129, in no table), the train step it
had started trained on with nobody to tear down after it, and `burst status` said lost, 137."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # a real `burst run` process and a real signal


def test_a_hangup_cancels_the_run_and_tears_down(
    burst_cmd: list[str], quickstart_in: Path, tmp_path: Path
) -> None:
    root, run_id = tmp_path / "runs", "hup-1"
    err = tmp_path / "stderr"
    env = {**os.environ, "BURST_STEP_PACE_S": "0.3"}  # train runs long enough to be stopped
    with err.open("w") as fh:
        proc = subprocess.Popen(
            [*burst_cmd, "run", str(quickstart_in), "--runs-root", str(root), "--run-id", run_id],
            stdout=subprocess.PIPE, stderr=fh, text=True, env=env,
        )  # fmt: skip
        try:
            for _ in range(600):  # poll with a bound: until train starts
                if "… train" in err.read_text() or proc.poll() is not None:
                    break
                time.sleep(0.2)
            proc.send_signal(signal.SIGHUP)
            proc.communicate(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = err.read_text()
    assert proc.returncode == 130, text[-3000:]
    assert f"burst resume {run_id} --runs-root {root}" in text
    report = json.loads((root / run_id / "report.json").read_text())
    assert (report["status"], report["exit_code"]) == ("cancelled", 130)
    assert report["resources_remaining"] == 0
    steps = {s["name"]: s["status"] for s in report["steps"]}
    assert steps["teardown"] == "succeeded" and steps["train"] != "succeeded", steps
    st = subprocess.run(
        [*burst_cmd, "status", run_id, "--runs-root", str(root), "--json"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert (json.loads(st.stdout)["status"], st.returncode) == ("cancelled", 1)
