"""Whole-state checkpoints in a local directory, committed by a manifest written last.

The simple store the first train step uses: ``<dir>/<step>/state.pt`` then
``<dir>/<step>/manifest.json`` (the commit), then the ``latest`` pointer. A directory without
a manifest does not exist for ``latest()`` or ``load()``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from burst.errors import CheckpointError


def _atomic_write(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class LocalCheckpoints:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        self.root.mkdir(parents=True, exist_ok=True)

    def save(self, step: int, state: dict[str, Any], tier: str) -> dict[str, Any]:
        """Serialize (training is blocked), then write and commit; the manifest has both times."""
        started = time.monotonic()
        d = self.root / f"{step:010d}"
        d.mkdir(exist_ok=True)
        buf = _to_bytes(state)
        serialized = time.monotonic()
        _atomic_write(d / "state.pt", buf)
        manifest = {
            "step": step,
            "tier": tier,
            "bytes": len(buf),
            "sha256": hashlib.sha256(buf).hexdigest(),
            "blocking_s": round(serialized - started, 6),
            "upload_s": round(time.monotonic() - serialized, 6),
            "committed_at": time.time(),
        }
        _atomic_write(d / "manifest.json", json.dumps(manifest).encode())
        _atomic_write(self.root / "latest", f"{step:010d}".encode())
        return manifest

    def committed(self) -> list[dict[str, Any]]:
        out = []
        for d in sorted(self.root.iterdir()):
            m = d / "manifest.json"
            if d.is_dir() and m.exists():
                out.append(json.loads(m.read_text()))
        return out

    def latest(self, tier: str | None = None) -> dict[str, Any] | None:
        items = [m for m in self.committed() if tier is None or m["tier"] == tier]
        return items[-1] if items else None

    def load(self, manifest: dict[str, Any]) -> dict[str, Any]:
        path = self.root / f"{manifest['step']:010d}" / "state.pt"
        data = path.read_bytes()
        if hashlib.sha256(data).hexdigest() != manifest["sha256"]:
            raise CheckpointError(
                f"checkpoint {manifest['step']} is corrupt (sha256 mismatch)", where=str(path)
            )
        return torch.load(_from_bytes(data), weights_only=False)  # type: ignore[no-any-return]


def _to_bytes(state: dict[str, Any]) -> bytes:
    import io

    b = io.BytesIO()
    torch.save(state, b)
    return b.getvalue()


def _from_bytes(data: bytes) -> Any:
    import io

    return io.BytesIO(data)
