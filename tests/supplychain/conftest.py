"""Fixtures: a real registry on loopback, key pairs, and a trust policy written for the test."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from burst.supplychain.signature import generate_key, private_pem, public_pem
from burst.supplychain.trust import TrustPolicy, load_trust

from .registry_server import LocalRegistry, find_or_install_registry


@pytest.fixture(scope="session")
def registry_binary() -> str:
    return find_or_install_registry()


@pytest.fixture(scope="module")
def registry(
    registry_binary: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalRegistry]:
    reg = LocalRegistry(registry_binary, tmp_path_factory.mktemp("registry")).start()
    try:
        yield reg
    finally:
        reg.stop()


@dataclass
class Keys:
    dir: Path
    trust: TrustPolicy

    def private(self, name: str) -> Path:
        return self.dir.parent / "private" / f"{name}.key"


@pytest.fixture(scope="module")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """Three key pairs: ``team`` (trusted for 127.0.0.1:*/team/*), ``other`` (trusted, but
    only for 127.0.0.1:*/other/*), ``rogue`` (not trusted: its public key is not listed)."""
    root = tmp_path_factory.mktemp("keys")
    keydir, private = root / "keys", root / "private"
    keydir.mkdir()
    private.mkdir()
    for name in ("team", "other", "rogue"):
        key = generate_key()
        (private / f"{name}.key").write_bytes(private_pem(key))
        (keydir / f"{name}.pub").write_bytes(public_pem(key.public_key()))
    (keydir / "trust.yaml").write_text(
        "version: 1\n"
        "keys:\n"
        "  team: {file: team.pub}\n"
        "  other: {file: other.pub}\n"
        "rules:\n"
        "  - name: team\n    repositories: ['127.0.0.1:*/team/*']\n    keys: [team]\n"
        "  - name: other\n    repositories: ['127.0.0.1:*/other/*']\n    keys: [other]\n",
        encoding="utf-8",
    )
    return Keys(keydir, load_trust(keydir))
