"""Restore a checkpoint: fetch chunks in parallel into preallocated arrays, verify each (the
xxh3-128 the manifest records for it, or, in an older manifest, its blake3).

A missing or corrupt chunk is a CheckpointError naming the checkpoint; ``restore_checkpoint``
with ``fallback=True`` then tries the previous complete checkpoint (the one restore loop,
``burst.checkpoint.read_plan.restore_newest``, with the read plan ``WholeRead``).

With memory tiers (``faster``: this node's and a peer's memory, ``burst.checkpoint.peer``)
the candidates are every checkpoint any tier holds, newest first, and each is read from the
fastest tier that holds it whole and verified: a tier whose copy is absent, partial, corrupt
or unreachable falls through to the next, the object store last.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import blake3
import numpy as np
import xxhash

from burst.checkpoint.catalog import list_checkpoints, load_manifest
from burst.checkpoint.layout import ArrayEntry, SpanIndex
from burst.checkpoint.manifest import CheckpointRef, ChunkRef, Manifest, chunk_key
from burst.checkpoint.read_plan import restore_newest
from burst.checkpoint.tree import array_paths, flatten, unflatten
from burst.checkpoint.verify import ChunkAudit, quarantine_chunk
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore, StoreError

log = logging.getLogger(__name__)


@dataclass
class Restored:
    step: int
    tier: str
    state: Any
    manifest: Manifest
    #: the tier it was read from: "store", or a memory tier's name ("local", "peer")
    source: str = "store"


def _allocate(entry: ArrayEntry, target: Any) -> tuple[Any, np.ndarray]:
    """(array to return, its bytes as a writable uint8 numpy view)."""
    if entry.kind == "numpy":
        if (
            isinstance(target, np.ndarray)
            and target.dtype.str == entry.dtype
            and tuple(target.shape) == entry.shape
            and target.flags.c_contiguous
            and target.flags.writeable
        ):
            return target, target.reshape(-1).view(np.uint8)
        raw = np.empty(entry.nbytes, dtype=np.uint8)
        return raw.view(np.dtype(entry.dtype)).reshape(entry.shape), raw
    import torch

    dtype = getattr(torch, entry.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise CheckpointError(f"unknown tensor dtype {entry.dtype!r} in manifest")
    if (
        isinstance(target, torch.Tensor)
        and target.device.type == "cpu"
        and target.dtype == dtype
        and tuple(target.shape) == entry.shape
        and target.is_contiguous()
        and entry.nbytes > 0
    ):
        return target, target.detach().reshape(-1).view(torch.uint8).numpy()
    raw_t = torch.empty(entry.nbytes, dtype=torch.uint8)
    out = (
        raw_t.view(dtype).view(entry.shape)
        if entry.nbytes
        else torch.empty(entry.shape, dtype=dtype)
    )
    return out, raw_t.numpy()


def allocate(
    manifest: Manifest, into: list[Any] | None = None
) -> tuple[list[Any], list[np.ndarray]]:
    """The arrays a restore returns and their bytes (writable uint8 numpy views): ``into[i]``
    itself where it fits manifest array ``i`` (a CPU tensor or numpy array of the same dtype
    and shape, contiguous: the restore writes into its memory), else a fresh array."""
    targets = into if into is not None and len(into) == len(manifest.arrays) else None
    outs: list[Any] = []
    raws: list[np.ndarray] = []
    for i, entry in enumerate(manifest.arrays):
        out, raw = _allocate(entry, targets[i] if targets else None)
        outs.append(out)
        raws.append(raw)
    return outs, raws


def fetch_chunks(
    store: ObjectStore,
    manifest: Manifest,
    chunks: list[ChunkRef],
    raws: list[np.ndarray],
    *,
    check: set[int] | None = None,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> None:
    """Fetch ``chunks`` of ``manifest`` in parallel into ``raws`` (see ``allocate``), each
    verified (``_sound``: the xxh3-128 the manifest records, or the blake3) unless ``check``
    is given and leaves its offset out.

    A chunk inside one array is read straight into that array's memory; one spanning several
    small arrays is read, then copied to each. A missing chunk is a CheckpointError; a chunk
    of the wrong size or bytes (checked or not) is quarantined (see burst.checkpoint.verify)
    and a CheckpointError. ``audit`` collects the digests that checked and the corrupt ones."""
    where = f"{store.url}/{manifest.key}"
    name = f"checkpoint step {manifest.step} ({manifest.tier})"
    try:
        index = SpanIndex(manifest.arrays)
    except CheckpointError as exc:
        raise CheckpointError(f"{name}: {exc.message}", where=where) from None

    def fetch(chunk: ChunkRef) -> None:
        segs = index.segments(chunk.span)
        direct = len(segs) == 1 and segs[0][3] == chunk.size
        verify = check is None or chunk.offset in check
        try:
            if direct:  # a piece of one large array: GET straight into its memory
                idx, e_off, _, length = segs[0]
                dst = raws[idx][e_off : e_off + length]
                store.get_into(chunk_key(chunk.digest), memoryview(dst))  # type: ignore[arg-type]
                data: Any = dst
            else:
                data = store.get_bytes(chunk_key(chunk.digest))
        except ObjectMissing as exc:
            raise CheckpointError(
                f"{name}: chunk {chunk.digest[:16]} is missing", where=where
            ) from exc
        except StoreError as exc:
            if "bytes, expected" not in exc.message:
                raise
            data = b""  # wrong size: reported as corrupt below
        if len(data) != chunk.size:
            verify = True
        if verify and not _sound(data, chunk, name, where):
            # Deduplication must never trust these bytes again: the next save uploads it.
            quarantine_chunk(store, chunk.digest, bytes(data) if len(data) else None)
            if audit is not None:
                audit.corrupt.add(chunk.digest)
            raise CheckpointError(
                f"{name}: chunk {chunk.digest[:16]} is corrupt (checksum mismatch)", where=where
            )
        if verify and audit is not None:
            audit.sound.add(chunk.digest)
        if not direct:
            src = np.frombuffer(data, dtype=np.uint8)
            for idx, e_off, c_off, length in segs:
                raws[idx][e_off : e_off + length] = src[c_off : c_off + length]

    if min(concurrency, len(chunks)) <= 1:  # no thread to start and wait for
        for c in chunks:
            fetch(c)
        return
    with ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="ckpt-get") as pool:
        futures = [pool.submit(fetch, c) for c in chunks]
        try:
            for fut in futures:
                fut.result()
        except BaseException:
            for fut in futures:
                fut.cancel()
            raise


def _sound(data: Any, chunk: ChunkRef, name: str, where: str) -> bool:
    """Whether ``data`` are ``chunk``'s bytes: its xxh3-128 as the manifest records it (the
    writer's, of the bytes whose blake3 names the chunk; ten times cheaper than blake3, and
    as sure for what a restore guards against: bit rot, torn or truncated writes, the wrong
    object; the manifest itself is checked by its blake3), else (an older manifest) its
    blake3. Where the xxh3 differs, the blake3 decides: sound bytes under a wrong recorded
    xxh3 are the manifest's fault (CheckpointError), not the chunk's (never quarantined)."""
    if len(data) != chunk.size:
        return False
    if chunk.check is None:
        return bool(blake3.blake3(data).hexdigest() == chunk.digest)
    if xxhash.xxh3_128_hexdigest(data) == chunk.check:
        return True
    if blake3.blake3(data).hexdigest() == chunk.digest:
        raise CheckpointError(
            f"{name}: the manifest's xxh3 of chunk {chunk.digest[:16]} does not match its "
            "bytes, whose blake3 does (a manifest written wrongly)",
            where=where,
        )
    return False


def fetch_arrays(
    store: ObjectStore,
    manifest: Manifest,
    *,
    into: list[Any] | None = None,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
) -> list[Any]:
    """Fetch and verify every chunk; a corrupt one is quarantined (see burst.checkpoint.verify)
    and the checkpoint is a CheckpointError. ``audit`` collects the digests that checked and
    the corrupt ones. ``into``: arrays (one per manifest array, None for none) the bytes go
    into where they fit (see ``allocate``); those that do not fit get a copy at the end."""
    outs, raws = allocate(manifest, into)
    fetch_chunks(store, manifest, manifest.chunks, raws, concurrency=concurrency, audit=audit)
    targets = into if into is not None and len(into) == len(manifest.arrays) else None
    if targets is not None:
        for i, (out, tgt) in enumerate(zip(outs, targets, strict=True)):
            if tgt is not None and out is not tgt:
                _copy_into(tgt, out)
                outs[i] = tgt
    return outs


def _copy_into(target: Any, value: Any) -> None:
    if isinstance(target, np.ndarray) and target.shape == value.shape:
        target[...] = value
        return
    try:
        import torch

        if isinstance(target, torch.Tensor) and tuple(target.shape) == tuple(value.shape):
            with torch.no_grad():
                target.copy_(value if isinstance(value, torch.Tensor) else torch.from_numpy(value))
            return
    except ImportError:  # pragma: no cover
        pass
    raise CheckpointError(
        f"cannot restore into a {type(target).__name__} of shape {getattr(target, 'shape', '?')}:"
        f" the checkpoint holds shape {tuple(value.shape)}"
    )


def match_targets(manifest: Manifest, into: Any) -> list[Any]:
    """For each array of ``manifest``, the array of the state ``into`` at the same path (the
    whole state's path, also for a checkpoint saved by several ranks), or None."""
    from burst.checkpoint.sharded import whole_paths

    return targets_at(whole_paths(manifest), into)


def targets_at(paths: Sequence[str | None], into: Any) -> list[Any]:
    """For each of ``paths`` (one per manifest array; None: none wanted), the array of the
    state ``into`` at that path, or None."""
    skeleton, arrays = flatten(into)
    by_path = dict(zip(array_paths(skeleton), arrays, strict=True))
    out: list[Any] = []
    seen: set[int] = set()
    for path in paths:
        target = by_path.get(path) if path is not None else None
        where = _address(target)
        if where is not None and where in seen:
            target = None  # memory shared by two paths (tied weights) is written once
        elif where is not None:
            seen.add(where)
        out.append(target)
    return out


def _address(array: Any) -> int | None:
    if isinstance(array, np.ndarray):
        return int(array.__array_interface__["data"][0])
    ptr = getattr(array, "data_ptr", None)
    return int(ptr()) if callable(ptr) and getattr(array, "numel", lambda: 0)() else None


def restore_ref(
    store: ObjectStore,
    ref: CheckpointRef,
    *,
    into: Any = None,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
    targets: Callable[[Manifest], list[Any] | None] | None = None,
) -> Restored:
    """``ref`` read from ``store``; ``into``: a whole state whose arrays (matched by their
    path) receive the bytes in place; ``targets``: instead, the arrays for a manifest (one per
    array, None for none; ``burst.checkpoint.parts_restore``: a rank's part)."""
    manifest = load_manifest(store, ref)
    into_arrays = None
    if targets is not None:
        into_arrays = targets(manifest)
    elif into is not None:
        # match arrays by their path in the state tree; unmatched ones are freshly allocated
        into_arrays = match_targets(manifest, into)
    try:
        arrays = fetch_arrays(
            store, manifest, into=into_arrays, concurrency=concurrency, audit=audit
        )
    except StoreError as exc:
        raise CheckpointError(
            f"checkpoint step {ref.step} ({ref.tier}): {exc.one_line()}",
            where=f"{store.url}/{ref.key}",
        ) from exc
    return Restored(ref.step, ref.tier, unflatten(manifest.tree, arrays), manifest)


@dataclass
class WholeRead:
    """The read plan of one rank restoring a whole checkpoint: every chunk read and
    verified (``restore_ref``), from the first of the ``faster`` tiers (name, store; with
    what each holds in ``held``) that has it whole and sound, else from ``store``.

    ``prefetch(ref)`` makes the memory tiers' read of ``ref`` ahead of the loop (while the
    store is still being listed: ``restore_checkpoint``); the loop's ``read`` of that ref
    then takes its outcome instead of reading the memory tiers again."""

    store: ObjectStore
    into: Any = None
    concurrency: int = 8
    audit: ChunkAudit | None = None
    faster: Sequence[tuple[str, ObjectStore]] = ()
    held: dict[str, set[CheckpointRef]] | None = None
    early: dict[CheckpointRef, Restored | list[str]] = field(default_factory=dict)

    def prefetch(self, ref: CheckpointRef) -> None:
        self.early[ref] = self._from_memory(ref)

    def _from_memory(self, ref: CheckpointRef) -> Restored | list[str]:
        """``ref`` from the first memory tier that holds it whole and sound, else what each
        tier's read found wrong."""
        problems: list[str] = []
        for name, tier in self.faster:
            if self.held is not None and ref not in self.held.get(name, set()):
                continue
            try:
                # no audit: what a memory tier holds says nothing of the store's chunks
                got = restore_ref(tier, ref, into=self.into, concurrency=self.concurrency)
            except (CheckpointError, StoreError) as exc:
                problems.append(f"{name}: {exc.one_line()}")
                log.warning(
                    "checkpoint step %d (%s) not read from %s memory (%s): next tier",
                    ref.step,
                    ref.tier,
                    name,
                    exc.one_line(),
                )
                continue
            got.source = name
            return got
        return problems

    def read(self, ref: CheckpointRef) -> Restored:
        early = self.early.pop(ref, None)
        # a read of another candidate may write into the same arrays (``into``): a result
        # read ahead of it is not kept (a failure found ahead of it still holds)
        self.early = {r: e for r, e in self.early.items() if not isinstance(e, Restored)}
        got = early if early is not None else self._from_memory(ref)
        if isinstance(got, Restored):
            return got
        if self.held is not None and ref not in self.held.get("store", set()):
            raise CheckpointError(
                f"checkpoint step {ref.step} ({ref.tier}) is in no tier whole: " + "; ".join(got),
                where=self.store.url,
            )
        return restore_ref(
            self.store, ref, into=self.into, concurrency=self.concurrency, audit=self.audit
        )

    def finish(self, ref: CheckpointRef, got: Restored) -> Restored:
        return got


def restore_checkpoint(
    store: ObjectStore,
    step: int | None = None,
    *,
    tier: str | None = None,
    into: Any = None,
    fallback: bool | None = None,
    concurrency: int = 8,
    audit: ChunkAudit | None = None,
    faster: Sequence[tuple[str, ObjectStore]] = (),
) -> Restored:
    """Restore ``step`` (newest if None); with fallback, older complete ones on failure.
    ``faster``: memory tiers (name, store), fastest first, read before the store."""
    plan = WholeRead(store, into=into, concurrency=concurrency, audit=audit, faster=faster)

    def prefetch(in_memory: dict[str, set[CheckpointRef]]) -> None:
        # the newest candidate the memory tiers hold, read while the store is listed: it is
        # the restore's result unless the store lists a newer one (then the loop goes on)
        mine = sorted(set().union(*in_memory.values()), key=_order)
        if step is not None:
            mine = [r for r in mine if r.step == step]
        if mine:
            plan.held = in_memory
            plan.prefetch(mine[-1])

    held = tier_catalog(store, faster, tier, while_listing=prefetch) if faster else None
    refs = sorted(set().union(*held.values()), key=_order) if held else []
    if held is None:
        refs = list_checkpoints(store, tier)
    if step is not None:
        chosen = [r for r in refs if r.step == step]
        if not chosen:
            raise CheckpointError(
                f"no committed checkpoint at step {step}" + (f" ({tier})" if tier else ""),
                where=store.url,
            )
        older = [r for r in refs if r.step < step]
        refs = older + chosen[-1:]
    if not refs:
        raise CheckpointError(
            "no committed checkpoint" + (f" ({tier})" if tier else ""), where=store.url
        )
    if fallback is None:
        fallback = step is None
    plan.held = held
    restored = restore_newest(refs, plan, where=store.url, fallback=fallback)
    assert restored is not None  # refs is not empty
    return restored


def _order(ref: CheckpointRef) -> tuple[int, bool]:
    return (ref.step, ref.tier == "full")


def tier_catalog(
    store: ObjectStore,
    faster: Sequence[tuple[str, ObjectStore]],
    tier: str | None = None,
    *,
    while_listing: Callable[[dict[str, set[CheckpointRef]]], None] | None = None,
) -> dict[str, set[CheckpointRef]]:
    """The checkpoints each tier lists (``"store"`` for the store). A tier that cannot be
    listed holds nothing; the store's failure is raised only when no memory tier holds any.
    The tiers are listed at once, the store first: its listing (a client to build, a round
    trip to a remote service) is the slowest, and a restore from memory does not wait for
    it before it reads: ``while_listing(held)``, given what the memory tiers hold once they
    are listed (when they hold any), runs while the store's listing is still under way."""
    with ThreadPoolExecutor(max_workers=len(faster) + 1, thread_name_prefix="burst-list") as pool:
        in_store = pool.submit(list_checkpoints, store, tier)
        listed = [pool.submit(list_checkpoints, s, tier) for _, s in faster]
        held: dict[str, set[CheckpointRef]] = {}
        for (name, _), future in zip(faster, listed, strict=True):
            try:
                held[name] = set(future.result())
            except (StoreError, CheckpointError) as exc:
                log.warning("%s memory not listed (%s): skipped", name, exc.one_line())
                held[name] = set()
        if while_listing is not None and any(held.values()):
            while_listing(dict(held))
        try:
            held["store"] = set(in_store.result())
        except StoreError as exc:
            if not any(v for k, v in held.items() if k != "store"):
                raise
            log.warning("the store is not listed (%s): restoring from memory", exc.one_line())
            held["store"] = set()
    return held
