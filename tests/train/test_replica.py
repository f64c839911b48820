"""storage.replica_uri: the final checkpoint is copied to the second store (another region),
verified on arrival, and restores there bit for bit."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from burst.checkpoint import CheckpointManager

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)


def test_final_checkpoint_is_replicated_and_restores_from_the_replica(
    runs_root: Path, quickstart_in: Path, tmp_path: Path, burst_cmd: list[str]
) -> None:
    replica = tmp_path / "replica"
    text = quickstart_in.read_text().replace(
        "  checkpoint_uri: ", f"  replica_uri: file://{replica}\n  checkpoint_uri: "
    )
    quickstart_in.write_text(text)
    proc = subprocess.run(
        [*burst_cmd, "run", str(quickstart_in), "--run-id", "rep"], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
    train = json.loads((runs_root / "rep" / "docs" / "train.json").read_text())
    assert train["replica"]["store"] == f"file://{replica / 'rep'}"
    assert train["replica"]["step"] == 30 and train["replica"]["copied_bytes"] > 0
    assert train["replica"]["verified"] is True  # read back in the replica, chunk by chunk

    primary = CheckpointManager(train["checkpoint_store"], start_worker=False)
    copy = CheckpointManager(train["replica"]["store"], start_worker=False)
    try:
        assert [r.step for r in copy.checkpoints()] == [30]
        a, b = primary.restore(step=30), copy.restore(step=30)  # checksums verified
        assert a.manifest == b.manifest
    finally:
        primary.close()
        copy.close()
