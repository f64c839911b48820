"""Where a run's checkpoints live: a store URI (the spec's ``storage.checkpoint_uri`` or
``replica_uri``) with ``/<run-id>`` appended. It takes a URI, never a whole spec.

Torch-free, so steps that never train (teardown, in the slim steps image) can find the store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse, urlunparse

from burst.errors import BadInputError


def store_url(uri: str, runs_root: Path | None = None) -> str:
    """``uri`` with a relative file:// path made absolute: it is relative to the runs root
    (``$BURST_RUNS_ROOT``, ``./runs`` by default; in a pod, the runs volume the template
    mounts), so a spec's ``file://checkpoints`` names the same directory on a laptop and in
    every pod. (Relative to the working directory it named the image's root-owned
    ``WORKDIR`` in a pod: Permission denied as the pod's user.) Anything else unchanged."""
    parsed = urlparse(uri)
    if parsed.scheme != "file":
        return uri
    raw = parsed.netloc + parsed.path if parsed.netloc not in ("", "localhost") else parsed.path
    if not raw.startswith("/"):
        from burst.settings import current

        raw = str((runs_root or current().runs_root).resolve() / raw)
    return f"file://{Path(raw).resolve()}"


def run_url(uri: str, run_id: str, runs_root: Path | None = None) -> str:
    """``uri`` (file:// or s3://) with ``/<run-id>`` appended; a relative file:// path is
    under the runs root (:func:`store_url`)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return f"{store_url(uri, runs_root)}/{run_id}"
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
