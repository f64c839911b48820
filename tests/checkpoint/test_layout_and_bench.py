"""Chunk planning invariants, and the benchmark script's code path on a tiny state."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from burst.checkpoint.layout import SpanIndex, build_layout, plan_chunks, small_limit

REPO = Path(__file__).resolve().parents[2]


def test_chunks_cover_every_byte_once_and_never_mix_large_arrays() -> None:
    rng = np.random.default_rng(0)
    chunk = 64 << 10
    sizes = [int(s) for s in rng.choice([0, 3, 100, 5000, 4096 * 3, 70_000, 300_000], 200)]
    arrays = [torch.zeros(s, dtype=torch.uint8) for s in sizes] + [np.zeros(7, np.float64)]
    entries, total = build_layout(arrays, chunk)
    spans = plan_chunks(entries, chunk)
    index = SpanIndex(entries)
    covered = [0] * len(entries)
    for span in spans:
        assert 0 < span.size <= chunk and span.offset + span.size <= total
        segs = index.segments(span)
        large = [i for i, *_ in segs if entries[i].nbytes >= small_limit(chunk)]
        assert len(large) <= 1 and (not large or len(segs) == 1)
        for i, _e_off, _c_off, length in segs:
            covered[i] += length
    assert covered == [e.nbytes for e in entries]


@pytest.mark.e2e
@pytest.mark.minutes  # the benchmark's own path, not burst's: make test-long
def test_benchmark_smoke(tmp_path: Path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks/checkpoint.py"), "--smoke", "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(out.read_text())
    for key in (
        "state_bytes",
        "stall_ratio",
        "step_slowdown",
        "delta_bytes_ratio_weights",
        "delta_bytes_ratio_full",
        "upload_ratio",
        "restore_ratio",
        "server",
        "cores",
    ):
        assert key in doc, key
    assert doc["state_bytes"] > 0 and doc["cores"] >= 1
    assert all(v > 0 for k, v in doc.items() if k.endswith("ratio") or k == "step_slowdown")
