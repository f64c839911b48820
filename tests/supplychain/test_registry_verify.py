"""Verification against a REAL registry (Debian's docker-registry on loopback).

Images are pushed with the OCI distribution API, signed with ``burst image sign`` logic, then
attacked the way an adversary with write access to the registry could: each attack must be
refused (exit 3 / PolicyRefusal) with its own message.
"""

from __future__ import annotations

import base64
import json
import secrets

import pytest

from burst.errors import EXIT_REFUSED, PolicyRefusal
from burst.supplychain.compat import LABELS
from burst.supplychain.registry import RegistryStore
from burst.supplychain.sign import sign_image
from burst.supplychain.signature import (
    SIGNATURE_ANNOTATION,
    make_payload,
    signature_config,
    signature_layer,
    signature_manifest,
)
from burst.supplychain.store import OCI_INDEX, OCI_MANIFEST
from burst.supplychain.verify import verify_image
from devtools.tinyimage import push_tiny_image

from .conftest import Keys
from .registry_server import LocalRegistry

pytestmark = [pytest.mark.slow, pytest.mark.e2e]
TRAINER_LABELS = {
    LABELS["cuda"]: "12.8",
    LABELS["driver"]: "570.26",
    LABELS["torch"]: "2.13.0",
    LABELS["nccl"]: "2.27.3",
    LABELS["deepspeed"]: "0.19.8",
}


def push(registry: LocalRegistry, path: str, labels: dict[str, str] | None = None) -> str:
    """Push a fresh tiny image (unique content) to ``path``; return its pinned reference."""
    store = RegistryStore(registry.host, path)
    digest = push_tiny_image(store, {"id": secrets.token_bytes(16)}, labels or TRAINER_LABELS)
    return f"{registry.host}/{path}@{digest}"


def refused(ref: str, key: str, keys: Keys) -> str:
    with pytest.raises(PolicyRefusal) as info:
        verify_image(ref, key, keys.trust)
    assert info.value.exit_code == EXIT_REFUSED
    return info.value.one_line()


def sig_manifest(registry: LocalRegistry, path: str, digest: str) -> dict:
    fetched = RegistryStore(registry.host, path).get_manifest(f"sha256-{digest[7:]}.sig")
    assert fetched is not None
    return json.loads(fetched.data)


def put_sig(registry: LocalRegistry, path: str, digest: str, layers: list[dict]) -> None:
    store = RegistryStore(registry.host, path)
    config = signature_config([x["digest"] for x in layers])
    store.put_blob(config)
    store.put_manifest(signature_manifest(layers, config), OCI_MANIFEST, f"sha256-{digest[7:]}.sig")


def test_signed_image_verifies(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "team/trainer")
    signed = sign_image(ref, keys.private("team"))
    verified = verify_image(ref, "team", keys.trust)
    assert verified.ref.digest == signed.digest == ref.split("@")[1]
    assert verified.key.fingerprint == signed.key_fingerprint
    assert verified.signature_source == "tag"  # distribution 2.8 has no referrers API
    assert verified.rule.name == "team"
    assert verified.labels == TRAINER_LABELS


def test_signature_layout_is_cosigns(registry: LocalRegistry, keys: Keys) -> None:
    """What cosign verify reads: the .sig tag, an OCI manifest, simple-signing layers whose
    payload is cosign's JSON and whose annotation is a base64 DER ECDSA signature."""
    ref = push(registry, "team/layout")
    sign_image(ref, keys.private("team"))
    repo, digest = ref.split("@")
    manifest = sig_manifest(registry, "team/layout", digest)
    assert manifest["mediaType"] == OCI_MANIFEST
    (layer,) = manifest["layers"]
    assert layer["mediaType"] == "application/vnd.dev.cosign.simplesigning.v1+json"
    payload = RegistryStore(registry.host, "team/layout").get_blob(layer["digest"])
    assert payload is not None
    assert json.loads(payload) == {
        "critical": {
            "identity": {"docker-reference": repo},
            "image": {"docker-manifest-digest": digest},
            "type": "cosign container image signature",
        },
        "optional": None,
    }
    der = base64.b64decode(layer["annotations"][SIGNATURE_ANNOTATION])
    assert der[0] == 0x30  # ASN.1 SEQUENCE (r, s), as cosign writes


def test_second_signature_is_appended_and_either_verifies(
    registry: LocalRegistry, keys: Keys
) -> None:
    ref = push(registry, "team/two")
    sign_image(ref, keys.private("rogue"))
    with pytest.raises(PolicyRefusal):
        verify_image(ref, "team", keys.trust)
    assert sign_image(ref, keys.private("team")).layers == 2
    assert verify_image(ref, "team", keys.trust).key.name == "team"


def test_unsigned_image_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "team/unsigned")
    msg = refused(ref, "team", keys)
    assert "is unsigned" in msg and f"sha256-{ref.split(':')[-1]}.sig: absent" in msg
    assert "referrers API: not offered" in msg


def test_tampered_payload_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    """The attacker rewrites the payload to name their image and keeps the signature."""
    ref = push(registry, "team/tampered")
    evil = push(registry, "team/tampered")
    sign_image(ref, keys.private("team"))
    digest = ref.split("@")[1]
    layer = sig_manifest(registry, "team/tampered", digest)["layers"][0]
    payload = make_payload(f"{registry.host}/team/tampered", evil.split("@")[1])
    RegistryStore(registry.host, "team/tampered").put_blob(payload)
    forged = signature_layer(payload, layer["annotations"][SIGNATURE_ANNOTATION])
    put_sig(registry, "team/tampered", evil.split("@")[1], [forged])
    msg = refused(evil, "team", keys)
    assert "does not verify with key 'team'" in msg and "tampered" in msg


def test_corrupted_signature_annotation_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "team/corrupt")
    sign_image(ref, keys.private("team"))
    digest = ref.split("@")[1]
    layer = sig_manifest(registry, "team/corrupt", digest)["layers"][0]
    layer["annotations"][SIGNATURE_ANNOTATION] = "not base64 at all!"
    put_sig(registry, "team/corrupt", digest, [layer])
    assert "not valid base64 (tampered)" in refused(ref, "team", keys)


def test_signature_for_another_digest_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    """A genuine signature of image A, copied under image B's .sig tag."""
    a = push(registry, "team/copy")
    b = push(registry, "team/copy")
    sign_image(a, keys.private("team"))
    layers = sig_manifest(registry, "team/copy", a.split("@")[1])["layers"]
    put_sig(registry, "team/copy", b.split("@")[1], layers)
    msg = refused(b, "team", keys)
    assert f"is for another image digest {a.split('@')[1]}" in msg


def test_signature_for_another_repository_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    """Same digest pushed to two repositories; the signature names the first one."""
    store_a = RegistryStore(registry.host, "team/repo-a")
    store_b = RegistryStore(registry.host, "team/repo-b")
    files = {"id": secrets.token_bytes(16)}
    digest = push_tiny_image(store_a, files, TRAINER_LABELS)
    assert push_tiny_image(store_b, files, TRAINER_LABELS) == digest
    sign_image(f"{registry.host}/team/repo-a@{digest}", keys.private("team"))
    layers = sig_manifest(registry, "team/repo-a", digest)["layers"]
    payload = store_a.get_blob(layers[0]["digest"])
    assert payload is not None
    store_b.put_blob(payload)
    put_sig(registry, "team/repo-b", digest, layers)
    msg = refused(f"{registry.host}/team/repo-b@{digest}", "team", keys)
    assert f"names repository {registry.host}/team/repo-a" in msg and "wrong repository" in msg


def test_wrong_trusted_key_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    """Signed by 'other', a trusted key, but not the one the spec names for this repository."""
    ref = push(registry, "team/wrongkey")
    sign_image(ref, keys.private("other"))
    msg = refused(ref, "team", keys)
    assert "signed with key 'other', but the spec requires key 'team' (wrong key)" in msg


def test_untrusted_key_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "team/rogue")
    sign_image(ref, keys.private("rogue"))
    msg = refused(ref, "team", keys)
    assert "does not verify with key 'team'" in msg and "untrusted key" in msg


def test_key_not_allowed_for_repository_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    """'other' signs it and the spec names 'other', but the trust rule for team/* says 'team'."""
    ref = push(registry, "team/policy")
    sign_image(ref, keys.private("other"))
    msg = refused(ref, "other", keys)
    assert "key 'other' may not sign repository" in msg and "allows only team" in msg


def test_repository_without_rule_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "nobody/image")
    sign_image(ref, keys.private("team"))
    assert "no trust rule" in refused(ref, "team", keys)


def test_unknown_key_name_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push(registry, "team/unknownkey")
    assert "'rogue' is not a trusted key" in refused(ref, "rogue", keys)


def test_tag_reference_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    store = RegistryStore(registry.host, "team/tagged")
    digest = push_tiny_image(store, {"id": b"tagged"}, TRAINER_LABELS, tag="v1")
    sign_image(f"{registry.host}/team/tagged@{digest}", keys.private("team"))
    msg = refused(f"{registry.host}/team/tagged:v1", "team", keys)
    assert "is not pinned by digest" in msg


def test_missing_image_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = f"{registry.host}/team/ghost@sha256:{'ab' * 32}"
    assert "not found in" in refused(ref, "team", keys)


def test_stopped_registry_is_refused(
    registry_binary: str, tmp_path_factory: pytest.TempPathFactory, keys: Keys
) -> None:
    reg = LocalRegistry(registry_binary, tmp_path_factory.mktemp("stopped")).start()
    try:
        ref = push(reg, "team/gone")
        sign_image(ref, keys.private("team"))
        assert verify_image(ref, "team", keys.trust).ref.digest == ref.split("@")[1]
    finally:
        reg.stop()
    msg = refused(ref, "team", keys)
    assert f"registry {reg.host} is unreachable" in msg and "fail closed" in msg


def push_index(registry: LocalRegistry, path: str, platforms: list[tuple[str, str]]) -> str:
    """A multi-platform index whose children are tiny images; return its pinned reference."""
    store = RegistryStore(registry.host, path)
    manifests = []
    for os_name, arch in platforms:
        labels = TRAINER_LABELS if arch == "amd64" else {"dev.burst.cuda.version": "arm-only"}
        child = push_tiny_image(store, {"id": secrets.token_bytes(8)}, labels)
        fetched = store.get_manifest(child)
        assert fetched is not None
        manifests.append({"mediaType": OCI_MANIFEST, "digest": child, "size": len(fetched.data),
                          "platform": {"os": os_name, "architecture": arch}})  # fmt: skip
    index = {"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": manifests}
    digest = store.put_manifest(json.dumps(index).encode(), OCI_INDEX, None)
    return f"{registry.host}/{path}@{digest}"


def test_signed_index_verifies_and_labels_come_from_linux_amd64(
    registry: LocalRegistry, keys: Keys
) -> None:
    ref = push_index(registry, "team/multi", [("linux", "arm64"), ("linux", "amd64")])
    sign_image(ref, keys.private("team"))
    verified = verify_image(ref, "team", keys.trust)
    assert verified.manifest.media_type == OCI_INDEX
    assert verified.labels == TRAINER_LABELS


def test_index_without_linux_amd64_is_refused(registry: LocalRegistry, keys: Keys) -> None:
    ref = push_index(registry, "team/armonly", [("linux", "arm64")])
    sign_image(ref, keys.private("team"))
    assert "index without a linux/amd64 image" in refused(ref, "team", keys)
