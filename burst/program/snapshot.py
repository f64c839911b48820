"""A checkpoint entry of the program's directory as the state burst's checkpoint writer takes,
and back.

An entry (a file, or a directory and every regular file under it) becomes one state tree:
each file one uint8 array, so the writer's fixed-size chunks, content addressing (only changed
chunks travel), manifest-last commit, checksums, retention and replication apply to it as to
any state (``burst.checkpoint``): there is no second writer. Restoring writes the files back
under a temporary name and renames the entry into place, so the program never sees half of it.

A snapshot is taken only of an entry that did not change while it was read: its signature (the
relative path, size, mtime and inode of every file) is the same before and after, so a file
rewritten, truncated or deleted under the reader is never committed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from burst.errors import CheckpointError
from burst.program.formats import Verdict, judge_zip_bytes

#: the key of a program checkpoint's state (what restore recognises)
STATE_KEY = "burst_program"
Signature = tuple[tuple[str, int, int, int], ...]


def files_of(entry: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of the entry's regular files; ``""`` for a file entry."""
    if entry.is_file():
        return [("", entry)]
    out = []
    for root, dirs, names in os.walk(entry):
        dirs.sort()
        for name in sorted(names):
            p = Path(root) / name
            if p.is_file() and not p.is_symlink():
                out.append((p.relative_to(entry).as_posix(), p))
    return out


def signature(entry: Path) -> Signature | None:
    """What changes when any file of the entry changes; None when it is gone."""
    try:
        sig = []
        for rel, p in files_of(entry):
            st = p.stat()
            sig.append((rel, st.st_size, st.st_mtime_ns, st.st_ino))
        return tuple(sig)
    except FileNotFoundError:
        return None


def newest_mtime(sig: Signature) -> float:
    return max((m for _, _, m, _ in sig), default=0) / 1e9


@dataclass
class Snapshot:
    """The bytes of one complete entry, read while it did not change."""

    name: str
    format: str
    step: int
    kind: str  # file or dir
    files: list[tuple[str, np.ndarray]]
    sig: Signature

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for _, a in self.files)

    def state(self) -> dict[str, Any]:
        return {
            STATE_KEY: {
                "name": self.name,
                "format": self.format,
                "step": self.step,
                "kind": self.kind,
                "paths": [rel for rel, _ in self.files],
                "files": [arr for _, arr in self.files],
            }
        }


def read_entry(entry: Path, verdict: Verdict, step: int) -> Snapshot | str:
    """The entry's snapshot, or why none could be taken (changed while read, gone, not whole)."""
    before = signature(entry)
    if not before:
        return "gone or empty"
    try:
        files = [(rel, np.fromfile(p, dtype=np.uint8)) for rel, p in files_of(entry)]
    except OSError as exc:
        return f"could not be read ({exc.strerror or exc})"
    if signature(entry) != before:
        return "changed while it was read"
    if verdict.format == "torch-zip":
        check = judge_zip_bytes(files[0][1].tobytes(), entry.name)
        if not check.complete:
            return check.why
    kind = "file" if entry.is_file() else "dir"
    return Snapshot(entry.name, verdict.format, step, kind, files, before)


def is_program_state(state: Any) -> bool:
    return isinstance(state, dict) and isinstance(state.get(STATE_KEY), dict)


def _safe_rel(rel: str, where: str) -> str:
    p = PurePosixPath(rel)
    if p.is_absolute() or ".." in p.parts or rel.startswith("/"):
        raise CheckpointError(f"a program checkpoint names the path {rel!r}", where=where)
    return rel


def write_entry(state: dict[str, Any], directory: Path) -> Path:
    """Write a restored program checkpoint into ``directory`` (replacing an entry of the same
    name), under a temporary name first; returns the entry's path."""
    doc = state[STATE_KEY]
    name = str(doc["name"])
    if not name or "/" in name or name in (".", ".."):
        raise CheckpointError(f"a program checkpoint is named {name!r}", where=str(directory))
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / name
    tmp = directory / f".burst-restore-{name}"
    _remove(tmp)
    paths, arrays = list(doc["paths"]), list(doc["files"])
    if doc["kind"] == "file":
        _write(tmp, arrays[0])
    else:
        tmp.mkdir()
        for rel, arr in zip(paths, arrays, strict=True):
            target = tmp / _safe_rel(str(rel), str(directory))
            target.parent.mkdir(parents=True, exist_ok=True)
            _write(target, arr)
    _remove(final)
    os.replace(tmp, final)
    return final


def _write(path: Path, arr: Any) -> None:
    data = arr.numpy() if hasattr(arr, "numpy") else np.asarray(arr)
    np.ascontiguousarray(data).reshape(-1).view(np.uint8).tofile(path)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
