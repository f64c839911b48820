"""A torch extension build lock left by a killed build is removed; a live build's is kept."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from burst.train.extension_locks import STALE_AFTER_S, clear_stale_build_locks, extensions_root


def _lock(root: Path, name: str, age_s: float, now: float) -> Path:
    d = root / name
    d.mkdir(parents=True)
    lock = d / "lock"
    lock.touch()
    os.utime(lock, (now - age_s, now - age_s))
    return lock


def test_only_locks_older_than_any_build_are_removed(tmp_path: Path) -> None:
    now = 1_800_000_000.0
    stale = _lock(tmp_path, "deepspeed_shm_comm", STALE_AFTER_S + 60, now)
    building = _lock(tmp_path, "cpu_adam", 30, now)
    nested = _lock(tmp_path, "py311_cpu/fused_adam", STALE_AFTER_S * 10, now)  # default layout
    (tmp_path / "cpu_adam" / "cpu_adam.so").touch()
    assert clear_stale_build_locks(tmp_path, now=now) == sorted([stale, nested])
    assert not stale.exists() and not nested.exists() and building.exists()
    assert clear_stale_build_locks(tmp_path, now=now) == []  # nothing left to remove


def test_the_root_is_torch_extensions_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert extensions_root() == tmp_path
    assert clear_stale_build_locks() == []  # an empty root is fine
