"""What verification and signing need from where images live: a registry or an OCI layout.

Both ``RegistryStore`` (OCI distribution API over HTTP) and ``LayoutStore`` (an OCI image
layout directory) implement ``ImageStore``, so one code path verifies both.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Protocol

from burst.errors import InfraError

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER_TAR = "application/vnd.oci.image.layer.v1.tar"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
MANIFEST_TYPES = (OCI_MANIFEST, OCI_INDEX, DOCKER_MANIFEST, DOCKER_LIST)
INDEX_TYPES = (OCI_INDEX, DOCKER_LIST)


class StoreUnavailable(InfraError):
    """The registry (or layout directory) could not be reached or read."""


def sha256_digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Fetched:
    """A manifest as stored: its exact bytes (what the digest covers) and media type."""

    data: bytes
    media_type: str
    digest: str  # sha256 of ``data``, computed here, never taken from the server


class ImageStore(Protocol):
    """Read and write manifests and blobs of one repository."""

    #: human-readable location for messages (registry URL or layout directory)
    location: str
    #: "registry" or "oci-layout"
    kind: str

    def get_manifest(self, reference: str) -> Fetched | None:
        """A manifest by digest or tag; None when the store does not have it."""
        ...

    def get_blob(self, digest: str) -> bytes | None:
        """A blob's bytes; None when the store does not have it."""
        ...

    def put_blob(self, data: bytes) -> str:
        """Store a blob (idempotent); return its digest."""
        ...

    def put_manifest(self, data: bytes, media_type: str, tag: str | None) -> str:
        """Store a manifest under its digest, and under ``tag`` if given; return the digest."""
        ...

    def referrers(self, digest: str) -> list[dict[str, Any]] | None:
        """OCI 1.1 referrers of ``digest`` (descriptors); None when the store lacks the API."""
        ...
