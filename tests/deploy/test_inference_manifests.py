"""deploy/inference: one KServe InferenceService per tier, validated strictly against KServe
v0.20.0's InferenceService CRD schema (tests/data/kserve-v0.20.0-inferenceservice.schema.json:
the v1beta1 openAPIV3Schema of config/crd/full/serving.kserve.io_inferenceservices.yaml at tag
v0.20.0 of github.com/kserve/kserve, descriptions removed), and consistent with the tiers
`burst serve` places (region, queue limit)."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from strict_schema import DATA, strict

from burst.inference.serve import DEFAULT_PLACEMENT

BUNDLE = Path(__file__).resolve().parents[2] / "deploy" / "inference"


def schema() -> dict[str, Any]:
    doc = json.loads((DATA / "kserve-v0.20.0-inferenceservice.schema.json").read_text())
    doc.pop("$comment", None)
    return strict(doc)


SCHEMA = schema()


def services() -> dict[str, dict[str, Any]]:
    kustomization = yaml.safe_load((BUNDLE / "kustomization.yaml").read_text())
    out = {}
    for name in kustomization["resources"]:
        obj = yaml.safe_load((BUNDLE / name).read_text())
        if obj["kind"] == "InferenceService":
            out[obj["metadata"]["labels"]["burst.io/tier"]] = obj
    return out


def errors(obj: dict[str, Any]) -> list[str]:
    return [e.message for e in jsonschema.Draft7Validator(SCHEMA).iter_errors(obj)]


def test_every_tier_validates_strictly() -> None:
    found = services()
    assert set(found) == {"distilled", "heavy"}
    for tier, obj in found.items():
        assert (
            obj["apiVersion"] == "serving.kserve.io/v1beta1" and obj["kind"] == "InferenceService"
        )
        assert errors(obj) == [], tier


def test_a_misspelt_field_fails() -> None:
    obj = copy.deepcopy(services()["heavy"])
    obj["spec"]["predictor"]["model"]["storageURI"] = obj["spec"]["predictor"]["model"].pop(
        "storageUri"
    )
    assert any("storageURI" in e for e in errors(obj))


@pytest.mark.parametrize("placement", DEFAULT_PLACEMENT, ids=lambda p: p.name)
def test_the_manifests_place_the_tiers_where_serve_does(placement: Any) -> None:
    obj = services()[placement.kind]
    predictor = obj["spec"]["predictor"]
    assert predictor["nodeSelector"]["topology.kubernetes.io/region"] == placement.region
    assert obj["metadata"]["labels"]["burst.io/region"] == placement.region
    assert predictor["containerConcurrency"] == placement.queue_limit
    assert predictor["model"]["storageUri"].endswith(f"/tiers/{placement.name}/triton")
    gpus = predictor["model"]["resources"]["limits"].get("nvidia.com/gpu")
    assert (gpus is not None) == (placement.kind == "heavy")
