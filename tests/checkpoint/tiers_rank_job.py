"""One rank of the memory-tier tests (test_tiers.py), a process of its own: its "node" is
this process plus its peer server (``burst.checkpoint.peer``, started by the test).

    python tiers_rank_job.py train RANK STORE_DIR LOCAL PEER OUT_DIR
        trains 2 steps, saves step 2 (store and memory), trains 2, saves step 4 (memory only:
        store_every=2), writes OUT_DIR/rank-R.saved.pt (the state of step 4), then trains
        2 more steps, uninterrupted, and writes OUT_DIR/rank-R.after.pt (its weights)
    python tiers_rank_job.py resume RANK STORE_DIR LOCAL PEER OUT_DIR
        restores the newest checkpoint through the tiers (LOCAL, then PEER, then the store),
        prints {"step", "source", "store_gets"} as one JSON line, writes
        OUT_DIR/rank-R.restored.pt, trains 2 steps and writes OUT_DIR/rank-R.resumed.pt
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch

from burst.checkpoint import CheckpointManager, apply_state, capture_state
from burst.storage import LocalStore

sys.path.insert(0, str(Path(__file__).parent))
from ckpt_helpers import make_model, snapshot, train_steps

CHUNK = 64 << 10


class CountingStore(LocalStore):
    """The object store, counting the objects read from it (GETs)."""

    gets = 0

    def get_bytes(self, key: str) -> bytes:
        CountingStore.gets += 1
        return super().get_bytes(key)

    def get_into(self, key: str, out: memoryview) -> None:
        CountingStore.gets += 1
        super().get_into(key, out)

    def get_file(self, key: str, path: Path) -> None:
        CountingStore.gets += 1
        super().get_file(key, path)


def main() -> None:
    mode, rank, store_dir, local, peer, out = sys.argv[1:7]
    r = int(rank)
    out_dir = Path(out)
    torch.manual_seed(100 + r)
    model = make_model(layers=4, width=128, seed=r)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    store = CountingStore(store_dir)
    mgr = CheckpointManager(
        store,
        chunk_size=CHUNK,
        concurrency=2,
        local=local,
        peers=[peer],
        store_every=2,
        start_worker=mode == "train",
    )
    try:
        if mode == "train":
            train_steps(model, opt, 2, width=128)
            mgr.save(2, capture_state(model, opt))
            mgr.wait(60)
            train_steps(model, opt, 2, width=128)
            state = capture_state(model, opt)
            mgr.save(4, state)
            result = mgr.wait(60)
            assert result is not None and result.extra.get("store") is False, result
            torch.save(snapshot(state), out_dir / f"rank-{r}.saved.pt")
            train_steps(model, opt, 2, width=128)
            torch.save(snapshot(model.state_dict()), out_dir / f"rank-{r}.after.pt")
        else:
            restored = mgr.restore(tier="full")
            print(
                json.dumps(
                    {
                        "step": restored.step,
                        "source": restored.source,
                        "store_gets": CountingStore.gets,
                    }
                ),
                flush=True,
            )
            torch.save(restored.state, out_dir / f"rank-{r}.restored.pt")
            apply_state(restored.state, model, opt)
            train_steps(model, opt, 2, width=128)
            torch.save(snapshot(model.state_dict()), out_dir / f"rank-{r}.resumed.pt")
    finally:
        mgr.close()


if __name__ == "__main__":
    main()
