"""Object stores for checkpoints: a local directory and S3 (any S3-compatible endpoint).

open_store("file:///data/ckpt/run-1")       # or a plain path
open_store("s3://bucket/runs/run-1")        # endpoint from AWS_ENDPOINT_URL(_S3) if set
open_store("s3://bucket/p?endpoint=http://127.0.0.1:9000&region=eu-west-1&sse=aws:kms")
"""

from __future__ import annotations

import os
from typing import Any
from urllib.parse import parse_qs, unquote, urlparse

from burst.errors import BadInputError
from burst.storage.base import ObjectInfo, ObjectMissing, ObjectStore, StoreError
from burst.storage.local import LocalStore
from burst.storage.s3 import S3Store

__all__ = [
    "LocalStore",
    "ObjectInfo",
    "ObjectMissing",
    "ObjectStore",
    "S3Store",
    "StoreError",
    "open_store",
    "store_from_spec",
]

S3_QUERY_KEYS = {"endpoint", "region", "sse", "kms_key_id"}


def open_store(url: str, **options: Any) -> ObjectStore:
    """Open a store from a URL; keyword options override what the URL says."""
    parsed = urlparse(url)
    if parsed.scheme in ("", "file"):
        path = unquote(parsed.path) if parsed.scheme == "file" else url
        if parsed.scheme == "file" and parsed.netloc not in ("", "localhost"):
            path = parsed.netloc + path  # file://relative/dir
        if not path:
            raise BadInputError(f"store URL {url!r} names no directory")
        return LocalStore(path, **options)
    if parsed.scheme == "s3":
        query = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        unknown = set(query) - S3_QUERY_KEYS
        if unknown:
            raise BadInputError(
                f"store URL {url!r}: unknown option(s) {sorted(unknown)}; "
                f"known: {sorted(S3_QUERY_KEYS)}"
            )
        kwargs: dict[str, Any] = {
            "endpoint_url": query.get("endpoint")
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL"),
            "region": query.get("region")
            or os.environ.get("AWS_REGION")
            or os.environ.get("AWS_DEFAULT_REGION")
            or "us-east-1",
            "sse": query.get("sse"),
            "kms_key_id": query.get("kms_key_id"),
        }
        kwargs.update(options)
        return S3Store(parsed.netloc, parsed.path.strip("/"), **kwargs)
    raise BadInputError(f"store URL {url!r}: scheme must be file:// or s3://")


def store_from_spec(spec: dict[str, Any]) -> ObjectStore:
    """Rebuild a store from ``ObjectStore.spec()`` (used by the background checkpoint worker)."""
    opts = dict(spec)
    kind = opts.pop("kind", None)
    if kind == "file":
        return LocalStore(opts.pop("root"), **opts)
    if kind == "s3":
        return S3Store(opts.pop("bucket"), opts.pop("prefix", ""), **opts)
    raise BadInputError(f"unknown store kind {kind!r}")
