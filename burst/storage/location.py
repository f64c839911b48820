"""Where a run's checkpoints live: a store URI (the spec's ``storage.checkpoint_uri`` or
``replica_uri``) with ``/<run-id>`` appended. It takes a URI, never a whole spec.

Torch-free, so steps that never train (teardown, in the slim steps image) can find the store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse, urlunparse

from burst.errors import BadInputError


def run_url(uri: str, run_id: str) -> str:
    """``uri`` (file:// or s3://) with ``/<run-id>`` appended. A relative file:// path is
    relative to the working directory (where ``burst run`` runs), as every relative path in
    a spec is."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        raw = parsed.netloc + parsed.path if parsed.netloc not in ("", "localhost") else parsed.path
        return f"file://{(Path(raw).resolve() / run_id)}"
    if parsed.scheme == "s3":
        if not parsed.netloc:
            raise BadInputError(f"storage.checkpoint_uri {uri!r}: names no bucket")
        path = "/".join(p for p in (parsed.path.strip("/"), run_id) if p)
        return urlunparse(parsed._replace(path="/" + path))
    raise BadInputError(f"storage.checkpoint_uri {uri!r}: must be file:// or s3://")


def exchange_url(checkpoint_uri: str, workflow: str) -> str:
    """A regional-sync run's exchange store: ``checkpoint_uri`` under ``<workflow>/exchange``
    (every region's worker and the aggregator write it; each region's stack grants its pods
    this prefix: terraform/modules/aws-run-iam)."""
    return run_url(checkpoint_uri, workflow) + "/exchange"
