"""Regional-sync specs for the runtime tests: the quickstart, split over regions."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]

TWO = {"ap-southeast-1": 0.004, "me-central-1": 0.006}
THREE = {"ap-southeast-1": 0.003, "me-central-1": 0.004, "ap-southeast-3": 0.003}


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
