"""Where a run's checkpoints live: ``storage.checkpoint_uri`` with ``/<run-id>`` appended.

Torch-free, so steps that never train (teardown, in the slim steps image) can find the store.
"""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlparse, urlunparse

from burst.errors import BadInputError
from burst.spec import BurstJob


def run_store_url(job: BurstJob, run_id: str) -> str:
    """The run's checkpoint store URL. A relative file:// path is relative to the working
    directory (where ``burst run`` runs), as every relative path in a spec is."""
    return run_url(job.storage.checkpoint_uri, run_id)


def run_replica_url(job: BurstJob, run_id: str) -> str | None:
    """The run's prefix in the second store (``storage.replica_uri``), if there is one."""
    return run_url(job.storage.replica_uri, run_id) if job.storage.replica_uri else None


def run_url(uri: str, run_id: str) -> str:
    """``uri`` (file:// or s3://) with ``/<run-id>`` appended."""
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
