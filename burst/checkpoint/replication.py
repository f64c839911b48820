"""Copy committed checkpoints to a second store (another region), verified on arrival.

Chunks go first, each read back from the destination and checked against its blake3; then
the manifest; then the destination's ``latest.json`` if the copy is newer than what it names.
"""

from __future__ import annotations

import json
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import blake3

from burst.checkpoint.catalog import list_checkpoints, load_manifest, read_latest
from burst.checkpoint.manifest import CHUNK_PREFIX, LATEST_KEY, CheckpointRef, chunk_key
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)


@dataclass
class ReplicationResult:
    checkpoints: list[CheckpointRef]
    copied_chunks: int
    copied_bytes: int


def replicate(
    src: ObjectStore,
    dst: ObjectStore,
    steps: list[int] | None = None,
    *,
    concurrency: int = 8,
) -> ReplicationResult:
    """Replicate the checkpoints at ``steps`` (default: all committed ones) from src to dst."""
    refs = [r for r in list_checkpoints(src) if steps is None or r.step in steps]
    have = {i.key[len(CHUNK_PREFIX) :] for i in dst.list(CHUNK_PREFIX)}
    copied_chunks = copied_bytes = 0

    def copy(digest: str) -> int:
        key = chunk_key(digest)
        try:
            data = src.get_bytes(key)
        except ObjectMissing as exc:
            raise CheckpointError(
                f"source chunk {digest[:16]} is missing", where=f"{src.url}/{key}"
            ) from exc
        if blake3.blake3(data).hexdigest() != digest:
            raise CheckpointError(
                f"source chunk {digest[:16]} is corrupt", where=f"{src.url}/{key}"
            )
        dst.put_chunk(key, data)  # a chunk: read back and verified just below
        if blake3.blake3(dst.get_bytes(key)).hexdigest() != digest:
            dst.delete([key])
            raise CheckpointError(f"chunk {digest[:16]} arrived corrupt", where=f"{dst.url}/{key}")
        return len(data)

    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ckpt-repl") as pool:
        for ref in refs:
            manifest = load_manifest(src, ref)
            todo = sorted({c.digest for c in manifest.chunks} - have)
            for n in pool.map(copy, todo):
                copied_bytes += n
            copied_chunks += len(todo)
            have.update(todo)
            data = manifest.to_bytes()
            dst.put_bytes(ref.key, data)  # the commit at the destination
            if dst.get_bytes(ref.key) != data:
                raise CheckpointError("manifest arrived corrupt", where=f"{dst.url}/{ref.key}")
            current = read_latest(dst)
            if current is None or (current.step, current.tier == "full") <= (
                ref.step,
                ref.tier == "full",
            ):
                doc = {"step": ref.step, "tier": ref.tier, "manifest": ref.key}
                dst.put_bytes(LATEST_KEY, json.dumps(doc).encode())
            log.info("replicated step %d (%s) to %s", ref.step, ref.tier, dst.url)
    return ReplicationResult(refs, copied_chunks, copied_bytes)
