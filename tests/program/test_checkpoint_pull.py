"""`burst checkpoint pull RUN [STEP] DIR`: a committed checkpoint of a training.command run
written back as the program's files (every chunk verified first, as on a resume); one line
and exit 2 for an unknown run, an unknown step, a DIR that is not empty, a checkpoint that
holds no program's files."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from burst.checkpoint import CheckpointManager
from burst.program.watcher import DirWatcher
from burst.storage import open_store
from tests.conftest import BurstCli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def run(tmp_path: Path) -> tuple[Path, Path]:
    """Run ``own`` of a runs root: its spec, and two committed checkpoints (steps 5 and 7)
    of a Lightning-like directory (a step file and last.ckpt, in a subdirectory)."""
    text = (REPO / "examples" / "quickstart.yaml").read_text()
    text = text.replace(
        "checkpoint_uri: file://checkpoints", f"checkpoint_uri: file://{tmp_path}/store"
    )
    (tmp_path / "runs" / "own").mkdir(parents=True)
    (tmp_path / "runs" / "own" / "spec.yaml").write_text(text)
    src = tmp_path / "src"
    mgr = CheckpointManager(open_store(f"file://{tmp_path}/store/own"), keep_full=None)
    w = DirWatcher(src, lambda snap: mgr.save(snap.step, snap.state(), "full"))
    for step in (5, 7):
        (src / "ckpts").mkdir(parents=True, exist_ok=True)
        for name in (f"step-{step}.ckpt", "last.ckpt"):
            torch.save(
                {"global_step": step, "w": torch.full((32,), float(step))}, src / "ckpts" / name
            )
        w.scan()
        assert w.scan() is not None
        mgr.wait()
    mgr.close()
    return tmp_path / "runs", src


def test_pull_writes_the_newest_or_a_given_step_back_as_files(
    tmp_path: Path, run: tuple[Path, Path], burst_cli: BurstCli
) -> None:
    runs, src = run
    out = tmp_path / "out"
    got = burst_cli(["checkpoint", "pull", "own", out, "--runs-root", runs])
    assert got.returncode == 0, got.stderr
    assert "step 7" in got.stdout
    for rel in ("ckpts/step-7.ckpt", "ckpts/last.ckpt"):
        assert (out / rel).read_bytes() == (src / rel).read_bytes()

    older = tmp_path / "older"
    got = burst_cli(
        ["checkpoint", "pull", "own", "5", older, "--store", f"file://{tmp_path}/store/own"]
    )
    assert got.returncode == 0, got.stderr
    last = torch.load(older / "ckpts" / "last.ckpt", weights_only=True)
    assert last["global_step"] == 5 and sorted(p.name for p in (older / "ckpts").iterdir()) == [
        "last.ckpt",
        "step-5.ckpt",
    ]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["nope", "{out}"], "run nope: no spec at"),
        (["own", "9", "{out}"], "run own has no committed checkpoint of step 9 (it has 5, 7)"),
        (["own", "{full}"], "is not empty (--force writes into it)"),
        (["own", "x", "{out}"], "STEP must be a whole number, not 'x'"),
    ],
)
def test_pull_refuses_in_one_line(
    tmp_path: Path, run: tuple[Path, Path], burst_cli: BurstCli, args: list[str], says: str
) -> None:
    runs, _ = run
    full = tmp_path / "full"
    full.mkdir()
    (full / "mine.txt").write_text("keep")
    words = [a.format(out=tmp_path / "out", full=full) for a in args]
    got = burst_cli(["checkpoint", "pull", *words, "--runs-root", runs])
    assert got.returncode == 2
    assert len(got.stderr.strip().splitlines()) == 1 and says in got.stderr, got.stderr
    assert not (tmp_path / "out").exists() and (full / "mine.txt").read_text() == "keep"
    forced = burst_cli(["checkpoint", "pull", "own", full, "--force", "--runs-root", runs])
    assert forced.returncode == 0 and (full / "ckpts" / "last.ckpt").exists()


def test_pull_refuses_a_checkpoint_of_burst_own_loop(tmp_path: Path, burst_cli: BurstCli) -> None:
    url = f"file://{tmp_path}/store/mine"
    with CheckpointManager(open_store(url), keep_full=None) as mgr:
        mgr.save(3, {"w": np.ones(4, dtype=np.float32)}, "full")
        mgr.wait()
    got = burst_cli(["checkpoint", "pull", "mine", tmp_path / "out", "--store", url])
    assert got.returncode == 2
    assert "holds burst's own training state (training.entrypoint)" in got.stderr
