"""A real program that saves a checkpoint every 0.3 s for as long as it runs (no torch).

    python tests/program/saver_prog.py

``ckpt-00000N.pt`` (a whole zip archive) into ``$BURST_CHECKPOINT_DIR``, N = 1, 2, ...; it
exits 0 after 400 of them (two minutes: a supervisor that never stops it lets it finish).
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from prog import archive


def main() -> int:
    out = Path(os.environ["BURST_CHECKPOINT_DIR"])
    for step in range(1, 401):
        tmp = out / f".ckpt-{step:06d}.part"
        tmp.write_bytes(archive(1 + step % 3))
        tmp.rename(out / f"ckpt-{step:06d}.pt")
        print(f"saved step {step}", flush=True)
        time.sleep(0.3)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
