"""An OCI image layout directory as an ``ImageStore`` (read and write).

Layout (OCI image-spec ``image-layout.md``): ``oci-layout``, ``index.json``, and
``blobs/sha256/<hex>``. Tags are ``org.opencontainers.image.ref.name`` annotations in
``index.json``; cosign signatures are stored as in a registry, under the tag
``sha256-<hex>.sig`` (also annotated ``kind: dev.cosignproject.cosign/sigs``). The repository
the image was signed as is the index annotation ``dev.burst.repository``: it is what the
signature payload must name and what the trust policy matches.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from burst.supplychain.store import (
    MANIFEST_TYPES,
    OCI_INDEX,
    Fetched,
    StoreUnavailable,
    sha256_digest,
)

REF_NAME = "org.opencontainers.image.ref.name"
REPOSITORY_ANNOTATION = "dev.burst.repository"
KIND = "kind"
KIND_IMAGE = "dev.cosignproject.cosign/image"
KIND_SIGS = "dev.cosignproject.cosign/sigs"


class LayoutStore:
    """One OCI image layout directory."""

    kind = "oci-layout"

    def __init__(self, directory: str | Path, *, create: bool = False) -> None:
        self.dir = Path(directory)
        self.location = str(directory)
        if create:
            (self.dir / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
            marker = self.dir / "oci-layout"
            if not marker.exists():
                _write(marker, json.dumps({"imageLayoutVersion": "1.0.0"}).encode())
            if not (self.dir / "index.json").exists():
                self._save_index({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": []})
        if not (self.dir / "oci-layout").is_file() or not (self.dir / "index.json").is_file():
            raise StoreUnavailable(
                f"OCI layout {self.location} not found (needs oci-layout and index.json)"
            )

    # -- index --------------------------------------------------------------------------------

    def index(self) -> dict[str, Any]:
        try:
            doc = json.loads((self.dir / "index.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise StoreUnavailable(
                f"OCI layout {self.location}: unreadable index.json: {exc}"
            ) from None
        if not isinstance(doc, dict) or not isinstance(doc.get("manifests"), list):
            raise StoreUnavailable(f"OCI layout {self.location}: index.json has no manifests")
        return doc

    def _save_index(self, doc: dict[str, Any]) -> None:
        _write(self.dir / "index.json", json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n")

    @property
    def repository(self) -> str | None:
        ann = self.index().get("annotations") or {}
        value = ann.get(REPOSITORY_ANNOTATION)
        return value if isinstance(value, str) and value else None

    def set_repository(self, repository: str) -> None:
        doc = self.index()
        doc.setdefault("annotations", {})[REPOSITORY_ANNOTATION] = repository
        self._save_index(doc)

    # -- ImageStore ---------------------------------------------------------------------------

    def _blob_path(self, digest: str) -> Path:
        algo, _, hexpart = digest.partition(":")
        if (
            algo != "sha256"
            or len(hexpart) != 64
            or not all(c in "0123456789abcdef" for c in hexpart)
        ):
            raise StoreUnavailable(f"OCI layout {self.location}: bad digest {digest!r}")
        return self.dir / "blobs" / "sha256" / hexpart

    def get_blob(self, digest: str) -> bytes | None:
        path = self._blob_path(digest)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreUnavailable(
                f"OCI layout {self.location}: cannot read {path}: {exc}"
            ) from None

    def get_manifest(self, reference: str) -> Fetched | None:
        entries = self.index()["manifests"]
        if reference.startswith("sha256:"):
            digest = reference
            entry = next((m for m in entries if m.get("digest") == digest), None)
        else:
            entry = next(
                (m for m in entries if (m.get("annotations") or {}).get(REF_NAME) == reference),
                None,
            )
            if entry is None:
                return None
            digest = str(entry.get("digest"))
        data = self.get_blob(digest)
        if data is None:
            return None
        media_type = str((entry or {}).get("mediaType") or "")
        if media_type not in MANIFEST_TYPES:
            try:
                media_type = str(json.loads(data).get("mediaType") or "")
            except (ValueError, AttributeError):
                media_type = ""
        return Fetched(data, media_type, sha256_digest(data))

    def put_blob(self, data: bytes) -> str:
        digest = sha256_digest(data)
        path = self._blob_path(digest)
        if not path.exists():
            _write(path, data)
        return digest

    def put_manifest(self, data: bytes, media_type: str, tag: str | None) -> str:
        digest = self.put_blob(data)
        doc = self.index()
        entries = [
            m
            for m in doc["manifests"]
            if not (tag and (m.get("annotations") or {}).get(REF_NAME) == tag)
        ]
        annotations: dict[str, str] = {}
        if tag:
            annotations[REF_NAME] = tag
            annotations[KIND] = KIND_SIGS if tag.endswith(".sig") else KIND_IMAGE
        elif any(m.get("digest") == digest for m in entries):
            return digest
        entry: dict[str, Any] = {"mediaType": media_type, "digest": digest, "size": len(data)}
        if annotations:
            entry["annotations"] = annotations
        entries.append(entry)
        doc["manifests"] = entries
        self._save_index(doc)
        return digest

    def referrers(self, digest: str) -> list[dict[str, Any]] | None:
        return None  # signatures in a layout are found by their sha256-<hex>.sig tag


def _write(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o644)  # layouts are shared and committed: readable like any file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
