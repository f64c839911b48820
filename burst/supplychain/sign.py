"""Sign an image the way cosign does (key-based), into the store that holds it.

The signature manifest goes under the tag ``sha256-<hex>.sig`` of the image's repository; an
existing one gets the new layer appended (cosign keeps every signature), so images signed here
verify with ``cosign verify --key KEY.pub --insecure-ignore-tlog`` (no transparency log entry
is written: burst signs for development and air-gapped CI), and images signed by cosign verify
with ``burst image verify``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.errors import BadInputError, PolicyRefusal
from burst.supplychain.reference import parse_reference
from burst.supplychain.signature import (
    SIMPLE_SIGNING,
    fingerprint,
    load_private_key,
    make_payload,
    sign_payload,
    signature_config,
    signature_layer,
    signature_manifest,
)
from burst.supplychain.store import OCI_MANIFEST, ImageStore
from burst.supplychain.verify import open_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Signed:
    repository: str
    digest: str
    tag: str
    signature_manifest: str
    key_fingerprint: str
    layers: int


def sign_image(
    reference: str,
    key_path: Path,
    *,
    store: ImageStore | None = None,
    search: tuple[Path, ...] = (),
) -> Signed:
    """Sign ``reference`` (pinned by digest) with the PEM ECDSA P-256 key at ``key_path``."""
    try:
        ref = parse_reference(reference)
    except PolicyRefusal as exc:  # at the CLI edge a bad argument is bad input, not a refusal
        raise BadInputError(exc.message) from None
    key = load_private_key(key_path)
    if store is None:
        ref, store = open_store(ref, search)
    image = store.get_manifest(ref.digest)
    if image is None or image.digest != ref.digest:
        raise BadInputError(f"image {ref.pinned()} not found in {store.location}: nothing to sign")
    payload = make_payload(ref.repository, ref.digest)
    layer = signature_layer(payload, sign_payload(key, payload))
    layers = [*_existing_layers(store, ref.signature_tag), layer]
    store.put_blob(payload)
    config = signature_config([x["digest"] for x in layers])
    store.put_blob(config)
    digest = store.put_manifest(signature_manifest(layers, config), OCI_MANIFEST, ref.signature_tag)
    log.info("signed %s with %s -> %s", ref.pinned(), key_path, digest)
    return Signed(
        repository=ref.repository,
        digest=ref.digest,
        tag=ref.signature_tag,
        signature_manifest=digest,
        key_fingerprint=fingerprint(key.public_key()),
        layers=len(layers),
    )


def _existing_layers(store: ImageStore, tag: str) -> list[dict[str, Any]]:
    current = store.get_manifest(tag)
    if current is None:
        return []
    try:
        layers = json.loads(current.data).get("layers") or []
    except (ValueError, AttributeError):
        return []
    return [x for x in layers if isinstance(x, dict) and x.get("mediaType") == SIMPLE_SIGNING]
