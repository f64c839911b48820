"""cosign-compatible signatures: the simple-signing payload, ECDSA P-256 keys, the .sig manifest.

What cosign stores for a key-based signature of ``repo@sha256:D`` (and what this module
writes and reads):

* the payload, a JSON "simple signing" document naming the repository and the digest::

    {"critical":{"identity":{"docker-reference":"REPO"},
                 "image":{"docker-manifest-digest":"sha256:D"},
                 "type":"cosign container image signature"},"optional":null}

* an ECDSA P-256 signature over SHA-256 of the payload bytes, ASN.1 DER, base64;
* an OCI image manifest tagged ``sha256-D.sig`` in the same repository whose layers are the
  payloads (media type ``application/vnd.dev.cosign.simplesigning.v1+json``), each annotated
  with ``dev.cosignproject.cosign/signature`` = the base64 signature.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec

from burst.errors import BadInputError
from burst.inputs import read_bytes
from burst.supplychain.store import OCI_CONFIG, OCI_MANIFEST, sha256_digest

SIMPLE_SIGNING = "application/vnd.dev.cosign.simplesigning.v1+json"
SIGNATURE_ANNOTATION = "dev.cosignproject.cosign/signature"
COSIGN_TYPE = "cosign container image signature"
COSIGN_ARTIFACT_SIG = "application/vnd.dev.cosign.artifact.sig.v1+json"
PASSWORD_ENV = ("BURST_SIGNING_KEY_PASSWORD", "COSIGN_PASSWORD")


# -- payload -----------------------------------------------------------------------------------


def make_payload(repository: str, digest: str) -> bytes:
    """The simple-signing payload cosign writes, byte for byte (Go's field order, compact)."""
    doc = {
        "critical": {
            "identity": {"docker-reference": repository},
            "image": {"docker-manifest-digest": digest},
            "type": COSIGN_TYPE,
        },
        "optional": None,
    }
    return json.dumps(doc, separators=(",", ":")).encode()


@dataclass(frozen=True)
class Payload:
    repository: str
    digest: str
    type: str


def parse_payload(data: bytes) -> Payload | None:
    """The claims of a simple-signing payload; None when it is not one."""
    try:
        doc = json.loads(data)
        critical = doc["critical"]
        return Payload(
            repository=str(critical["identity"]["docker-reference"]),
            digest=str(critical["image"]["docker-manifest-digest"]),
            type=str(critical["type"]),
        )
    except (ValueError, KeyError, TypeError):
        return None


# -- keys --------------------------------------------------------------------------------------

KEY_MAX_BYTES = 64 << 10  # a PEM key is a few hundred bytes


def load_public_key(path: Path, name: str | None = None) -> ec.EllipticCurvePublicKey:
    """A PEM public key (cosign.pub format); it must be ECDSA P-256."""
    label = name or path.name
    if not path.exists() and not path.is_symlink():
        raise BadInputError(f"public key {label}: file {path} not found")
    data = read_bytes(path, what=f"public key {label}", max_bytes=KEY_MAX_BYTES)  # bounded
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise BadInputError(f"public key {label} ({path}) is not a PEM public key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePublicKey) or not isinstance(key.curve, ec.SECP256R1):
        raise BadInputError(f"public key {label} ({path}) must be ECDSA P-256")
    return key


def load_private_key(path: Path) -> ec.EllipticCurvePrivateKey:
    """A PEM private key (PKCS#8 or SEC1, optionally encrypted; password from the environment:
    BURST_SIGNING_KEY_PASSWORD or COSIGN_PASSWORD). It must be ECDSA P-256."""
    if not path.exists() and not path.is_symlink():
        raise BadInputError(f"signing key {path} not found")
    data = read_bytes(path, what="signing key", max_bytes=KEY_MAX_BYTES)  # bounded: no FIFO
    if b"SIGSTORE PRIVATE KEY" in data or b"COSIGN PRIVATE KEY" in data:
        raise BadInputError(
            f"signing key {path} is in cosign's encrypted format; sign with cosign itself, or "
            "use a PEM key (openssl ecparam -name prime256v1 -genkey | openssl pkcs8 -topk8)"
        )
    from burst.settings import current

    password = current().signing_key_password or os.environ.get("COSIGN_PASSWORD") or None
    try:
        key = serialization.load_pem_private_key(
            data, password=password.encode() if password else None
        )
    except TypeError:
        raise BadInputError(
            f"signing key {path} is encrypted: set BURST_SIGNING_KEY_PASSWORD"
        ) from None
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise BadInputError(f"signing key {path} is not a usable PEM private key: {exc}") from None
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(key.curve, ec.SECP256R1):
        raise BadInputError(f"signing key {path} must be ECDSA P-256")
    return key


def public_pem(key: ec.EllipticCurvePublicKey) -> bytes:
    return key.public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def fingerprint(key: ec.EllipticCurvePublicKey) -> str:
    """sha256 of the DER SubjectPublicKeyInfo: names a key in documents and logs."""
    der = key.public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return "sha256:" + hashlib.sha256(der).hexdigest()


def generate_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def private_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


# -- sign / verify -----------------------------------------------------------------------------


def sign_payload(key: ec.EllipticCurvePrivateKey, payload: bytes) -> str:
    return base64.b64encode(key.sign(payload, ec.ECDSA(hashes.SHA256()))).decode()


def signature_bytes(b64: str) -> bytes | None:
    """Decode the annotation's base64; None when it is not base64."""
    try:
        return base64.b64decode(b64.strip(), validate=True)
    except (binascii.Error, ValueError):
        return None


def verifies(key: ec.EllipticCurvePublicKey, payload: bytes, signature: bytes) -> bool:
    try:
        key.verify(signature, payload, ec.ECDSA(hashes.SHA256()))
    except (InvalidSignature, ValueError):
        return False
    return True


# -- the .sig manifest -------------------------------------------------------------------------


def signature_config(layer_digests: list[str]) -> bytes:
    """The config blob of a signature manifest (the shape cosign writes)."""
    doc = {
        "architecture": "",
        "created": "0001-01-01T00:00:00Z",
        "history": [{"created": "0001-01-01T00:00:00Z"}],
        "os": "",
        "rootfs": {"type": "layers", "diff_ids": layer_digests},
        "config": {},
    }
    return json.dumps(doc, separators=(",", ":")).encode()


def signature_layer(payload: bytes, signature_b64: str) -> dict[str, Any]:
    return {
        "mediaType": SIMPLE_SIGNING,
        "size": len(payload),
        "digest": sha256_digest(payload),
        "annotations": {SIGNATURE_ANNOTATION: signature_b64},
    }


def signature_manifest(layers: list[dict[str, Any]], config: bytes) -> bytes:
    doc = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "size": len(config), "digest": sha256_digest(config)},
        "layers": layers,
    }
    return json.dumps(doc, separators=(",", ":")).encode()
