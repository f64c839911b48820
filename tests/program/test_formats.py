"""The completion rules, each on files the real framework code writes (torch.save, torch DCP),
or as its source writes them (Hugging Face Trainer's trainer_state.json last); half-written,
truncated and changing entries are never taken; a snapshot restores byte for byte."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

import burst.checkpoint
from burst.program.formats import judge, judge_zip_bytes, step_from_name
from burst.program.snapshot import read_entry, write_entry
from burst.program.watcher import DirWatcher


def test_step_from_names() -> None:
    assert step_from_name("checkpoint-40") == 40
    assert step_from_name("epoch=1-step=40.ckpt") == 40
    assert step_from_name("ckpt-000012.pt") == 12
    assert step_from_name("last.ckpt") is None


def test_torch_save_file_complete_only_when_whole(tmp_path: Path) -> None:
    p = tmp_path / "ckpt-000005.pt"
    torch.save({"w": torch.arange(1000.0)}, p)
    data = p.read_bytes()
    assert judge_zip_bytes(data, p.name).complete
    for cut in (10, len(data) // 2, len(data) - 1):
        assert not judge_zip_bytes(data[:cut], p.name).complete, cut
    v = judge(p)
    assert v is not None and v.format == "torch-zip" and v.step == 5
    (tmp_path / "ckpt-000006.pt").write_bytes(data[: len(data) // 2])
    snap = read_entry(tmp_path / "ckpt-000006.pt", v, 6)
    assert isinstance(snap, str) and "zip" in snap  # truncated: never a snapshot


def test_dcp_directory_complete_once_metadata_is_there(tmp_path: Path) -> None:
    import torch.distributed.checkpoint as dcp

    d = tmp_path / "step-7"
    dcp.save({"w": torch.ones(4)}, checkpoint_id=str(d))
    v = judge(d)
    assert v is not None and (v.format, v.complete, v.step) == ("dcp", True, 7)
    (d / ".metadata").rename(d / ".metadata.tmp")  # as during its save: no .metadata yet
    v = judge(d)
    assert v is not None and v.format == "dcp" and not v.complete


def test_hf_checkpoint_complete_once_trainer_state_parses(tmp_path: Path) -> None:
    d = tmp_path / "checkpoint-30"
    d.mkdir()
    (d / "model.safetensors").write_bytes(b"x" * 100)
    v = judge(d)
    assert v is not None and v.format == "hf" and not v.complete
    (d / "trainer_state.json").write_text('{"global_step": 3')  # half written
    assert not judge(d).complete  # type: ignore[union-attr]
    (d / "trainer_state.json").write_text(json.dumps({"global_step": 30}))
    v = judge(d)
    assert v is not None and (v.complete, v.step) == (True, 30)
    assert judge(tmp_path / "tmp-checkpoint-40") is None  # a save in progress' name


def test_marker_commits_anything(tmp_path: Path) -> None:
    p = tmp_path / "weights.bin"
    p.write_bytes(os.urandom(64))
    assert judge(p) is not None and judge(p).format == "torch-zip"  # type: ignore[union-attr]
    other = tmp_path / "state.npz"
    other.write_bytes(b"abc")
    assert judge(other) is None  # no rule: needs a marker
    marker = burst.checkpoint.commit(other, 12)
    assert marker.name == "state.npz.burst-commit" and judge(marker) is None
    v = judge(other)
    assert v is not None and (v.format, v.complete, v.step) == ("marker", True, 12)
    with pytest.raises(FileNotFoundError):
        burst.checkpoint.commit(tmp_path / "absent", 1)


def test_snapshot_round_trip_and_watcher_needs_two_equal_scans(tmp_path: Path) -> None:
    src = tmp_path / "src"
    d = src / "checkpoint-3"
    (d / "sub").mkdir(parents=True)
    (d / "sub" / "a.bin").write_bytes(os.urandom(5000))
    (d / "empty").write_bytes(b"")
    (d / "trainer_state.json").write_text('{"global_step": 3}')
    got = []
    w = DirWatcher(src, got.append)
    assert w.scan() is None  # first sight: may still be changing
    handed = w.scan()
    assert handed is not None and handed.step == 3 and len(got) == 1
    assert w.scan() is None  # once
    out = write_entry(got[0].state(), tmp_path / "dst")
    for rel in ("sub/a.bin", "empty", "trainer_state.json"):
        assert (out / rel).read_bytes() == (d / rel).read_bytes()
    state = got[0].state()
    assert all(isinstance(a, np.ndarray) for a in state["burst_program"]["files"])
