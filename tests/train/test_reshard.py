"""Resume on another world size (issue 18), end to end on CPU: a run of W ranks preempted at
a random step resumes on W' ranks from the saved step and sample, and its per-step loss
curve matches the uninterrupted reference of the same data schedule (``replay_losses``).

Tolerance: each step's loss within a relative 1e-4 of the reference. The reference differs
from real ranks only in the order of float sums (the gloo all-reduce against one process's
gradient accumulation); the attempt before the change, an uninterrupted W-rank run, is held
to the same bound, so the bound is what a run with no resume already needs. A data position
off by one batch or a mis-restored optimizer moment moves the loss by far more (percents).
The direction (2 -> 3 or 3 -> 2: chunks that do not divide evenly among the ranks) and the
step come from a seed printed with the result (``BURST_TEST_SEED`` replays one).
"""

from __future__ import annotations

import os
import random
from pathlib import Path

import pytest
from ranks_helpers import doc, ranks_spec, replay_losses, train

from burst.checkpoint import CheckpointManager
from burst.checkpoint.sharded import assemble
from burst.storage import open_store

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

SEED = int(os.environ.get("BURST_TEST_SEED") or random.SystemRandom().randrange(10**6))
STEPS = 10
RTOL = 1e-4
BATCH = 32  # the quickstart's per-rank batch


def relative_gap(curve: list[float], ref: list[float]) -> float:
    return max(abs(a - b) / max(abs(b), 1e-12) for a, b in zip(curve, ref, strict=True))


def test_resumed_on_another_world_size_continues_data_and_loss_curve(tmp_path: Path) -> None:
    rng = random.Random(SEED)
    before, after = rng.choice([(2, 3), (3, 2)])  # one direction a run (suite time)
    at = rng.randrange(2, STEPS - 1)
    runs, store = tmp_path / "runs", tmp_path / "store"
    old = ranks_spec(tmp_path, "old", processes=before, steps=STEPS)
    new = ranks_spec(tmp_path, "new", processes=after, steps=STEPS)
    first = train(old, "move", runs, BURST_PREEMPT_AT_STEPS=str(at))
    assert first.returncode == 75, f"seed {SEED}: {first.stderr[-3000:]}"
    second = train(new, "move", runs)
    assert second.returncode == 0, f"seed {SEED}: {second.stderr[-3000:]}"
    d = doc(runs, "move")
    assert [a["resumed_from"] for a in d["attempts"]] == [0, at], f"seed {SEED}"
    assert [a["world_size"] for a in d["attempts"]] == [before, after]
    # the data position: every sample once, none skipped, across the change
    mgr = CheckpointManager(open_store(f"file://{store}/move"), start_worker=False)
    try:
        final = assemble(mgr.restore(STEPS, tier="full").state)
    finally:
        mgr.close()
    assert final["samples"] == BATCH * (before * at + after * (STEPS - at)), f"seed {SEED}"
    # the loss curve: the attempt before the change, then the one after
    curve = d["attempts"][0]["losses"] + d["attempts"][1]["losses"]
    assert len(curve) == STEPS
    ref = replay_losses(old, [before] * at + [after] * (STEPS - at))
    gap_before = relative_gap(curve[:at], ref[:at])
    gap_after = relative_gap(curve[at:], ref[at:])
    print(
        f"seed {SEED}, {before} -> {after} ranks at step {at}: relative gap {gap_before:.2e} before, {gap_after:.2e} after"
    )
    assert gap_before <= RTOL, f"seed {SEED}: the uninterrupted part is off the reference"
    assert gap_after <= RTOL, f"seed {SEED} step {at}: {curve[at:]} vs {ref[at:]}"
