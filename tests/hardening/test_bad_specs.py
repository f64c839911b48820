"""Bad specs: every mistake is one line naming file, line and field, exit 2; nothing hangs,
nothing huge is echoed back (issue 15)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from .cli import burst

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def spec_with(tmp_path: Path, old: str, new: str) -> Path:
    text = QUICKSTART.read_text()
    assert old in text, old
    p = tmp_path / "bad.yaml"
    p.write_text(text.replace(old, new, 1))
    return p


def line_of(path: Path, needle: str) -> int:
    lines = path.read_text().splitlines()
    return next(i for i, ln in enumerate(lines, 1) if needle in ln)


CASES = [
    # (old, new, field, needle on the reported line, words in the message)
    ("  steps: 30", "  steps: 1e16", "training.steps", "steps:", "valid integer"),
    ("  steps: 30", "  steps: 2000000000", "training.steps", "steps:", "less than or equal"),
    ("  seed: 1234", "  seed: 1180591620717411303424", "training.seed", "seed:", "64 bits"),
    ("  seed: 1234", "  seed: 4294967296", "training.seed", "seed:", "less than or equal"),
    ("  seed: 1234", "  seed: true", "training.seed", "seed:", "valid integer"),
    ("  gpu_count: 8", "  gpu_count: '8'", "compute.gpu_count", "gpu_count", "valid integer"),
    ("  max_usd: 5000", "  max_usd: .inf", "budget.max_usd", "max_usd", "finite"),
    ("  max_usd: 5000", "  max_usd: .nan", "budget.max_usd", "max_usd", "finite"),
    ("  max_hours: 24", "  max_hours: 1e999", "budget.max_hours", "max_hours", "finite"),
    ("  size_gb: 0.01", "  size_gb: 2026-02-30", "data.size_gb", "size_gb", "not a valid date"),
    ("  size_gb: 0.01", "  size_gb: 2026-13-45", "data.size_gb", "size_gb", "not a valid date"),
    ("  max_hours: 24", "  max_hours: 1:30", "budget.max_hours", "max_hours", "base-60"),
    ("  max_hours: 24", "  max_hours: 1:30.5", "budget.max_hours", "max_hours", "base-60"),
    ("  steps: 30", "  steps: 030", "training.steps", "steps:", "leading zero"),
    ("budget:\n", "budget:\n  max_usd: 1\n", "budget.max_usd", "max_usd: 5000", "duplicated key"),
    (
        "  regions: [ap-southeast-1, ap-southeast-3, me-central-1]",
        "  regions: [ap-southeast-1, ap-southeast-3, ap-southeast-1]",
        "compute.regions",
        "regions:",
        "twice",
    ),
    (
        "  checkpoint_uri: file://checkpoints",
        "  checkpoint_uri: s3:///prefix",
        "storage.checkpoint_uri",
        "checkpoint_uri",
        "bucket",
    ),
    (
        "  checkpoint_uri: file://checkpoints",
        "  checkpoint_uri: s3://bkt/runs\n  replica_uri: s3://bkt/runs/",
        "storage.replica_uri",
        "replica_uri",
        "checkpoint store itself",
    ),
    (
        "  checkpoint_uri: file://checkpoints",
        "  checkpoint_uri: s3://bkt/runs\n  replica_uri: s3://bkt/runs/copy",
        "storage.replica_uri",
        "replica_uri",
        "overlaps",
    ),
    (
        "  region: ap-southeast-1\n",
        "  region: ap-southeast-1\n  shards: {ap-southeast-1: 5, ap-southeast-3: 5}\n",
        "data.shards",
        "shards",
        "add up to 10 GB",
    ),
    (
        "  region: ap-southeast-1\n",
        "  region: ap-southeast-1\n  shards: {ap-southeast-3: 0.01}\n",
        "data.shards",
        "shards",
        "data.region",
    ),
    (
        "  keep_full: 2",
        "  keep_full: 1000000",
        "training.checkpoint.keep_full",
        "keep_full",
        "1000",
    ),
    ("  learning_rate: 0.01", "  learning_rate: false", "training.learning_rate", "rate", "number"),
]


@pytest.mark.parametrize(("old", "new", "field", "needle", "words"), CASES)
def test_each_bad_value_is_one_line_with_its_line_and_field(
    tmp_path: Path, old: str, new: str, field: str, needle: str, words: str
) -> None:
    spec = spec_with(tmp_path, old, new)
    r = burst("validate", "--offline", str(spec))
    assert r.code == 2, r.err
    problem, summary = r.lines
    assert summary == f"burst: 1 problem(s) in {spec}"
    assert problem.startswith(f"{spec}:{line_of(spec, needle)}: {field}: "), problem
    assert words in problem, problem


def test_a_huge_value_is_quoted_by_a_short_prefix(tmp_path: Path) -> None:
    spec = spec_with(tmp_path, "name: quickstart", "name: " + "x" * 1_000_000)
    r = burst("validate", "--offline", str(spec))
    assert r.code == 2
    assert len(r.err) < 1000, len(r.err)
    assert "name" in r.lines[0]


def test_a_spec_too_large_is_refused_unread(tmp_path: Path) -> None:
    spec = tmp_path / "big.yaml"
    spec.write_text(QUICKSTART.read_text() + "#" * (5 << 20) + "\n")
    r = burst("validate", "--offline", str(spec))
    assert r.code == 2 and "byte limit" in r.lines[0]


@pytest.mark.e2e
def test_alias_expansion_is_bounded(tmp_path: Path) -> None:
    bomb = ["a: &a [x, x, x, x, x, x, x, x, x, x]"]
    for i, name in enumerate("bcdefghi"):
        prev = "abcdefghi"[i]
        bomb.append(f"{name}: &{name} [" + ", ".join([f"*{prev}"] * 10) + "]")
    spec = tmp_path / "bomb.yaml"
    spec.write_text("\n".join(bomb) + "\n")  # 1.3 KB, 10^9 nodes expanded
    # a bound on the wait, not an assertion on time: a hang or an OOM fails here
    proc = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "validate", "--offline", str(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2, proc.stderr
    assert "expands to more than" in proc.stderr and "Traceback" not in proc.stderr


@pytest.mark.e2e
@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_spec_that_is_not_a_regular_file_is_refused_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    if kind == "fifo":
        target = tmp_path / "spec.yaml"
        os.mkfifo(target)  # nobody writes: opening it for reading would block for ever
    elif kind == "device":
        target = Path("/dev/zero")  # reading it never ends
    else:
        target = tmp_path
    proc = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "plan", str(target)],
        capture_output=True,
        text=True,
        timeout=120,  # a bound on the wait: a blocking read fails the test here
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and ("not a regular file" in lines[0] or "directory" in lines[0]), lines


def test_a_byte_order_mark_is_not_part_of_the_first_key(tmp_path: Path) -> None:
    spec = tmp_path / "bom.yaml"
    spec.write_bytes(b"\xef\xbb\xbf" + QUICKSTART.read_bytes())
    r = burst("validate", "--offline", str(spec))
    assert r.code == 0, r.err


def test_lists_have_bounds_too(tmp_path: Path) -> None:
    regions = ", ".join(f"r{i}" for i in range(5000))
    spec = spec_with(
        tmp_path,
        "  regions: [ap-southeast-1, ap-southeast-3, me-central-1]",
        f"  regions: [{regions}]",
    )
    r = burst("validate", "--offline", str(spec))
    assert r.code == 2 and "compute.regions: List should have at most 64 items" in r.lines[0]


def test_a_relative_replica_is_the_store_under_the_runs_root(tmp_path: Path) -> None:
    """A relative file:// store is under the runs root (burst.storage.location.store_url), so
    the replica check resolves it there too: file://checkpoints is the primary written as an
    absolute path under $BURST_RUNS_ROOT (before: compared under the working directory, and
    accepted)."""
    root = tmp_path / "runs-root"
    new = f"  checkpoint_uri: file://{root}/checkpoints\n  replica_uri: file://checkpoints"
    spec = spec_with(tmp_path, "  checkpoint_uri: file://checkpoints", new)
    r = burst("validate", "--offline", str(spec), env={"BURST_RUNS_ROOT": str(root)})
    assert r.code == 2, r.err
    assert "storage.replica_uri: is the checkpoint store itself" in r.err
