"""Retention (keep the last K full and L weights-only checkpoints) and chunk GC.

GC is mark and sweep: every chunk referenced by a manifest or by a pending record (a save in
flight) is live. A sweep deletes unreferenced chunks only if they are older than ``grace``
seconds, so a save running in another process, whose new chunks are not referenced by
anything yet, keeps them. Inside a CheckpointManager, retention and GC run in the same worker
that writes checkpoints, between saves, with no race at all.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Collection
from dataclasses import dataclass, field

from burst.checkpoint.catalog import list_checkpoints, load_manifest, read_latest
from burst.checkpoint.manifest import CHUNK_PREFIX, PENDING_PREFIX, CheckpointRef
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)

PENDING_STALE_SECONDS = 24 * 3600


@dataclass
class GcResult:
    deleted_manifests: list[str] = field(default_factory=list)
    deleted_chunks: set[str] = field(default_factory=set)
    kept_chunks: int = 0


def select_expired(
    refs: list[CheckpointRef],
    keep_full: int | None,
    keep_weights: int | None,
    protect: CheckpointRef | Collection[CheckpointRef | None] | None = None,
) -> list[CheckpointRef]:
    """Checkpoints beyond the newest ``keep_full`` full / ``keep_weights`` weights-only ones,
    except those in ``protect``."""
    kept = {protect} if isinstance(protect, CheckpointRef) else set(protect or ())
    expired: list[CheckpointRef] = []
    for tier, keep in (("full", keep_full), ("weights", keep_weights)):
        if keep is None:
            continue
        if keep < 1:
            raise CheckpointError(f"keep_{tier} must be at least 1, not {keep}")
        mine = [r for r in refs if r.tier == tier]
        expired += [r for r in mine[: max(0, len(mine) - keep)] if r not in kept]
    return expired


def newest_verified(store: ObjectStore, refs: list[CheckpointRef]) -> CheckpointRef | None:
    """The newest checkpoint committed by a writer that verified every chunk it references."""
    for ref in reversed(refs):
        try:
            if load_manifest(store, ref).stats.get("verified") is True:
                return ref
        except CheckpointError:
            continue
    return None


def collect_garbage(
    store: ObjectStore, *, grace: float = 3600.0, now: float | None = None
) -> GcResult:
    """Delete chunks no manifest and no recent pending record references."""
    result = GcResult()
    now = time.time() if now is None else now
    # List chunks first: a chunk written after this listing is not a candidate at all.
    chunks = {i.key[len(CHUNK_PREFIX) :]: i for i in store.list(CHUNK_PREFIX)}
    live: set[str] = set()
    for info in store.list(PENDING_PREFIX):
        if now - info.mtime > PENDING_STALE_SECONDS:
            store.delete([info.key])
            continue
        try:
            live.update(json.loads(store.get_bytes(info.key))["chunks"])
        except ObjectMissing:
            continue  # the save finished meanwhile: its manifest is read below
        except (ValueError, KeyError, TypeError):
            log.warning("ignoring unreadable pending record %s/%s", store.url, info.key)
    for ref in list_checkpoints(store):
        try:
            manifest = load_manifest(store, ref)
        except CheckpointError as exc:
            # An unreadable manifest still protects nothing we could know; keep everything.
            raise CheckpointError(f"GC stopped, cannot read a manifest: {exc.one_line()}") from exc
        live.update(c.digest for c in manifest.chunks)
    doomed = {d for d, info in chunks.items() if d not in live and now - info.mtime >= grace}
    store.delete(CHUNK_PREFIX + d for d in sorted(doomed))
    result.deleted_chunks = doomed
    result.kept_chunks = len(chunks) - len(doomed)
    if doomed:
        log.info("GC removed %d unreferenced chunks from %s", len(doomed), store.url)
    return result


def apply_retention(
    store: ObjectStore, *, keep_full: int | None, keep_weights: int | None, grace: float = 3600.0
) -> GcResult:
    """Delete expired manifests, then GC chunks. Never deleted: the checkpoint ``latest.json``
    names, and the newest one whose writer verified every chunk (``stats.verified``)."""
    refs = list_checkpoints(store)
    protect = [read_latest(store), newest_verified(store, refs)]
    expired = select_expired(refs, keep_full, keep_weights, protect=protect)
    store.delete(r.key for r in expired)  # the checkpoint stops existing here
    result = collect_garbage(store, grace=grace)
    result.deleted_manifests = [r.key for r in expired]
    return result
