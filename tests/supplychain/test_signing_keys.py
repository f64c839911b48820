"""Signing keys as users bring them: PEM (plain or encrypted), not cosign's own format."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from burst.errors import BadInputError
from burst.supplychain.signature import (
    generate_key,
    load_private_key,
    make_payload,
    sign_payload,
    signature_bytes,
    verifies,
)


def test_payload_is_byte_for_byte_cosigns() -> None:
    assert make_payload("ghcr.io/a/b", "sha256:" + "0" * 64) == (
        b'{"critical":{"identity":{"docker-reference":"ghcr.io/a/b"},"image":'
        b'{"docker-manifest-digest":"sha256:' + b"0" * 64 + b'"},'
        b'"type":"cosign container image signature"},"optional":null}'
    )


def test_encrypted_pem_needs_the_password(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    key = generate_key()
    path = tmp_path / "enc.pem"
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"s3cret"),
        )
    )
    monkeypatch.delenv("BURST_SIGNING_KEY_PASSWORD", raising=False)
    monkeypatch.delenv("COSIGN_PASSWORD", raising=False)
    with pytest.raises(BadInputError, match="is encrypted: set BURST_SIGNING_KEY_PASSWORD"):
        load_private_key(path)
    monkeypatch.setenv("BURST_SIGNING_KEY_PASSWORD", "wrong")
    with pytest.raises(BadInputError, match="not a usable PEM private key"):
        load_private_key(path)
    monkeypatch.setenv("BURST_SIGNING_KEY_PASSWORD", "s3cret")
    loaded = load_private_key(path)
    payload = make_payload("r/x", "sha256:" + "1" * 64)
    sig = signature_bytes(sign_payload(loaded, payload))
    assert sig is not None and verifies(key.public_key(), payload, sig)
    assert not verifies(key.public_key(), payload + b" ", sig)


def test_cosign_key_format_and_other_curves_are_refused(tmp_path: Path) -> None:
    cosign = tmp_path / "cosign.key"
    cosign.write_text(
        "-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----\neyJ9\n-----END ENCRYPTED SIGSTORE PRIVATE KEY-----\n"
    )
    with pytest.raises(BadInputError, match="cosign's encrypted format"):
        load_private_key(cosign)
    p384 = tmp_path / "p384.pem"
    p384.write_bytes(
        ec.generate_private_key(ec.SECP384R1()).private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    with pytest.raises(BadInputError, match="must be ECDSA P-256"):
        load_private_key(p384)
    with pytest.raises(BadInputError, match="not found"):
        load_private_key(tmp_path / "missing.pem")
