"""Asynchronous, atomic, incremental checkpoints to object storage, with fast restore.

See docs/checkpoints.md. Saving: ``staging`` (the reused host buffer), ``attached`` (the
worker's view of it), ``tree`` (state -> JSON skeleton + arrays), ``layout`` (arrays ->
chunks), ``writer`` (hash, delta, upload, commit), ``worker`` (the background process),
``manifest`` (the commit: the one object whose existence makes a checkpoint exist),
``sharded`` and ``dtensor_parts`` (every rank's own shard, one global manifest), ``manager``
(the API the train loop uses). Restoring: ``read_plan`` (the one restore loop, newest first,
falling back), with its read plans ``restore`` (one rank, whole), ``split_restore`` (W ranks
share the work), ``own_restore`` (each rank its own shard) and ``deepspeed`` (DeepSpeed's
files); ``catalog`` finds committed checkpoints. Keeping: ``verify`` (and quarantine),
``retention`` and GC, ``replication`` to a second store; ``state`` (torch objects <-> state);
``marker`` (``commit``: a program marks its own save complete).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from burst.checkpoint.catalog import latest_checkpoint, list_checkpoints, load_manifest
    from burst.checkpoint.manager import CheckpointManager, CheckpointStatus, SaveResult
    from burst.checkpoint.manifest import CheckpointRef, Manifest
    from burst.checkpoint.marker import commit
    from burst.checkpoint.replication import ReplicationResult, replicate
    from burst.checkpoint.restore import Restored, restore_checkpoint
    from burst.checkpoint.retention import GcResult, apply_retention, collect_garbage
    from burst.checkpoint.state import apply_state, capture_state
    from burst.errors import CheckpointError
    from burst.storage import open_store

# Each name is imported from its module on first use (PEP 562), not with the package: the
# checkpoint worker, a process of its own for every manager, imports burst.checkpoint.worker
# and would otherwise load the manager, restore and numpy it never uses (0.29 -> 0.10
# CPU-seconds a worker start).
_HOME = {
    "latest_checkpoint": "burst.checkpoint.catalog",
    "list_checkpoints": "burst.checkpoint.catalog",
    "load_manifest": "burst.checkpoint.catalog",
    "CheckpointManager": "burst.checkpoint.manager",
    "CheckpointStatus": "burst.checkpoint.manager",
    "SaveResult": "burst.checkpoint.manager",
    "CheckpointRef": "burst.checkpoint.manifest",
    "Manifest": "burst.checkpoint.manifest",
    "ReplicationResult": "burst.checkpoint.replication",
    "replicate": "burst.checkpoint.replication",
    "Restored": "burst.checkpoint.restore",
    "restore_checkpoint": "burst.checkpoint.restore",
    "GcResult": "burst.checkpoint.retention",
    "apply_retention": "burst.checkpoint.retention",
    "collect_garbage": "burst.checkpoint.retention",
    "apply_state": "burst.checkpoint.state",
    "capture_state": "burst.checkpoint.state",
    "CheckpointError": "burst.errors",
    "commit": "burst.checkpoint.marker",
    "open_store": "burst.storage",
}


def __getattr__(name: str) -> Any:
    home = _HOME.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value
    return value


__all__ = [
    "CheckpointError",
    "CheckpointManager",
    "CheckpointRef",
    "CheckpointStatus",
    "GcResult",
    "Manifest",
    "ReplicationResult",
    "Restored",
    "SaveResult",
    "apply_retention",
    "apply_state",
    "capture_state",
    "collect_garbage",
    "commit",
    "latest_checkpoint",
    "list_checkpoints",
    "load_manifest",
    "open_store",
    "replicate",
    "restore_checkpoint",
]
