"""Find committed checkpoints in a store and read their manifests."""

from __future__ import annotations

import json
import logging

from burst.checkpoint.manifest import (
    LATEST_KEY,
    MANIFEST_RE,
    CheckpointRef,
    Manifest,
    parse_manifest_key,
)
from burst.errors import CheckpointError
from burst.storage.base import ObjectMissing, ObjectStore

log = logging.getLogger(__name__)


def list_checkpoints(store: ObjectStore, tier: str | None = None) -> list[CheckpointRef]:
    """Committed checkpoints, oldest first (a manifest exists for each)."""
    refs = []
    for info in store.list("manifests/"):
        ref = parse_manifest_key(info.key)
        if ref is not None and (tier is None or ref.tier == tier):
            refs.append(ref)
    return sorted(refs, key=lambda r: (r.step, r.tier == "full"))


def read_latest(store: ObjectStore) -> CheckpointRef | None:
    """What ``latest.json`` points at, if it names a manifest that exists."""
    try:
        doc = json.loads(store.get_bytes(LATEST_KEY))
        key = str(doc["manifest"])
    except ObjectMissing:
        return None
    except (ValueError, KeyError, TypeError):
        log.warning("%s/%s is not valid; ignoring it", store.url, LATEST_KEY)
        return None
    if not MANIFEST_RE.match(key) or not store.exists(key):
        return None
    return parse_manifest_key(key)


def latest_checkpoint(store: ObjectStore, tier: str | None = None) -> CheckpointRef | None:
    """The newest committed checkpoint (of ``tier`` if given)."""
    refs = list_checkpoints(store, tier)
    return refs[-1] if refs else None


def load_manifest(store: ObjectStore, ref: CheckpointRef) -> Manifest:
    where = f"{store.url}/{ref.key}"
    try:
        data = store.get_bytes(ref.key)
    except ObjectMissing as exc:
        raise CheckpointError(
            f"checkpoint step {ref.step} ({ref.tier}) has no manifest", where=where
        ) from exc
    manifest = Manifest.from_bytes(data, where)
    if (manifest.step, manifest.tier) != (ref.step, ref.tier):
        raise CheckpointError(
            f"manifest says step {manifest.step} ({manifest.tier}), its name says "
            f"step {ref.step} ({ref.tier})",
            where=where,
        )
    return manifest
