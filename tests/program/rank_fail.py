"""A torchrun worker that fails (no torch in it: fast). Run as torchrun's script:

    torchrun --nproc-per-node=2 tests/program/rank_fail.py MODE

Every rank draws a progress bar as tqdm does on a pipe (carriage returns), then rank 1:

* ``kill``: dies of SIGKILL (as the OOM killer kills it);
* ``raise``: raises ``ValueError: loss is nan at step 3``.

Rank 0 waits until torchrun stops it.
"""

from __future__ import annotations

import os
import signal
import sys
import time


def main() -> int:
    mode, rank = sys.argv[1], int(os.environ["RANK"])
    for i in range(1, 4):
        sys.stderr.write(f"\rtrain:  {33 * i}%|{'#' * i}{' ' * (3 - i)}| {i}/3 [00:0{i}<00:00]")
        sys.stderr.flush()
    if rank == 1:
        time.sleep(0.5)
        if mode == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        raise ValueError("loss is nan at step 3")
    time.sleep(60)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
