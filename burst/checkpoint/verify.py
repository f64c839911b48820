"""Verify chunks against their names, quarantine the corrupt ones, verify a whole checkpoint.

A chunk's key is the blake3 of its bytes, so deduplication trusts that a chunk present under a
digest holds those bytes. Bit rot or a torn write breaks that trust: a later save whose chunk
hashes to the same digest would skip the upload and commit a manifest pointing at bad bytes.
So a chunk found corrupt (wrong size or wrong blake3) is *quarantined*: its bytes move to
``quarantine/<digest>`` (kept for a post-mortem, never referenced) and ``chunks/<digest>``
is deleted, so the next save that needs it uploads it again.
"""

from __future__ import annotations

import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import blake3

from burst.checkpoint.catalog import load_manifest
from burst.checkpoint.manifest import CheckpointRef, chunk_key
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)

QUARANTINE_PREFIX = "quarantine/"


def quarantine_chunk(store: ObjectStore, digest: str, data: bytes | None = None) -> None:
    """Move a corrupt chunk out of ``chunks/`` (its bytes kept under ``quarantine/``)."""
    key = chunk_key(digest)
    try:
        if data is None:
            data = store.get_bytes(key)
        store.put_bytes(f"{QUARANTINE_PREFIX}{digest}", data)
    except ObjectMissing:
        return
    store.delete([key])
    log.warning(
        "chunk %s in %s is corrupt: quarantined (the next save that needs it uploads it again)",
        digest[:16],
        store.url,
    )


def chunk_is_sound(store: ObjectStore, digest: str, size: int) -> bool | None:
    """True: the chunk holds its bytes; False: corrupt (now quarantined); None: missing."""
    try:
        data = store.get_bytes(chunk_key(digest))
    except ObjectMissing:
        return None
    if len(data) == size and blake3.blake3(data).hexdigest() == digest:
        return True
    quarantine_chunk(store, digest, data)
    return False


@dataclass
class ChunkAudit:
    """Digests found sound and found corrupt while reading (set.add is thread-safe)."""

    sound: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)


@dataclass
class Verification:
    ref: CheckpointRef
    sound: set[str] = field(default_factory=set)
    corrupt: set[str] = field(default_factory=set)
    missing: set[str] = field(default_factory=set)

    @property
    def ok(self) -> bool:
        return not self.corrupt and not self.missing

    def problem(self) -> str:
        parts = []
        if self.corrupt:
            parts.append(f"{len(self.corrupt)} corrupt chunk(s) (quarantined)")
        if self.missing:
            parts.append(f"{len(self.missing)} missing chunk(s)")
        return f"checkpoint step {self.ref.step} ({self.ref.tier}): " + ", ".join(parts)


def verify_checkpoint(
    store: ObjectStore, ref: CheckpointRef, *, concurrency: int = 8
) -> Verification:
    """Read every chunk of ``ref`` and check it; corrupt chunks are quarantined.

    Raises CheckpointError only when the manifest itself is missing or corrupt.
    """
    manifest = load_manifest(store, ref)
    sizes = {c.digest: c.size for c in manifest.chunks}
    result = Verification(ref)

    def check(digest: str) -> tuple[str, bool | None]:
        return digest, chunk_is_sound(store, digest, sizes[digest])

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ckpt-verify") as pool:
        for digest, sound in pool.map(check, sorted(sizes)):
            if sound is True:
                result.sound.add(digest)
            elif sound is False:
                result.corrupt.add(digest)
            else:
                result.missing.add(digest)
    return result


def newest_restorable(
    store: ObjectStore, refs: list[CheckpointRef], *, concurrency: int = 8
) -> tuple[CheckpointRef | None, list[str]]:
    """The newest of ``refs`` whose every chunk verifies, and the problems of newer ones."""
    problems: list[str] = []
    for ref in reversed(refs):
        try:
            v = verify_checkpoint(store, ref, concurrency=concurrency)
        except CheckpointError as exc:
            problems.append(exc.one_line())
            continue
        if v.ok:
            return ref, problems
        problems.append(v.problem())
    return None, problems
