"""A trainer that starts a save and then waits to be killed (for test_trainer_killed.py).

    python trainer_job.py STORE_DIR
Prints the shared buffer's path and the worker's pid once save() has returned, then sleeps.
"""

from __future__ import annotations

import sys
import time

import torch

from burst.checkpoint import CheckpointManager


def main() -> None:
    mgr = CheckpointManager(sys.argv[1], chunk_size=256 << 10, concurrency=1)
    g = torch.Generator().manual_seed(42)
    mgr.save(7, {"w": torch.randn(4 << 20, generator=g)})
    assert mgr._buffer is not None
    print(mgr._buffer.path, mgr.worker_pid, flush=True)
    time.sleep(600)


if __name__ == "__main__":
    main()
