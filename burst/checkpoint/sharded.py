"""Sharded checkpoints: every rank writes its own shard, one global manifest commits them all.

A two-phase commit over the same chunk store (see docs/checkpoints.md, "Many ranks"):

1. every rank's own background worker hashes and uploads its shard's chunks and writes its
   *shard manifest* (an ordinary manifest, at ``shards/<step>.<tier>/<session>/rank-<r>.json``),
   keeping its ``pending/`` record so a garbage collection cannot take its chunks;
2. rank 0's worker waits until the shard manifests of every rank of the same session exist,
   checks them, and writes ONE global manifest at the ordinary key
   ``manifests/<step>.<tier>.json`` (the commit), then ``latest.json``, then drops the pending
   records and the shard manifests.

The global manifest is an ordinary ``burst-checkpoint/1`` manifest of the shards laid end to
end (offsets shifted, array indices renumbered), its skeleton ``{"sharded": {"world": W,
"shards": [...]}}``: listing, retention, garbage collection, replication and restore need no
change, and a checkpoint saved by N ranks restores on any number. Until the global manifest
exists nothing is visible: a rank or a worker killed at any moment leaves at most shard
manifests and chunks that no manifest references.

The session (a token agreed by the ranks of one attempt) keeps shards of an attempt that died
from ever being combined with another attempt's.

``partition`` and ``assemble`` split a replicated state (DDP: identical on every rank) into W
disjoint parts balanced by bytes, each written once by one rank, and join them back.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
import threading
import time
from dataclasses import asdict, dataclass
from typing import Any

from burst import faults
from burst.checkpoint.layout import ALIGN, ArrayEntry
from burst.checkpoint.manifest import LATEST_KEY, ChunkRef, Manifest, manifest_key
from burst.checkpoint.tree import array_paths, flatten, unflatten
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)

SHARD_PREFIX = "shards/"
#: how long rank 0's worker waits for the other ranks' shards of a step
DEFAULT_COMMIT_TIMEOUT_S = 300.0
POLL_S = 0.05
#: once rank 0's trainer is gone, how much longer its worker waits for missing shards
ABANDONED_GRACE_S = 10.0


@dataclass(frozen=True)
class ShardInfo:
    rank: int
    world: int
    session: str
    commit_timeout_s: float = DEFAULT_COMMIT_TIMEOUT_S
    # False: rank 0's writer stops after phase 1 and its caller commits phase 2 itself
    # (``commit_global``), e.g. the DCP adapter, whose commit also carries DCP's metadata
    global_commit: bool = True

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @staticmethod
    def from_json(d: dict[str, Any]) -> ShardInfo:
        return ShardInfo(
            int(d["rank"]),
            int(d["world"]),
            str(d["session"]),
            float(d.get("commit_timeout_s", DEFAULT_COMMIT_TIMEOUT_S)),
            bool(d.get("global_commit", True)),
        )


def shard_dir(step: int, tier: str, session: str) -> str:
    return f"{SHARD_PREFIX}{step:012d}.{tier}/{session}/"


def shard_key(step: int, tier: str, session: str, rank: int) -> str:
    return f"{shard_dir(step, tier, session)}rank-{rank:05d}.json"


def write_shard(store: ObjectStore, manifest: Manifest, shard: ShardInfo, pending: str) -> str:
    """Phase 1: this rank's shard is durable (its chunks are uploaded already)."""
    manifest.stats["shard"] = {"rank": shard.rank, "world": shard.world, "pending": pending}
    key = shard_key(manifest.step, manifest.tier, shard.session, shard.rank)
    store.put_bytes(key, manifest.to_bytes())
    faults.checkpoint("shard-written")
    return key


def check_commit_by(commit_by: float | None, step: int, tier: str, where: str) -> None:
    """Refuse a commit past a stop notice's deadline (``commit_by``, time.time()): at the
    deadline, what is committed is what counts; a manifest written later would be a save
    that ran past the notice (the node may be gone, or a later attempt under way)."""
    if commit_by is not None and time.time() > commit_by:
        raise CheckpointError(
            f"step {step} ({tier}) not committed: the stop notice's deadline passed "
            f"{time.time() - commit_by:.3f}s before its commit; the previous checkpoint stands",
            where=where,
        )


#: how often a wait for missing shards looks whether another committer committed them
COMMITTED_CHECK_S = 1.0


class _Committed(Exception):
    """The shards waited for were committed by another committer (their global manifest)."""

    def __init__(self, manifest: Manifest) -> None:
        super().__init__("committed")
        self.manifest = manifest


def committed_in_session(store: ObjectStore, step: int, tier: str, session: str) -> Manifest | None:
    """The global manifest of (``step``, ``tier``) when it commits this session's shards
    (a survivor committed them, or rank 0's worker did): None otherwise (none, or an earlier
    attempt's)."""
    key = manifest_key(step, tier)
    try:
        m = Manifest.from_bytes(store.get_bytes(key), f"{store.url}/{key}")
    except ObjectMissing:
        return None
    return m if m.stats.get("session") == session else None


def _wait_for_shards(
    store: ObjectStore,
    step: int,
    tier: str,
    shard: ShardInfo,
    abandoned: threading.Event | None = None,
    commit_by: float | None = None,
) -> list[Manifest]:
    prefix = shard_dir(step, tier, shard.session)
    deadline = time.monotonic() + shard.commit_timeout_s
    if commit_by is not None:  # a notice's deadline: nobody waits for a shard past it
        deadline = min(deadline, time.monotonic() + max(0.0, commit_by - time.time()))
    cut = False
    looked = time.monotonic()
    while True:
        present = {i.key for i in store.list(prefix)}
        wanted = [shard_key(step, tier, shard.session, r) for r in range(shard.world)]
        missing = [r for r, k in enumerate(wanted) if k not in present]
        if not missing:
            break
        if time.monotonic() - looked >= COMMITTED_CHECK_S:  # (a survivor's commit)
            looked = time.monotonic()
            done = committed_in_session(store, step, tier, shard.session)
            if done is not None:
                raise _Committed(done)
        moved_on = _moved_on(store, step, shard.session, missing)
        if moved_on:
            raise CheckpointError(
                f"step {step} ({tier}) not committed: rank(s) {','.join(map(str, moved_on))} "
                "wrote a later shard instead (their save of this step failed); the previous "
                "checkpoint stands",
                where=f"{store.url}/{prefix}",
            )
        if abandoned is not None and abandoned.is_set() and not cut:
            # rank 0's trainer is gone (a peer died, the node stops): shards still uploading
            # may land, a dead rank's never will
            deadline, cut = min(deadline, time.monotonic() + ABANDONED_GRACE_S), True
        if time.monotonic() >= deadline:
            raise CheckpointError(
                f"step {step} ({tier}) not committed: the shard of rank(s) "
                f"{','.join(map(str, missing))} of {shard.world} did not arrive within "
                f"{shard.commit_timeout_s:g}s; the previous checkpoint stands",
                where=f"{store.url}/{prefix}",
            )
        time.sleep(POLL_S)
    out = []
    for r, key in enumerate(wanted):
        try:
            m = Manifest.from_bytes(store.get_bytes(key), f"{store.url}/{key}")
        except ObjectMissing as exc:  # pragma: no cover - listed a moment ago
            raise CheckpointError(f"shard of rank {r} vanished", where=key) from exc
        info = m.stats.get("shard") or {}
        if (m.step, m.tier) != (step, tier) or info.get("world") != shard.world:
            raise CheckpointError(
                f"shard of rank {r} is step {m.step} ({m.tier}) of world {info.get('world')}, "
                f"not step {step} ({tier}) of world {shard.world}",
                where=f"{store.url}/{key}",
            )
        out.append(m)
    return out


def _moved_on(store: ObjectStore, step: int, session: str, ranks: list[int]) -> list[int]:
    """Those of ``ranks`` with a shard of a later step in this session: theirs of ``step``
    will never come (its worker died; the rank went on)."""
    later = set()
    for info in store.list(SHARD_PREFIX):
        parts = info.key[len(SHARD_PREFIX) :].split("/")
        if len(parts) != 3 or parts[1] != session or not parts[2].startswith("rank-"):
            continue
        head = parts[0].split(".")[0]
        if head.isdigit() and int(head) > step:
            later.add(int(parts[2][5:].split(".")[0]))
    return sorted(r for r in ranks if r in later)


def _drop_late_shards(store: ObjectStore, step: int, tier: str, shard: ShardInfo) -> None:
    """The shards of a checkpoint already committed (written again, late: a live peer's part
    written by a survivor too, or rank 0's own after a survivor committed), and their
    pending records: nothing references them."""
    keys = [i.key for i in store.list(shard_dir(step, tier, shard.session))]
    pending = []
    for key in keys:
        try:
            m = Manifest.from_bytes(store.get_bytes(key), f"{store.url}/{key}")
        except (ObjectMissing, CheckpointError):
            continue
        pending.append(str((m.stats.get("shard") or {}).get("pending") or ""))
    store.delete([p for p in pending if p])
    store.delete(keys)


def _shift(skel: Any, by: int) -> Any:
    """Renumber the array references of a skeleton by ``by``."""
    if isinstance(skel, list):
        return [_shift(v, by) for v in skel]
    if not isinstance(skel, dict):
        return skel
    if len(skel) == 1:
        ((tag, val),) = skel.items()
        if tag in ("__tensor__", "__ndarray__"):
            return {tag: int(val) + by}
    return {k: _shift(v, by) for k, v in skel.items()}


def merge(shards: list[Manifest]) -> Manifest:
    """The global manifest: the shards laid end to end, as one ordinary manifest."""
    first = shards[0]
    if any(m.chunk_size != first.chunk_size for m in shards):
        raise CheckpointError("shards were cut with different chunk sizes")
    arrays: list[ArrayEntry] = []
    chunks: list[ChunkRef] = []
    trees: list[Any] = []
    base = 0
    per_rank: list[dict[str, Any]] = []
    for m in shards:
        trees.append(_shift(m.tree, len(arrays)))
        arrays += [
            ArrayEntry(a.kind, a.dtype, a.shape, a.offset + base, a.nbytes) for a in m.arrays
        ]
        chunks += [ChunkRef(c.offset + base, c.size, c.digest, c.check) for c in m.chunks]
        per_rank.append(
            {
                "bytes": m.total_bytes,
                "uploaded_bytes": m.stats.get("uploaded_bytes", 0),
                "uploaded_chunks": m.stats.get("uploaded_chunks", 0),
                "reused_chunks": m.stats.get("reused_chunks", 0),
            }
        )
        # the shard's extent in its layout: ``total_bytes`` counts the chunks' bytes only,
        # not the alignment gaps between arrays, so a shard laid at base + total_bytes could
        # overlap the previous one's last array (its restore would then read the next
        # shard's bytes into it)
        extent = max(
            [m.total_bytes]
            + [a.offset + a.nbytes for a in m.arrays]
            + [c.offset + c.size for c in m.chunks]
        )
        base += (extent + ALIGN - 1) // ALIGN * ALIGN
    uploaded = sum(int(p["uploaded_bytes"]) for p in per_rank)
    return Manifest(
        step=first.step,
        tier=first.tier,
        created_at=dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds"),
        chunk_size=first.chunk_size,
        total_bytes=base,
        arrays=arrays,
        chunks=chunks,
        tree={"sharded": {"world": len(shards), "shards": trees}},
        stats={
            "uploaded_bytes": uploaded,
            "uploaded_chunks": sum(int(p["uploaded_chunks"]) for p in per_rank),
            "reused_chunks": sum(int(p["reused_chunks"]) for p in per_rank),
            "ranks": per_rank,
            # every shard's writer uploaded or read back each chunk it references
            "verified": all(m.stats.get("verified") is True for m in shards),
        },
    )


def shards_present(store: ObjectStore, step: int, tier: str, shard: ShardInfo) -> list[int]:
    """The ranks of ``shard``'s session whose shard manifest of (``step``, ``tier``) exists."""
    present = {i.key for i in store.list(shard_dir(step, tier, shard.session))}
    return [r for r in range(shard.world) if shard_key(step, tier, shard.session, r) in present]


def commit_global(
    store: ObjectStore,
    own: Manifest,
    shard: ShardInfo,
    abandoned: threading.Event | None = None,
    *,
    extra: dict[str, Any] | None = None,
    commit_by: float | None = None,
) -> Manifest:
    """Phase 2 (rank 0's worker): wait for every shard, then write the one global manifest.
    ``extra``: more top-level keys of the global manifest's tree, beside ``sharded`` (plain
    JSON, no arrays: the DCP adapter's metadata). ``commit_by``: a notice's deadline
    (time.time()); past it nothing is committed (:func:`check_commit_by`)."""
    return commit_shards(
        store, own.step, own.tier, shard, abandoned, extra=extra, commit_by=commit_by
    )


def commit_shards(
    store: ObjectStore,
    step: int,
    tier: str,
    shard: ShardInfo,
    abandoned: threading.Event | None = None,
    *,
    extra: dict[str, Any] | None = None,
    commit_by: float | None = None,
) -> Manifest:
    """Phase 2 for (``step``, ``tier``) of ``shard``'s session, by whoever commits it: rank
    0's worker (``commit_global``), or a surviving rank once rank 0 is lost
    (``burst.train.survivors``). Every shard is waited for (at most
    ``shard.commit_timeout_s``) and checked; only then is the one global manifest written.
    Two committers of the same shards write the same checkpoint: either manifest is whole."""
    try:
        shards = _wait_for_shards(store, step, tier, shard, abandoned, commit_by)
    except _Committed as done:
        log.info("sharded checkpoint step %d (%s) was committed by another rank", step, tier)
        _drop_late_shards(store, step, tier, shard)
        return done.manifest
    manifest = merge(shards)
    manifest.stats["session"] = shard.session
    if extra:
        manifest.tree = {**extra, **manifest.tree}
    faults.checkpoint("before-global")
    check_commit_by(commit_by, manifest.step, manifest.tier, f"{store.url}/{manifest.key}")
    store.put_bytes(manifest_key(manifest.step, manifest.tier), manifest.to_bytes())  # commit
    faults.checkpoint("after-global")
    latest = {"step": manifest.step, "tier": manifest.tier, "manifest": manifest.key}
    store.put_bytes(LATEST_KEY, json.dumps(latest).encode())
    pending = [str((m.stats.get("shard") or {}).get("pending") or "") for m in shards]
    store.delete([p for p in pending if p])
    store.delete(shard_key(step, tier, shard.session, r) for r in range(shard.world))
    log.info(
        "sharded checkpoint step %d (%s) committed: %d ranks, %d bytes",
        manifest.step,
        manifest.tier,
        shard.world,
        manifest.total_bytes,
    )
    return manifest


# -- replicated state, written once ---------------------------------------------------------


def _nbytes(a: Any) -> int:
    n = getattr(a, "nbytes", None)
    if isinstance(n, int):
        return n
    return int(a.numel() * a.element_size())


def assignment(sizes: list[int], world: int) -> list[int]:
    """Which rank writes each array: largest first to the least loaded rank (deterministic)."""
    load = [0] * world
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        r = min(range(world), key=lambda r: (load[r], r))
        owner[i] = r
        load[r] += sizes[i]
    return owner


def partition(state: Any, rank: int, world: int) -> dict[str, Any]:
    """This rank's part of a state every rank holds identically (written once in all)."""
    skel, arrays = flatten(state)
    owner = assignment([_nbytes(a) for a in arrays], world)
    mine = [i for i, o in enumerate(owner) if o == rank]
    return {
        "shard": {
            "rank": rank,
            "world": world,
            "skeleton": skel if rank == 0 else None,
            "index": mine,
            "arrays": [arrays[i] for i in mine],
        }
    }


def is_sharded(state: Any) -> bool:
    return isinstance(state, dict) and set(state) == {"sharded"}


def assemble(state: Any) -> Any:
    """The whole state from a restored global checkpoint (any world size); a state saved by
    one rank is returned as it is."""
    if not is_sharded(state):
        return state
    parts = [s["shard"] for s in state["sharded"]["shards"]]
    skel = next((p["skeleton"] for p in parts if p.get("skeleton") is not None), None)
    if skel is None:
        raise CheckpointError("sharded checkpoint has no skeleton (rank 0's shard is missing)")
    count = sum(len(p["index"]) for p in parts)
    arrays: list[Any] = [None] * count
    for p in parts:
        for i, a in zip(p["index"], p["arrays"], strict=True):
            arrays[int(i)] = a
    if any(a is None for a in arrays):
        raise CheckpointError("sharded checkpoint is missing arrays")
    return unflatten(skel, arrays)


def whole_paths(manifest: Manifest) -> list[str]:
    """The path of each of ``manifest``'s arrays in the whole state (``assemble``'s result:
    ``.model.fc.weight``), for restoring into an existing state; a sharded checkpoint's arrays
    are found through the skeleton and indices of its shards."""
    tree = manifest.tree
    if not is_sharded(tree):
        return array_paths(tree)
    count = len(manifest.arrays)
    decoded = unflatten(tree, list(range(count)))  # array i -> its index i
    parts = [s["shard"] for s in decoded["sharded"]["shards"]]
    skel = next((p["skeleton"] for p in parts if p.get("skeleton") is not None), None)
    if skel is None:
        raise CheckpointError("sharded checkpoint has no skeleton (rank 0's shard is missing)")
    paths = array_paths(skel)
    out = [""] * count
    for p in parts:
        for whole, mine in zip(p["index"], p["arrays"], strict=True):
            out[int(mine)] = paths[int(whole)]
    return out


def expire_manifests(
    store: ObjectStore, *, keep_full: int | None, keep_weights: int | None
) -> list[str]:
    """Retention without chunk deletion (a sharded run's: see the worker)."""
    from burst.checkpoint.catalog import list_checkpoints, read_latest
    from burst.checkpoint.retention import newest_verified, select_expired

    refs = list_checkpoints(store)
    protect = [read_latest(store), newest_verified(store, refs)]
    expired = select_expired(refs, keep_full, keep_weights, protect=protect)
    store.delete(r.key for r in expired)
    return [r.key for r in expired]
