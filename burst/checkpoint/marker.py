"""The generic completion rule, from the program's side: one line after a save.

    import burst.checkpoint
    torch.save(state, f"{ckpt_dir}/step-{step}.bin")
    burst.checkpoint.commit(f"{ckpt_dir}/step-{step}.bin", step)

or, in a shell, ``echo $STEP > "$BURST_CHECKPOINT_DIR/step-$STEP.bin.burst-commit"``. The
marker says the entry beside it is complete; burst's watcher then commits it to the store in
the background (``burst.program.formats``, ``burst.program.watcher``). Light on purpose: no
torch, no store access, nothing of burst imported.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

#: ``<entry>.burst-commit``: the entry beside it is complete, at the step the marker holds.
MARKER_SUFFIX = ".burst-commit"


def commit(path: str | os.PathLike[str], step: int) -> Path:
    """Mark the checkpoint at ``path`` (a file or directory directly inside
    ``$BURST_CHECKPOINT_DIR``) complete at ``step``; returns the marker's path. Call it after
    the save has returned: whatever is in ``path`` then is what burst commits."""
    if isinstance(step, bool) or not isinstance(step, int) or step < 0:
        raise ValueError(f"step must be a whole number >= 0, not {step!r}")
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"no checkpoint at {p} to mark complete")
    marker = p.with_name(p.name + MARKER_SUFFIX)
    tmp = marker.with_name(marker.name + ".tmp")
    tmp.write_text(json.dumps({"step": step}))
    os.replace(tmp, marker)
    return marker
