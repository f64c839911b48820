"""Asynchronous, atomic, incremental checkpoints to object storage, with fast restore.

See docs/checkpoints.md. The pieces, each in its own module:
staging (shared host buffer), layout (arrays -> chunks), tree (state -> JSON skeleton +
arrays), manifest (the commit), writer (hash, delta, upload, commit; runs in worker),
worker (the background process), manager (the API), restore, catalog, retention,
replication, state (torch helpers), deepspeed (engine adapter), faults (crash tests).
"""

from __future__ import annotations

from burst.checkpoint.catalog import latest_checkpoint, list_checkpoints, load_manifest
from burst.checkpoint.manager import CheckpointManager, CheckpointStatus, SaveResult
from burst.checkpoint.manifest import CheckpointRef, Manifest
from burst.checkpoint.replication import ReplicationResult, replicate
from burst.checkpoint.restore import Restored, restore_checkpoint
from burst.checkpoint.retention import GcResult, apply_retention, collect_garbage
from burst.checkpoint.state import apply_state, capture_state
from burst.errors import CheckpointError
from burst.program.marker import commit
from burst.storage import open_store

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
