"""The train step through the checkpoint engine: on a real S3 server on loopback (rclone serve
s3), with the Young/Daly interval, and with bad input. Real child processes."""

from __future__ import annotations

from pathlib import Path

import pytest
from attempts_harness import run_attempt, write_spec

from burst.errors import EXIT_BAD_INPUT, EXIT_PREEMPTED

pytestmark = pytest.mark.slow


def _finish(spec: Path, run_id: str, root: Path, env: dict[str, str]) -> tuple[list[int], dict]:  # type: ignore[type-arg]
    codes: list[int] = []
    for _ in range(6):
        a = run_attempt(spec, run_id, root, env)
        codes.append(a.code)  # type: ignore[arg-type]
        if a.code != EXIT_PREEMPTED:
            break
    return codes, a.doc()


@pytest.mark.e2e
def test_preempted_twice_on_s3_resumes_exactly(tmp_path: Path, s3_bucket: str) -> None:
    local = write_spec(tmp_path, name="local.yaml")
    codes, base = _finish(local, "s3-base", tmp_path / "runs", {})
    assert codes == [0]
    spec = tmp_path / "s3.yaml"
    spec.write_text(
        local.read_text().replace(
            f"checkpoint_uri: file://{tmp_path}/store", f"checkpoint_uri: s3://{s3_bucket}/ckpt"
        )
    )
    # each attempt in its own run directory, as each Argo retry is its own pod: what the
    # attempts learned and did travels through the store
    codes = []
    for n, steps in enumerate(("7", "19", "")):
        a = run_attempt(spec, "s3-run", tmp_path / f"pod{n}", {"BURST_PREEMPT_AT_STEPS": steps})
        codes.append(a.code)
    doc = a.doc()
    assert doc["checkpoint_store"] == f"s3://{s3_bucket}/ckpt/s3-run"
    assert doc["preemptions"] == 2
    assert [a["resumed_from"] for a in doc["attempts"]] == [0, 7, 19]
    assert doc["final_weights_sha256"] == base["final_weights_sha256"]


def test_auto_interval_follows_young_daly_and_leaves_the_weights_alone(tmp_path: Path) -> None:
    fixed = write_spec(tmp_path, steps=60, name="fixed.yaml")
    codes, base = _finish(fixed, "fixed", tmp_path / "runs", {})
    assert codes == [0]
    auto = write_spec(tmp_path, steps=60, interval="auto", name="auto.yaml")
    # an MTBF of 3.6 s makes Young/Daly short enough to show in 60 steps
    auto.write_text(
        auto.read_text().replace(
            "  providers: [aws]\n", "  providers: [aws]\n  mtbf_hours: 0.001\n"
        )
    )
    codes, doc = _finish(auto, "auto", tmp_path / "runs", {"BURST_PREEMPT_AT_STEPS": "20"})
    assert codes == [EXIT_PREEMPTED, 0]
    ci = doc["checkpoint_interval"]
    assert ci["mode"] == "young_daly" and ci["mtbf_s"] == pytest.approx(3.6)
    assert ci["blocking_s"] > 0 and ci["upload_s"] > 0 and ci["step_s"] > 0
    assert ci["interval_s"] >= min(ci["upload_s"], ci["young_daly_interval_s"])
    assert ci["interval_steps"] >= 1 and ci["why"].startswith("auto:")
    assert doc["final_weights_sha256"] == base["final_weights_sha256"]


def test_bad_preempt_steps_is_one_line_and_exit_2(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    spec = write_spec(tmp_path)
    a = run_attempt(spec, "bad", tmp_path / "runs", {"BURST_PREEMPT_AT_STEPS": "7,seven"})
    assert a.code == EXIT_BAD_INPUT
    err = capfd.readouterr().err
    lines = [ln for ln in err.splitlines() if "error" in ln]
    assert lines == [
        "burst train: error: BURST_PREEMPT_AT_STEPS='7,seven': 'seven' is not "
        "STEP[:notice[=SECONDS]|:node|:rank] (STEP 1 or more)"
    ]
    assert "Traceback" not in err


def test_a_corrupt_latest_full_checkpoint_falls_back_and_still_ends_exactly(
    tmp_path: Path,
) -> None:
    from burst.checkpoint import load_manifest
    from burst.checkpoint.manifest import chunk_key
    from burst.spec import load_spec
    from burst.storage import open_store
    from burst.storage.location import run_url

    spec = write_spec(tmp_path)
    codes, base = _finish(spec, "clean", tmp_path / "runs", {})
    assert codes == [0]
    env = {"BURST_PREEMPT_AT_STEPS": "25", "BURST_SIGTERM_GRACE_S": "0"}
    a = run_attempt(spec, "bitrot", tmp_path / "runs", env)
    assert a.code == EXIT_PREEMPTED
    assert a.doc()["attempts"][0]["emergency_save"]["tier"] == "none"
    store = open_store(run_url(load_spec(spec).storage.checkpoint_uri, "bitrot"))
    (ref,) = [r for r in store_refs(store) if (r.step, r.tier) == (20, "full")]
    manifest = load_manifest(store, ref)
    store.put_bytes(chunk_key(manifest.chunks[0].digest), b"bit rot")  # a corrupt chunk
    a = run_attempt(spec, "bitrot", tmp_path / "runs", {})
    assert a.code == 0
    doc = a.doc()
    assert doc["resumed_from"] == 10  # step 20 does not verify: the full one before it
    assert doc["final_weights_sha256"] == base["final_weights_sha256"]


def store_refs(store):  # type: ignore[no-untyped-def]
    from burst.checkpoint import list_checkpoints

    return list_checkpoints(store)


@pytest.mark.e2e
def test_a_corrupt_chunk_is_never_trusted_by_deduplication(tmp_path: Path) -> None:
    """The K-class case: a bit flips in a chunk of the newest full checkpoint. The resumed run
    falls back, retrains, and its saves hash to that chunk's name again: the chunk must be
    uploaded again (it was quarantined), so every checkpoint the run commits restores, and the
    final one equals an uninterrupted run's."""
    from burst.checkpoint import CheckpointManager, load_manifest
    from burst.checkpoint.manifest import chunk_key
    from burst.checkpoint.tree import flatten
    from burst.spec import load_spec
    from burst.storage import open_store
    from burst.storage.location import run_url

    spec = write_spec(tmp_path)
    job = load_spec(spec)
    codes, base = _finish(spec, "clean", tmp_path / "runs", {})
    assert codes == [0]
    clean = open_store(run_url(job.storage.checkpoint_uri, "clean"))
    clean_refs = store_refs(clean)
    final_chunks = {c.digest for c in load_manifest(clean, clean_refs[-1]).chunks}
    a = run_attempt(
        spec,
        "bitrot",
        tmp_path / "runs",
        # grace 0: no emergency save, what is committed counts (burst.train.preemption); the
        # steps paced so the save of step 20 commits before the notice at 25 on a loaded machine
        # (a save still in flight at the notice's deadline never commits)
        {"BURST_PREEMPT_AT_STEPS": "25", "BURST_SIGTERM_GRACE_S": "0", "BURST_STEP_PACE_S": "0.3"},
    )
    assert a.code == EXIT_PREEMPTED
    store = open_store(run_url(job.storage.checkpoint_uri, "bitrot"))
    (ref,) = [r for r in store_refs(store) if (r.step, r.tier) == (20, "full")]
    chunks = [c.digest for c in load_manifest(store, ref).chunks]
    # prefer a chunk the final checkpoint will reference too (the worst case), else any
    digest = next((d for d in chunks if d in final_chunks), chunks[len(chunks) // 2])
    data = bytearray(store.get_bytes(chunk_key(digest)))
    data[len(data) // 2] ^= 0x10  # one flipped bit: same size, wrong content
    store.put_bytes(chunk_key(digest), bytes(data))

    a = run_attempt(spec, "bitrot", tmp_path / "runs", {})
    assert a.code == 0
    doc = a.doc()
    assert doc["resumed_from"] == 10
    assert doc["final_weights_sha256"] == base["final_weights_sha256"]
    mgr = CheckpointManager(store)
    refs = store_refs(store)
    assert (20, "full") in [(r.step, r.tier) for r in refs]
    for r in refs:  # every checkpoint the run kept restores, verified chunk by chunk
        mgr.restore(r.step, tier=r.tier, fallback=False)
    final = mgr.restore(fallback=False)
    expect = CheckpointManager(clean, start_worker=False).restore(fallback=False)
    assert (final.step, final.tier) == (expect.step, expect.tier) == (30, "full")
    tree, arrays = flatten(final.state)
    expect_tree, expect_arrays = flatten(expect.state)
    assert tree == expect_tree
    assert [to_bytes(x) for x in arrays] == [to_bytes(x) for x in expect_arrays]
    assert store.get_bytes(f"quarantine/{digest}") == bytes(data)  # kept for a post-mortem
    assert blake3_of(store.get_bytes(chunk_key(digest))) == digest  # uploaded again
    mgr.close()


def blake3_of(data: bytes) -> str:
    import blake3

    return blake3.blake3(data).hexdigest()


def to_bytes(x: object) -> bytes:
    import numpy as np
    import torch

    if isinstance(x, torch.Tensor):
        return x.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if x.numel() else b""
    assert isinstance(x, np.ndarray)
    return x.tobytes()
