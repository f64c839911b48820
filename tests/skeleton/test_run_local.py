"""The walking skeleton end to end: real Terraform, real training processes, real teardown.
A run that succeeds, and a preempted one, are in tests/obs/test_quickstart_runs.py; a failed
train that still tears down in tests/teardown/test_fault_injection.py."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def _run(burst_cmd: list[str], spec: Path, run_id: str, *extra: str) -> tuple[int, dict, str]:
    proc = subprocess.run(
        [*burst_cmd, "run", str(spec), "--run-id", run_id, *extra], capture_output=True, text=True
    )
    return proc.returncode, proc.stdout, proc.stderr  # type: ignore[return-value]


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--fail-at", "nonsense"), "not a fault point"),
        (("--fail-at", "provision:typo"), "not a fault point"),  # a typo never passes silently
        (("--preempt-at-step", "99"), "the spec trains 30 steps"),
        (("--runs-root", "/proc/no/such"), "cannot create it"),
    ],
)
def test_bad_cli_argument_is_exit_2(
    runs_root: Path, quickstart_in: Path, burst_cmd: list[str], args: tuple[str, ...], needle: str
) -> None:
    code, _, err = _run(burst_cmd, quickstart_in, "x1", *args)
    assert code == 2
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
    assert not (runs_root / "x1").exists()
