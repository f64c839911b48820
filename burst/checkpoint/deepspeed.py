"""Checkpoint a DeepSpeed engine (ZeRO stages 1-3) through the same chunked, atomic upload.

``engine.save_checkpoint`` writes its files (every rank its shards) into a local directory;
rank 0 then hands the files' bytes to the CheckpointManager as one state, which is staged,
chunked, deduplicated and committed like any other. Restore fetches the files back into the
local directory and calls ``engine.load_checkpoint``.

The ranks must share ``local_dir`` (one node, or a shared filesystem); every rank calls
``save`` and ``restore`` (they are collective). The checkpoint is tier "full".
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np

from burst.checkpoint.manager import CheckpointManager
from burst.errors import CheckpointError

log = logging.getLogger(__name__)
TAG_PREFIX = "step"


def _dist() -> Any:
    import torch.distributed as dist

    return dist if dist.is_available() and dist.is_initialized() else None


def _rank() -> int:
    dist = _dist()
    return int(dist.get_rank()) if dist else 0


def _barrier() -> None:
    dist = _dist()
    if dist:
        dist.barrier()


def _broadcast(value: Any) -> Any:
    dist = _dist()
    if not dist:
        return value
    box = [value]
    dist.broadcast_object_list(box, src=0)
    return box[0]


class DeepSpeedCheckpointer:
    def __init__(self, engine: Any, manager: CheckpointManager, local_dir: str | Path) -> None:
        self.engine = engine
        self.manager = manager
        self.local_dir = Path(local_dir)

    @staticmethod
    def tag(step: int) -> str:
        return f"{TAG_PREFIX}{step:012d}"

    def save(self, step: int, client_state: dict[str, Any] | None = None) -> bool:
        """Collective: every rank writes its files; rank 0 stages and hands them off."""
        tag = self.tag(step)
        self.local_dir.mkdir(parents=True, exist_ok=True)
        self.engine.save_checkpoint(str(self.local_dir), tag=tag, client_state=client_state or {})
        _barrier()  # every rank's shard is on disk
        started = True
        if _rank() == 0:
            tag_dir = self.local_dir / tag
            files = {
                p.relative_to(tag_dir).as_posix(): np.fromfile(p, dtype=np.uint8)
                for p in sorted(tag_dir.rglob("*"))
                if p.is_file()
            }
            if not files:
                raise CheckpointError(f"DeepSpeed wrote no files for tag {tag}", where=str(tag_dir))
            state = {"deepspeed": {"tag": tag, "files": files}, "step": step}
            started = self.manager.save(step, state, tier="full")
            for old in self.local_dir.glob(f"{TAG_PREFIX}*"):
                if old.is_dir() and old.name != tag:
                    shutil.rmtree(old, ignore_errors=True)
        _barrier()
        return started

    def restore(self, step: int | None = None, **load_kwargs: Any) -> tuple[int, dict[str, Any]]:
        """Collective: rank 0 fetches the files, every rank loads. Returns (step, client_state)."""
        found: tuple[int, str] | None = None
        error: str | None = None
        if _rank() == 0:
            try:
                restored = self.manager.restore(step, tier="full")
                ds = restored.state["deepspeed"]
                tag_dir = self.local_dir / str(ds["tag"])
                shutil.rmtree(tag_dir, ignore_errors=True)
                for rel, data in ds["files"].items():
                    path = (tag_dir / rel).resolve()
                    if tag_dir.resolve() not in path.parents:
                        raise CheckpointError(f"file name {rel!r} escapes the checkpoint")
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with open(path, "wb") as f:
                        f.write(memoryview(data))
                        f.flush()
                        os.fsync(f.fileno())
                found = (restored.step, str(ds["tag"]))
            except (CheckpointError, KeyError, TypeError) as exc:
                error = (
                    exc.one_line()
                    if isinstance(exc, CheckpointError)
                    else (f"not a DeepSpeed checkpoint: {exc}")
                )
        found, error = _broadcast((found, error))
        if error or found is None:
            raise CheckpointError(error or "no checkpoint", where=self.manager.store.url)
        restored_step, tag = found
        path, client_state = self.engine.load_checkpoint(
            str(self.local_dir), tag=tag, **load_kwargs
        )
        if path is None:
            raise CheckpointError(f"DeepSpeed could not load tag {tag}", where=str(self.local_dir))
        return restored_step, dict(client_state or {})
