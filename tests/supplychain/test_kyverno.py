"""policies/admission/: the Kyverno ClusterPolicy matches the trust policy, and its structure
is what Kyverno's ClusterPolicy (kyverno.io/v1) accepts.

Offline, without a cluster: Kyverno v1.19.0's own CRD schema (tests/data, from
config/crds/kyverno/kyverno.io_clusterpolicies.yaml), made strict (a misspelt field fails).
The deprecated fields (spec.validationFailureAction, spec.webhookTimeoutSeconds,
keys.signatureAlgorithm) are checked absent: their places since Kyverno 1.13 are each rule's
failureAction, spec.webhookConfiguration.timeoutSeconds and the attestor entry's
signatureAlgorithm (api/kyverno/v1/spec_types.go, image_verification_types.go)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import jsonschema
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from strict_schema import kyverno_cluster_policy

from burst.errors import BadInputError
from burst.supplychain.kyverno import render, render_yaml
from burst.supplychain.trust import load_trust

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "admission" / "kyverno-verify-images.yaml"
TRUST = load_trust(REPO / "policies" / "keys")


CLUSTER_POLICY = kyverno_cluster_policy()


def committed() -> dict:
    return yaml.safe_load(POLICY.read_text(encoding="utf-8"))


def test_committed_policy_is_the_rendering_of_the_trust_policy() -> None:
    assert POLICY.read_text(encoding="utf-8") == render_yaml(TRUST), (
        "policies/admission drifted from policies/keys/trust.yaml: run "
        "`burst image kyverno --out policies/admission/kyverno-verify-images.yaml`"
    )


def test_committed_policy_is_structurally_a_cluster_policy() -> None:
    jsonschema.validate(committed(), CLUSTER_POLICY)


def test_policy_enforces_digests_and_the_trusted_keys() -> None:
    doc = committed()
    assert "validationFailureAction" not in doc["spec"]  # deprecated since Kyverno 1.13
    assert "webhookTimeoutSeconds" not in doc["spec"]
    assert doc["spec"]["webhookConfiguration"]["timeoutSeconds"] == 30
    verify = [r for r in doc["spec"]["rules"] if "verifyImages" in r]
    for rule, trust_rule in zip(verify, TRUST.rules, strict=True):
        (vi,) = rule["verifyImages"]
        assert vi["verifyDigest"] is True and vi["required"] is True
        assert vi["failureAction"] == "Enforce"
        for entry in vi["attestors"][0]["entries"]:
            assert "signatureAlgorithm" not in entry["keys"]  # deprecated there
            assert entry["signatureAlgorithm"] == "sha256"
        pems = [e["keys"]["publicKeys"] for e in vi["attestors"][0]["entries"]]
        fingerprints = set()
        for pem in pems:
            key = serialization.load_pem_public_key(pem.encode())
            assert isinstance(key, ec.EllipticCurvePublicKey) and isinstance(
                key.curve, ec.SECP256R1
            )
            fingerprints.add(key.public_numbers())
        assert fingerprints == {TRUST.keys[k].key.public_numbers() for k in trust_rule.keys}
        for pattern in trust_rule.repositories:
            image = pattern.replace("*", "x") + "@sha256:" + "0" * 64
            assert any(fnmatch.fnmatchcase(image, ref) for ref in vi["imageReferences"])


@pytest.mark.parametrize(
    "path",
    [
        ("spec", "rules", 0, "verifyImages", 0, "imageReference"),
        ("spec", "rules", 0, "verifyImages", 0, "attestors", 0, "entries", 0, "keys", "publickeys"),
        ("spec", "validationFailureActions"),
        ("spec", "webhookConfiguration", "timeoutSecond"),
    ],
)
def test_structural_check_catches_misspelt_fields(path: tuple) -> None:
    doc = render(TRUST)
    node = doc
    for part in path[:-1]:
        node = node[part]
    node[path[-1]] = "x"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, CLUSTER_POLICY)


def _denied(image: str) -> bool:
    """Kyverno's AnyNotIn with wildcards, evaluated on the last rule's allowed list."""
    rule = committed()["spec"]["rules"][-1]
    (cond,) = rule["validate"]["foreach"][0]["deny"]["conditions"]["any"]
    assert cond["operator"] == "AnyNotIn"
    return not any(fnmatch.fnmatchcase(image, pattern) for pattern in cond["value"])


def test_images_no_trust_rule_covers_are_denied_not_admitted_unverified() -> None:
    """The pipeline's own images (ghcr.io/burst-train/...) were admitted unverified: only the
    local repositories had a verifyImages rule. Now an image outside every trust rule is
    denied; the Argo executor beside each step is the one exception."""
    from burst.pipelines.common import STEPS_IMAGE, TRAINER_IMAGE

    last = committed()["spec"]["rules"][-1]
    assert last["name"] == "only-trusted-repositories"
    assert last["validate"]["failureAction"] == "Enforce"
    assert (
        "containers, initContainers, ephemeralContainers" in last["validate"]["foreach"][0]["list"]
    )
    for image in (STEPS_IMAGE, TRAINER_IMAGE, "docker.io/library/python:3.11"):
        assert _denied(image), image
    assert not _denied("burst.local/quickstart@sha256:" + "0" * 64)
    assert not _denied("quay.io/argoproj/argoexec:v4.0.5")


def test_rendering_for_registries_no_trust_rule_covers_is_refused() -> None:
    with pytest.raises(BadInputError, match=r"ghcr\.io/burst-train/burst-steps"):
        render(TRUST, ["ghcr.io/burst-train/burst-steps"])
    assert render(TRUST, ["burst.local/quickstart"])["kind"] == "ClusterPolicy"
