"""policies/admission/: the Kyverno ClusterPolicy matches the trust policy, and its structure
is what Kyverno's ClusterPolicy (kyverno.io/v1, verifyImages) accepts.

Offline, without a cluster or Kyverno's CRD: a structural JSON Schema written here from
Kyverno's documented verifyImages fields (closed objects, so a misspelt field fails)."""

from __future__ import annotations

import fnmatch
from pathlib import Path

import jsonschema
import pytest
import yaml
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from burst.supplychain.kyverno import render, render_yaml
from burst.supplychain.trust import load_trust

REPO = Path(__file__).resolve().parents[2]
POLICY = REPO / "policies" / "admission" / "kyverno-verify-images.yaml"
TRUST = load_trust(REPO / "policies" / "keys")


def closed(props: dict, required: list[str]) -> dict:
    return {
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": False,
    }


STR = {"type": "string", "minLength": 1}
KEYS = closed(
    {
        "publicKeys": {"type": "string", "pattern": "^-----BEGIN PUBLIC KEY-----"},
        "signatureAlgorithm": {"enum": ["sha256", "sha512"]},
        "rekor": closed({"ignoreTlog": {"type": "boolean"}, "url": STR}, []),
        "ctlog": closed({"ignoreSCT": {"type": "boolean"}, "pubkey": STR}, []),
    },
    ["publicKeys"],
)
VERIFY_IMAGE = closed(
    {
        "imageReferences": {"type": "array", "minItems": 1, "items": STR},
        "type": {"enum": ["Cosign", "Notary", "SigstoreBundle"]},
        "required": {"type": "boolean"},
        "verifyDigest": {"type": "boolean"},
        "mutateDigest": {"type": "boolean"},
        "attestors": {
            "type": "array",
            "minItems": 1,
            "items": closed(
                {
                    "count": {"type": "integer", "minimum": 1},
                    "entries": {
                        "type": "array",
                        "minItems": 1,
                        "items": closed({"keys": KEYS}, ["keys"]),
                    },
                },
                ["entries"],
            ),
        },
    },
    ["imageReferences", "attestors"],
)
RESOURCE_FILTER = closed(
    {
        "resources": closed(
            {
                "kinds": {"type": "array", "minItems": 1, "items": STR},
                "namespaceSelector": closed(
                    {"matchLabels": {"type": "object", "additionalProperties": STR}}, []
                ),
            },
            ["kinds"],
        )
    },
    ["resources"],
)
CLUSTER_POLICY = closed(
    {
        "apiVersion": {"const": "kyverno.io/v1"},
        "kind": {"const": "ClusterPolicy"},
        "metadata": closed(
            {
                "name": {"type": "string", "pattern": "^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"},
                "annotations": {"type": "object"},
            },
            ["name"],
        ),
        "spec": closed(
            {
                "validationFailureAction": {"enum": ["Enforce", "Audit"]},
                "background": {"type": "boolean"},
                "webhookTimeoutSeconds": {"type": "integer", "minimum": 1, "maximum": 30},
                "rules": {
                    "type": "array",
                    "minItems": 1,
                    "items": closed(
                        {
                            "name": {"type": "string", "maxLength": 63},
                            "match": closed(
                                {"any": {"type": "array", "items": RESOURCE_FILTER}}, ["any"]
                            ),
                            "verifyImages": {"type": "array", "minItems": 1, "items": VERIFY_IMAGE},
                        },
                        ["name", "match", "verifyImages"],
                    ),
                },
            },
            ["rules"],
        ),
    },
    ["apiVersion", "kind", "metadata", "spec"],
)


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
    assert doc["spec"]["validationFailureAction"] == "Enforce"
    for rule, trust_rule in zip(doc["spec"]["rules"], TRUST.rules, strict=True):
        (vi,) = rule["verifyImages"]
        assert vi["verifyDigest"] is True and vi["required"] is True
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
