"""Verify that an image is pinned by digest and signed by a key trusted for its repository.

Every way to fail is a ``PolicyRefusal`` (exit 3) with its own message, and anything that
cannot be established (registry down, blob missing, manifest unreadable) refuses too: the
verifier fails closed. Order of checks:

1. the reference is pinned by digest (``parse_reference``);
2. the trust policy lets the spec's key sign the repository (``TrustPolicy.key_for``);
3. the image manifest exists and its bytes hash to the pinned digest;
4. cosign signatures for the digest are found: the OCI 1.1 referrers API where the registry has
   it, and the ``sha256-<hex>.sig`` tag;
5. one simple-signing layer (a) hashes to its descriptor's digest, (b) carries an ECDSA P-256
   signature that verifies with the trusted key, (c) names the same digest and repository.
"""

from __future__ import annotations

import dataclasses
import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import PolicyRefusal
from burst.supplychain.layout import LayoutStore
from burst.supplychain.reference import ImageRef, normalise_repository, parse_reference
from burst.supplychain.registry import RegistryStore
from burst.supplychain.signature import (
    COSIGN_ARTIFACT_SIG,
    COSIGN_TYPE,
    SIGNATURE_ANNOTATION,
    SIMPLE_SIGNING,
    parse_payload,
    signature_bytes,
    verifies,
)
from burst.supplychain.store import (
    INDEX_TYPES,
    Fetched,
    ImageStore,
    StoreUnavailable,
    sha256_digest,
)
from burst.supplychain.trust import TrustedKey, TrustPolicy, TrustRule

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verified:
    """What verification established (the verify-image document is built from it)."""

    ref: ImageRef
    key: TrustedKey
    rule: TrustRule
    pattern: str
    store_kind: str
    location: str
    signature_source: str  # "referrers" or "tag"
    signature_manifest: str
    manifest: Fetched
    labels: dict[str, str]


def resolve_layout_dir(directory: str, search: tuple[Path, ...]) -> Path:
    """An OCI layout path: absolute, else the first of ``search`` (default: the working
    directory, the base of every relative path in a spec) under which it exists."""
    path = Path(directory)
    if path.is_absolute():
        return path
    for base in search:
        candidate = base / path
        if (candidate / "index.json").is_file():
            return candidate
    return (search[0] if search else Path.cwd()) / path


def open_store(ref: ImageRef, search: tuple[Path, ...] = ()) -> tuple[ImageRef, ImageStore]:
    """The store holding ``ref``; for a layout, ``ref.repository`` becomes the layout's."""
    if ref.layout_dir is not None:
        directory = resolve_layout_dir(ref.layout_dir, search or (Path.cwd(),))
        layout = LayoutStore(directory)
        repository = layout.repository
        if not repository:
            raise PolicyRefusal(
                f"OCI layout {directory} does not declare the repository it was signed as "
                "(index.json annotation dev.burst.repository)"
            )
        return dataclasses.replace(ref, repository=normalise_repository(repository)), layout
    if ref.registry is None or ref.path is None:
        raise PolicyRefusal(f"image reference {ref.original!r} names no registry repository")
    return ref, RegistryStore(ref.registry, ref.path)


def verify_image(
    reference: str,
    key_name: str,
    trust: TrustPolicy,
    *,
    search: tuple[Path, ...] = (),
    store: ImageStore | None = None,
) -> Verified:
    """Verify ``reference`` against ``key_name`` under ``trust``; PolicyRefusal on any doubt."""
    ref = parse_reference(reference)
    try:
        if store is None:
            ref, store = open_store(ref, search)
        key, rule, pattern = trust.key_for(ref.repository, key_name)
        return _verify(ref, store, key, rule, pattern, trust)
    except StoreUnavailable as exc:
        raise PolicyRefusal(
            f"cannot verify image {ref.original}: {exc.message}; refusing (fail closed)"
        ) from None


def _verify(
    ref: ImageRef,
    store: ImageStore,
    key: TrustedKey,
    rule: TrustRule,
    pattern: str,
    trust: TrustPolicy,
) -> Verified:
    image = ref.pinned()
    manifest = store.get_manifest(ref.digest)
    if manifest is None:
        raise PolicyRefusal(f"image {image} not found in {store.location}")
    if manifest.digest != ref.digest:
        raise PolicyRefusal(
            f"image {image}: {store.location} returned a manifest whose digest is "
            f"{manifest.digest}, not the pinned one"
        )
    candidates, looked = _signature_manifests(ref, store)
    if not candidates:
        raise PolicyRefusal(
            f"image {image} is unsigned: no cosign signature for {ref.digest} "
            f"(looked at {'; '.join(looked)})"
        )
    reasons: list[str] = []
    for source, sig in candidates:
        for layer in _signature_layers(sig):
            reason = _check_layer(ref, store, key, trust, layer)
            if reason is None:
                log.info("image %s verified with key %s (%s)", image, key.name, source)
                return Verified(
                    ref=ref,
                    key=key,
                    rule=rule,
                    pattern=pattern,
                    store_kind=store.kind,
                    location=store.location,
                    signature_source=source,
                    signature_manifest=sig.digest,
                    manifest=manifest,
                    labels=image_labels(store, manifest, image),
                )
            if reason not in reasons:
                reasons.append(reason)
    if not reasons:
        reasons.append("its signature manifest holds no simple-signing layer")
    raise PolicyRefusal(f"image {image} refused: " + "; ".join(reasons))


def _signature_manifests(
    ref: ImageRef, store: ImageStore
) -> tuple[list[tuple[str, Fetched]], list[str]]:
    found: list[tuple[str, Fetched]] = []
    looked: list[str] = []
    referrers = store.referrers(ref.digest)
    if referrers is None:
        if store.kind == "registry":
            looked.append("referrers API: not offered by this registry")
    else:
        sigs = [d for d in referrers if d.get("artifactType") == COSIGN_ARTIFACT_SIG]
        looked.append(f"referrers API: {len(sigs)} cosign signature(s)")
        for desc in sigs:
            fetched = store.get_manifest(str(desc.get("digest")))
            if fetched is not None and fetched.digest == desc.get("digest"):
                found.append(("referrers", fetched))
    tagged = store.get_manifest(ref.signature_tag)
    looked.append(f"tag {ref.signature_tag}: {'found' if tagged else 'absent'}")
    if tagged is not None:
        found.append(("tag", tagged))
    return found, looked


def _signature_layers(sig: Fetched) -> list[dict[str, Any]]:
    try:
        doc = json.loads(sig.data)
    except ValueError:
        return []
    layers = doc.get("layers") if isinstance(doc, dict) else None
    if not isinstance(layers, list):
        return []
    return [x for x in layers if isinstance(x, dict) and x.get("mediaType") == SIMPLE_SIGNING]


def _check_layer(
    ref: ImageRef,
    store: ImageStore,
    key: TrustedKey,
    trust: TrustPolicy,
    layer: dict[str, Any],
) -> str | None:
    """None when this layer proves the image; otherwise why it does not."""
    digest = str(layer.get("digest", ""))
    payload = store.get_blob(digest) if digest.startswith("sha256:") else None
    if payload is None:
        return f"signature payload {digest or '(no digest)'} is missing from the store"
    if sha256_digest(payload) != digest:
        return (
            "a signature payload was tampered with: its bytes do not hash to the digest "
            f"{digest} it is stored under"
        )
    annotations = layer.get("annotations") or {}
    b64 = annotations.get(SIGNATURE_ANNOTATION) if isinstance(annotations, dict) else None
    if not isinstance(b64, str) or not b64:
        return f"a signature layer has no {SIGNATURE_ANNOTATION} annotation"
    sig = signature_bytes(b64)
    if sig is None:
        return "a signature annotation is not valid base64 (tampered)"
    if not verifies(key.key, payload, sig):
        other = next(
            (
                k.name
                for k in trust.keys.values()
                if k.name != key.name and verifies(k.key, payload, sig)
            ),
            None,
        )
        if other is not None:
            return (
                f"it is signed with key {other!r}, but the spec requires key {key.name!r} "
                "(wrong key)"
            )
        return (
            f"a signature does not verify with key {key.name!r} ({key.fingerprint[:19]}...): "
            "the payload or signature was tampered with, or it was made with an untrusted key"
        )
    claims = parse_payload(payload)
    if claims is None or claims.type != COSIGN_TYPE:
        return "a signed payload is not a cosign simple-signing payload"
    if claims.digest != ref.digest:
        return (
            f"a valid signature by {key.name!r} is for another image digest {claims.digest} "
            f"(not {ref.digest}): a signature copied from another image"
        )
    if normalise_repository(claims.repository) != ref.repository:
        return (
            f"a valid signature by {key.name!r} names repository {claims.repository}, "
            f"not {ref.repository} (wrong repository)"
        )
    return None


PLATFORM = {"os": "linux", "architecture": "amd64"}


def image_labels(store: ImageStore, manifest: Fetched, image: str) -> dict[str, str]:
    """The image config's labels (for an index: the linux/amd64 image's). Digests checked."""
    doc = _json(manifest.data, image, "manifest")
    if manifest.media_type in INDEX_TYPES or "manifests" in doc:
        entries = [m for m in doc.get("manifests") or [] if isinstance(m, dict)]
        chosen = next(
            (
                m
                for m in entries
                if all((m.get("platform") or {}).get(k) == v for k, v in PLATFORM.items())
            ),
            None,
        )
        if chosen is None:
            raise PolicyRefusal(f"image {image} is an index without a linux/amd64 image")
        child = store.get_manifest(str(chosen.get("digest")))
        if child is None or child.digest != chosen.get("digest"):
            raise PolicyRefusal(f"image {image}: its linux/amd64 manifest is missing or altered")
        doc = _json(child.data, image, "platform manifest")
    config_desc = doc.get("config") or {}
    config_digest = str(config_desc.get("digest", ""))
    config = store.get_blob(config_digest) if config_digest.startswith("sha256:") else None
    if config is None or sha256_digest(config) != config_digest:
        raise PolicyRefusal(f"image {image}: its config blob is missing or altered")
    labels = (_json(config, image, "config").get("config") or {}).get("Labels") or {}
    return {str(k): str(v) for k, v in labels.items()} if isinstance(labels, dict) else {}


def _json(data: bytes, image: str, what: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except ValueError:
        raise PolicyRefusal(f"image {image}: its {what} is not JSON") from None
    if not isinstance(doc, dict):
        raise PolicyRefusal(f"image {image}: its {what} is not a JSON object")
    return doc
