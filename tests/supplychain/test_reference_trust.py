"""Reference parsing and the trust policy file: pure functions, bad input, fail closed."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from burst.errors import EXIT_BAD_INPUT, BadInputError, PolicyRefusal
from burst.supplychain.reference import normalise_repository, parse_reference
from burst.supplychain.signature import generate_key, public_pem
from burst.supplychain.trust import load_trust

D = "sha256:" + "a1" * 32


@pytest.mark.e2e
@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag"),
    [
        (f"ghcr.io/org/trainer@{D}", "ghcr.io", "ghcr.io/org/trainer", None),
        (f"ghcr.io/org/trainer:v1@{D}", "ghcr.io", "ghcr.io/org/trainer", "v1"),
        (f"127.0.0.1:5000/team/x@{D}", "127.0.0.1:5000", "127.0.0.1:5000/team/x", None),
        (f"localhost/x@{D}", "localhost", "localhost/x", None),
        (f"ubuntu@{D}", "docker.io", "docker.io/library/ubuntu", None),
        (f"org/img@{D}", "docker.io", "docker.io/org/img", None),
        (f"index.docker.io/org/img@{D}", "docker.io", "docker.io/org/img", None),
    ],
)
def test_registry_references(text: str, registry: str, repository: str, tag: str | None) -> None:
    ref = parse_reference(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag, D)
    assert ref.signature_tag == f"sha256-{'a1' * 32}.sig"


def test_layout_reference() -> None:
    ref = parse_reference(f"oci-layout://examples/images/x@{D}")
    assert ref.is_layout and ref.layout_dir == "examples/images/x" and ref.digest == D


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("ghcr.io/org/trainer:latest", "not pinned by digest"),
        ("ghcr.io/org/trainer", "not pinned by digest"),
        ("oci-layout://examples/x", "not pinned by digest"),
        ("ghcr.io/org/trainer@sha256:abc", "is not sha256:<64 lowercase hex>"),
        (f"ghcr.io/org/trainer@{D.upper()}", "is not sha256:<64 lowercase hex>"),
        (f"ghcr.io/Org/trainer@{D}", "repository path 'Org/trainer' is malformed"),
        ("", "empty"),
    ],
)
def test_bad_references_are_refused(text: str, message: str) -> None:
    with pytest.raises(PolicyRefusal, match=message):
        parse_reference(text)


def test_normalise_repository() -> None:
    assert normalise_repository("ubuntu") == "docker.io/library/ubuntu"
    assert normalise_repository("index.docker.io/ubuntu") == "docker.io/library/ubuntu"
    assert normalise_repository("ghcr.io/a/b") == "ghcr.io/a/b"


def write_keys(tmp_path: Path, trust: str, names: tuple[str, ...] = ("k",)) -> Path:
    for name in names:
        (tmp_path / f"{name}.pub").write_bytes(public_pem(generate_key().public_key()))
    (tmp_path / "trust.yaml").write_text(trust, encoding="utf-8")
    return tmp_path


GOOD = "version: 1\nkeys:\n  k: {file: k.pub}\nrules:\n  - {name: r, repositories: ['ghcr.io/org/*'], keys: [k]}\n"


def test_trust_rules_first_match_and_fail_closed(tmp_path: Path) -> None:
    trust = load_trust(write_keys(tmp_path, GOOD))
    key, rule, pattern = trust.key_for("ghcr.io/org/trainer", "k")
    assert (key.name, rule.name, pattern) == ("k", "r", "ghcr.io/org/*")
    with pytest.raises(PolicyRefusal, match=r"no trust rule .* covers repository ghcr\.io/other/x"):
        trust.key_for("ghcr.io/other/x", "k")
    with pytest.raises(PolicyRefusal, match="'nope' is not a trusted key"):
        trust.key_for("ghcr.io/org/trainer", "nope")


@pytest.mark.parametrize(
    ("trust", "message"),
    [
        (
            "version: 2\nkeys: {k: {file: k.pub}}\nrules: [{repositories: [a], keys: [k]}]\n",
            "version: must be 1",
        ),
        (
            "version: 1\nrules: [{repositories: [a], keys: [k]}]\n",
            "keys: must be a non-empty mapping",
        ),
        ("version: 1\nkeys: {k: {file: k.pub}}\nrules: []\n", "rules: must be a non-empty list"),
        (
            "version: 1\nkeys: {k: {file: k.pub}}\nrules: [{repositories: [a], keys: [z]}]\n",
            r"rules\[0\].*'z' is not defined",
        ),
        (
            "version: 1\nkeys: {k: {file: missing.pub}}\nrules: [{repositories: [a], keys: [k]}]\n",
            "not found",
        ),
        (
            "version: 1\nkeys: {k: {file: ../k.pub}}\nrules: [{repositories: [a], keys: [k]}]\n",
            "must be inside",
        ),
        (
            "version: 1\nkeys: {K!: {file: k.pub}}\nrules: [{repositories: [a], keys: [k]}]\n",
            "key names are lowercase",
        ),
        (
            "version: 1\nkeys: {k: {file: k.pub}}\nrules: [{repositories: [], keys: [k]}]\n",
            r"rules\[0\].*repositories",
        ),
        (
            "version: 1\nkeys: {k: {file: k.pub}}\nrules: [{repositories: [a], keys: [k]}]\nextra: 1\n",
            "unknown field",
        ),
        ("version: 1\nkeys: [\n", "not valid YAML"),
    ],
)
def test_bad_trust_files_are_bad_input(tmp_path: Path, trust: str, message: str) -> None:
    with pytest.raises(BadInputError) as info:
        load_trust(write_keys(tmp_path, trust))
    assert re.search(message, info.value.one_line()), info.value.one_line()
    assert info.value.exit_code == EXIT_BAD_INPUT
    assert "trust.yaml" in info.value.one_line() or "k.pub" in info.value.one_line()


def test_non_p256_key_is_bad_input(tmp_path: Path) -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    write_keys(tmp_path, GOOD)
    other = ec.generate_private_key(ec.SECP384R1()).public_key()
    (tmp_path / "k.pub").write_bytes(public_pem(other))
    with pytest.raises(BadInputError, match="must be ECDSA P-256"):
        load_trust(tmp_path)


def test_missing_trust_file_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="not found"):
        load_trust(tmp_path)


def test_committed_trust_policy_loads() -> None:
    trust = load_trust(Path(__file__).resolve().parents[2] / "policies" / "keys")
    assert "burst-dev" in trust.keys
    trust.key_for("burst.local/burst/quickstart-trainer", "burst-dev")
    with pytest.raises(PolicyRefusal):  # the dev key must not cover real registries
        trust.key_for("ghcr.io/example-labs/burst/trainer", "burst-dev")
