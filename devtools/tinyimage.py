"""Build a tiny, reproducible OCI image (one uncompressed tar layer) straight into a store.

Used by the tests (to push real images to a real registry) and by
``images/build_quickstart_layout.py`` (the demo image committed as an OCI layout). Same inputs,
same bytes, same digest: tar entries have fixed owners, modes and times.
"""

from __future__ import annotations

import io
import json
import tarfile
from typing import Any

from burst.supplychain.store import (
    OCI_CONFIG,
    OCI_LAYER_TAR,
    OCI_MANIFEST,
    ImageStore,
    sha256_digest,
)


def tar_layer(files: dict[str, bytes]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name in sorted(files):
            info = tarfile.TarInfo(name)
            info.size = len(files[name])
            info.mode = 0o444
            info.mtime = 0
            info.uid = info.gid = 0
            info.uname = info.gname = "root"
            tar.addfile(info, io.BytesIO(files[name]))
    return buf.getvalue()


def image_config(layer: bytes, labels: dict[str, str], user: str = "65532") -> bytes:
    doc: dict[str, Any] = {
        "architecture": "amd64",
        "os": "linux",
        "created": "1970-01-01T00:00:00Z",
        "config": {"User": user, "Labels": dict(sorted(labels.items()))},
        "rootfs": {"type": "layers", "diff_ids": [sha256_digest(layer)]},
        "history": [{"created": "1970-01-01T00:00:00Z", "created_by": "burst tinyimage"}],
    }
    return json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()


def push_tiny_image(
    store: ImageStore,
    files: dict[str, bytes],
    labels: dict[str, str] | None = None,
    tag: str | None = None,
) -> str:
    """Push config, layer and manifest; return the manifest digest (what a reference pins)."""
    layer = tar_layer(files)
    config = image_config(layer, labels or {})
    store.put_blob(layer)
    store.put_blob(config)
    manifest = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
        "layers": [
            {"mediaType": OCI_LAYER_TAR, "size": len(layer), "digest": sha256_digest(layer)}
        ],
    }
    data = json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode()
    return store.put_manifest(data, OCI_MANIFEST, tag)
