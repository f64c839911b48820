"""Regional-sync specs for the runtime tests: the quickstart, split over regions."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

TWO = {"ap-southeast-1": 0.004, "me-central-1": 0.006}
THREE = {"ap-southeast-1": 0.003, "me-central-1": 0.004, "ap-southeast-3": 0.003}
#: the xdist group of the tests that use the ``two_regions`` run (tests/regional/conftest.py):
#: one worker, so the session-scoped run happens once
TWO_REGIONS_GROUP = "regional-two"

BurstCli = Callable[..., subprocess.CompletedProcess[str]]


def cli_run(
    burst_cli: BurstCli, spec: Path, root: Path, run_id: str, env: dict[str, str] | None = None
) -> dict[str, Any]:
    """``burst run SPEC`` into ``root``: its report, the run having succeeded."""
    proc = burst_cli(["run", str(spec), "--runs-root", str(root), "--run-id", run_id], env=env)
    report = root / run_id / "report.json"
    assert report.exists(), proc.stderr
    doc = json.loads(report.read_text())
    assert proc.returncode == 0, (proc.stderr, doc.get("failure"))
    return dict(doc)


def regional_spec(
    tmp_path: Path,
    shards: dict[str, float],
    *,
    steps: int = 12,
    local_steps: int | None = 4,
    step_seconds: float | None = None,
    deadline_s: float = 60,
    name: str = "regional-test",
) -> Path:
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    text = text.replace("name: quickstart", f"name: {name}")
    listed = ", ".join(f"{r}: {gb}" for r, gb in shards.items())
    text = text.replace(
        "  region: ap-southeast-1\n", f"  region: ap-southeast-1\n  shards: {{{listed}}}\n"
    )
    timed = f"  step_seconds: {step_seconds}\n" if step_seconds is not None else ""
    text = text.replace("  steps: 30\n", f"  steps: {steps}\n{timed}")
    text = text.replace(
        "  learning_rate: 0.01\n",
        "  learning_rate: 0.01\n  strategy: regional-sync\n  regional_sync:\n"
        f"    local_steps: {'null' if local_steps is None else local_steps}\n    round_deadline_s: {deadline_s}\n",
    )
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path
