"""A checkpoint of the program's directory as the state burst's checkpoint writer takes,
and back.

A checkpoint is one or more *entries* of the directory (``Part``): a file, a directory and
every regular file under it, or a symbolic link to another entry of it. Several entries go
together when the framework saved them at the same step and its resume logic opens one of
them (Lightning's ``epoch=0-step=40.ckpt`` and ``last.ckpt``), and at the end of a run the
program's outputs (``trainer.save_model()``'s files) join its last checkpoint. The entries
become one state tree: each file one uint8 array, so the writer's fixed-size chunks, content
addressing (only changed chunks travel; a second copy of the same bytes costs nothing),
manifest-last commit, checksums, retention and replication apply to it as to any state
(``burst.checkpoint``): there is no second writer.

The tree keeps the layout of the first burst versions: the first entry's fields at the top
(``name``, ``format``, ``kind``, ``paths``, ``files``), the others under ``more``. Restoring
writes each entry back under a temporary name and renames it into place, so the program never
sees half of one; an entry is named by its path under the directory (``run1/checkpoint-40``).

A snapshot is taken only of an entry that did not change while it was read: its signature (the
relative path, size, mtime and inode of every file) is the same before and after, so a file
rewritten, truncated or deleted under the reader is never committed.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

import numpy as np

from burst.checkpoint.marker import commit
from burst.errors import CheckpointError
from burst.program.formats import Verdict, is_last_alias, judge, judge_zip_bytes

#: the key of a program checkpoint's state (what restore recognises)
STATE_KEY = "burst_program"
Signature = tuple[tuple[str, int, int, int], ...]


def files_of(entry: Path) -> list[tuple[str, Path]]:
    """(relative posix path, path) of the entry's regular files; ``""`` for a file entry."""
    if entry.is_symlink():
        return []
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
        if entry.is_symlink():
            st = entry.lstat()
            return (("->" + os.readlink(entry), 0, st.st_mtime_ns, st.st_ino),)
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
class Part:
    """One entry of a checkpoint: its path under the directory, its bytes (or the entry a
    link points at)."""

    name: str
    format: str
    step: int | None
    kind: str  # file, dir or link
    files: list[tuple[str, np.ndarray]]
    sig: Signature
    target: str | None = None  # a link's target, relative to the link

    @property
    def nbytes(self) -> int:
        return sum(a.nbytes for _, a in self.files)

    def doc(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "format": self.format,
            "step": self.step,
            "kind": self.kind,
            "paths": [rel for rel, _ in self.files],
            "files": [arr for _, arr in self.files],
        }
        if self.target is not None:
            out["target"] = self.target
        return out


@dataclass
class Snapshot:
    """The bytes of one checkpoint (its first entry is the one a resume starts from), each
    entry read while it did not change."""

    step: int
    parts: list[Part] = field(default_factory=list)

    @property
    def first(self) -> Part:
        return self.parts[0]

    @property
    def name(self) -> str:
        return self.first.name

    @property
    def format(self) -> str:
        return self.first.format

    @property
    def kind(self) -> str:
        return self.first.kind

    @property
    def files(self) -> list[tuple[str, np.ndarray]]:
        return self.first.files

    @property
    def sig(self) -> Signature:
        return self.first.sig

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.parts]

    @property
    def nbytes(self) -> int:
        return sum(p.nbytes for p in self.parts)

    def state(self) -> dict[str, Any]:
        doc = {**self.first.doc(), "step": self.step}
        if len(self.parts) > 1:
            doc["more"] = [p.doc() for p in self.parts[1:]]
        return {STATE_KEY: doc}


def read_part(entry: Path, name: str, verdict: Verdict | None) -> Part | str:
    """One entry's bytes, or why they could not be taken (changed while read, gone, not
    whole). ``verdict`` None: one of the program's outputs (no rule knows it)."""
    fmt = verdict.format if verdict is not None else "files"
    step = verdict.step if verdict is not None else None
    if entry.is_symlink():
        sig = signature(entry)
        if sig is None:
            return "gone"
        return Part(name, "link", step, "link", [], sig, target=os.readlink(entry))
    before = signature(entry)
    if not before:
        return "gone or empty"
    try:
        files = [(rel, np.fromfile(p, dtype=np.uint8)) for rel, p in files_of(entry)]
    except OSError as exc:
        return f"could not be read ({exc.strerror or exc})"
    if signature(entry) != before:
        return "changed while it was read"
    if fmt == "torch-zip":
        check = judge_zip_bytes(files[0][1].tobytes(), entry.name)
        if not check.complete:
            return check.why
    kind = "file" if entry.is_file() else "dir"
    return Part(name, fmt, step, kind, files, before)


def read_entry(entry: Path, verdict: Verdict, step: int) -> Snapshot | str:
    """A checkpoint of one entry (named by its own name), or why none could be taken."""
    part = read_part(entry, entry.name, verdict)
    return part if isinstance(part, str) else Snapshot(step, [part])


def is_program_state(state: Any) -> bool:
    return isinstance(state, dict) and isinstance(state.get(STATE_KEY), dict)


def parts_of(state: dict[str, Any]) -> list[dict[str, Any]]:
    """The entries of a program checkpoint's state, the one a resume starts from first."""
    doc = state[STATE_KEY]
    return [doc, *list(doc.get("more") or [])]


def _safe_rel(rel: str, where: str) -> str:
    p = PurePosixPath(rel)
    if not rel or p.is_absolute() or ".." in p.parts or rel.startswith("/") or "\\" in rel:
        raise CheckpointError(f"a program checkpoint names the path {rel!r}", where=where)
    return rel


def resume_entry(state: dict[str, Any]) -> str:
    """The entry a resume starts from (``BURST_RESUME_FROM``): the first that is no alias
    (Lightning's ``last.ckpt``) nor a link, else the first."""
    parts = parts_of(state)
    for doc in parts:
        name = str(doc["name"])
        if doc.get("kind") != "link" and not is_last_alias(PurePosixPath(name).name):
            return name
    return str(parts[0]["name"])


def write_entry(state: dict[str, Any], directory: Path) -> Path:
    """Write a restored program checkpoint into ``directory`` (replacing entries of the same
    names), each entry under a temporary name first; returns the path of the entry a resume
    starts from (``resume_entry``)."""
    where = str(directory)
    docs = parts_of(state)
    directory.mkdir(parents=True, exist_ok=True)
    links = []
    for doc in docs:
        name = _safe_rel(str(doc["name"]), where)
        if name in (".", ".."):
            raise CheckpointError(f"a program checkpoint is named {name!r}", where=where)
        if doc.get("kind") == "link":
            links.append((name, str(doc.get("target") or "")))
            continue
        _write_one(doc, directory, name)
        step = doc.get("step")
        if doc.get("format") == "marker" and isinstance(step, int):
            commit(directory / name, step)  # its marker too: what the program looks for
    for name, target in links:  # after what they point at
        final = directory / name
        if not target or os.path.isabs(target):
            raise CheckpointError(f"a program checkpoint links {name} to {target!r}", where=where)
        resolved = (final.parent / target).resolve()
        try:
            resolved.relative_to(directory.resolve())
        except ValueError:
            raise CheckpointError(
                f"a program checkpoint links {name} outside its directory ({target})", where=where
            ) from None
        final.parent.mkdir(parents=True, exist_ok=True)
        tmp = final.with_name(f".burst-restore-{final.name}")
        _remove(tmp)
        os.symlink(target, tmp)
        _remove(final)
        os.replace(tmp, final)
    return directory / resume_entry(state)


def resumed_step(entry: Path, stored: int) -> int:
    """The step of a restored entry as the framework's own state in it says
    (``trainer_state.json``'s or a Lightning checkpoint's ``global_step``, a marker's, its
    name's); ``stored``, the step it was committed under, when it says none."""
    try:
        verdict = judge(entry)
    except OSError:
        return stored
    return verdict.step if verdict is not None and verdict.step is not None else stored


def _write_one(doc: dict[str, Any], directory: Path, name: str) -> None:
    final = directory / name
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".burst-restore-{final.name}")
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


def _write(path: Path, arr: Any) -> None:
    data = arr.numpy() if hasattr(arr, "numpy") else np.asarray(arr)
    np.ascontiguousarray(data).reshape(-1).view(np.uint8).tofile(path)


def _remove(path: Path) -> None:
    with contextlib.suppress(FileNotFoundError):
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()
