"""What one commit of a program's checkpoint directory holds, and what a restore writes back
(burst.program.watcher / snapshot / formats), on files the real torch.save writes in the
layouts the frameworks use: every entry of the newest step together (Lightning's step file
with the last.ckpt that ckpt_path="last" opens, as a copy or a link), the step from the
file's own contents (never made up), subdirectories, the program's outputs at its clean end,
markers restored, and a pickle read for its step without running any of it."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

import pytest
import torch

import burst.checkpoint
from burst.errors import CheckpointError
from burst.program.formats import judge
from burst.program.snapshot import Snapshot, parts_of, resumed_step, write_entry
from burst.program.watcher import DirWatcher


def save(path: Path, step: int | None, fill: float = 1.0) -> None:
    """A Lightning-like checkpoint: a dict with its global_step, saved by torch.save."""
    path.parent.mkdir(parents=True, exist_ok=True)
    doc: dict[str, Any] = {"state_dict": {"w": torch.full((64,), fill)}}
    if step is not None:
        doc["global_step"] = step
    torch.save(doc, path)


def settle(w: DirWatcher) -> Any:
    """Two scans: what is unchanged between them is handed over."""
    w.scan()
    return w.scan()


def names(snap: Snapshot) -> list[str]:
    return [str(d["name"]) for d in parts_of(snap.state())]


def test_a_step_and_its_last_checkpoint_commit_and_restore_together(tmp_path: Path) -> None:
    src, got = tmp_path / "src", list[Snapshot]()
    w = DirWatcher(src, got.append)
    save(src / "ckpts" / "epoch=0-step=5.ckpt", 5)
    save(src / "ckpts" / "last.ckpt", 5)  # no step in its name: the one in its contents
    assert settle(w).step == 5
    assert names(got[-1]) == ["ckpts/epoch=0-step=5.ckpt", "ckpts/last.ckpt"]

    save(src / "ckpts" / "epoch=0-step=10.ckpt", 10)
    assert settle(w).step == 10 and names(got[-1]) == ["ckpts/epoch=0-step=10.ckpt"]
    save(src / "ckpts" / "last.ckpt", 10, fill=2.0)  # written second, seen later
    assert settle(w).step == 10  # the step again, whole
    assert names(got[-1]) == ["ckpts/epoch=0-step=10.ckpt", "ckpts/last.ckpt"]
    save(src / "ckpts" / "epoch=0-step=7.ckpt", 7)  # older than what is committed
    assert settle(w) is None and len(got) == 3

    dst = tmp_path / "dst"
    resume = write_entry(got[-1].state(), dst)
    assert resume == dst / "ckpts" / "epoch=0-step=10.ckpt"  # BURST_RESUME_FROM: no alias
    for rel in ("ckpts/epoch=0-step=10.ckpt", "ckpts/last.ckpt"):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()
    assert resumed_step(dst / "ckpts" / "last.ckpt", 0) == 10  # the framework's own step

    # a resumed attempt: what was restored is known, the newest step is the restored one
    again: list[Snapshot] = []
    w2 = DirWatcher(dst, again.append)
    w2.known(resume)
    assert w2.base_step == 10 and settle(w2) is None and again == []
    save(dst / "ckpts" / "epoch=0-step=9.ckpt", 9)
    assert settle(w2) is None  # older than the restored step: superseded
    save(dst / "ckpts" / "epoch=0-step=15.ckpt", 15)
    assert settle(w2).step == 15


def test_a_link_to_the_steps_file_is_committed_and_restored_as_a_link(tmp_path: Path) -> None:
    src, got = tmp_path / "src", list[Snapshot]()
    w = DirWatcher(src, got.append)
    save(src / "epoch=0-step=4.ckpt", 4)
    os.symlink("epoch=0-step=4.ckpt", src / "last.ckpt")  # Lightning's save_last="link"
    os.symlink("/etc/hostname", src / "elsewhere.ckpt")  # out of the directory: not taken
    assert settle(w).step == 4
    assert names(got[-1]) == ["epoch=0-step=4.ckpt", "last.ckpt"]
    dst = tmp_path / "dst"
    write_entry(got[-1].state(), dst)
    assert os.readlink(dst / "last.ckpt") == "epoch=0-step=4.ckpt"
    assert (dst / "last.ckpt").read_bytes() == (src / "epoch=0-step=4.ckpt").read_bytes()


def test_subdirectories_are_watched_and_outputs_commit_at_a_clean_end(tmp_path: Path) -> None:
    src, got = tmp_path / "src", list[Snapshot]()
    w = DirWatcher(src, got.append)
    hf = src / "run1" / "checkpoint-40"
    hf.mkdir(parents=True)
    (hf / "model.safetensors").write_bytes(os.urandom(1000))
    (hf / "trainer_state.json").write_text('{"global_step": 40}')
    assert settle(w).step == 40 and names(got[-1]) == ["run1/checkpoint-40"]
    # after training: save_model()'s files; a torch.save of no dict has no step of its own
    (src / "run1" / "model.safetensors").write_bytes(os.urandom(500))
    torch.save(torch.nn.Linear(2, 2), src / "run1" / "training_args.bin")
    assert settle(w) is None and len(got) == 1  # not while the program runs
    assert "no step" in w.skipped["run1/training_args.bin"]
    half = src / "run1" / "checkpoint-50"  # a save it never finished: stays out
    half.mkdir()
    (half / "model.safetensors").write_bytes(os.urandom(100))
    w.outputs = True  # the program exited 0
    end = w.scan(final=True)
    assert end is not None and end.step == 40
    assert names(got[-1]) == [
        "run1/checkpoint-40",
        "run1/model.safetensors",
        "run1/training_args.bin",
    ]
    assert w.scan(final=True) is None  # once
    dst = tmp_path / "dst"
    write_entry(got[-1].state(), dst)
    for rel in ("run1/checkpoint-40/model.safetensors", "run1/model.safetensors"):
        assert (dst / rel).read_bytes() == (src / rel).read_bytes()


def test_nothing_committed_names_the_directory_and_what_it_saw(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    w = DirWatcher(src, lambda snap: None)
    torch.save({"weights": torch.ones(2)}, src / "model.pt")  # no step anywhere
    settle(w)
    w.scan(final=True)  # (no clean end: outputs are not committed)
    why = w.nothing_committed()
    assert why is not None and str(src) in why and "model.pt: complete, but no step" in why


def test_a_marked_checkpoint_is_restored_with_its_marker(tmp_path: Path) -> None:
    src, got = tmp_path / "src", list[Snapshot]()
    w = DirWatcher(src, got.append)
    (src / "state").mkdir(parents=True)
    (src / "state" / "arrays.npz").write_bytes(b"npz")
    burst.checkpoint.commit(src / "state", 12)
    assert settle(w).step == 12
    dst = tmp_path / "dst"
    resume = write_entry(got[-1].state(), dst)
    assert (dst / "state.burst-commit").exists() and judge(resume).step == 12  # type: ignore[union-attr]


def test_a_checkpoints_pickle_is_read_for_its_step_without_running_it(tmp_path: Path) -> None:
    flag = tmp_path / "ran"

    class Trap:
        def __reduce__(self) -> tuple[Any, ...]:
            return (os.system, (f"touch {flag}",))

    p = tmp_path / "weights.pt"
    torch.save({"global_step": 3, "trap": Trap(), "w": torch.ones(2)}, p)
    v = judge(p)
    assert v is not None and (v.complete, v.step) == (True, 3)
    assert not flag.exists()


def test_a_restore_never_writes_outside_the_directory(tmp_path: Path) -> None:
    state = {"burst_program": {"name": "../escape", "format": "files", "step": 1,
                               "kind": "file", "paths": [""], "files": [b"x"]}}  # fmt: skip
    with pytest.raises(CheckpointError, match=re.escape("names the path '../escape'")):
        write_entry(state, tmp_path / "dst")
    link = {"burst_program": {"name": "l.ckpt", "format": "link", "step": 1, "kind": "link",
                              "target": "../../etc/passwd", "paths": [], "files": []}}  # fmt: skip
    with pytest.raises(CheckpointError, match="outside its directory"):
        write_entry(link, tmp_path / "dst")
    assert not (tmp_path / "escape").exists()
