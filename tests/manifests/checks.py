"""The three offline checks of an Argo manifest: Hera round-trip, JSON Schema (lenient and
strict), semantic lint. The schema is the project's copy in tests/data (never ../shared)."""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import jsonschema

from burst.runner.lint import lint

SCHEMA_FILE = Path(__file__).resolve().parents[1] / "data" / "argo-workflows-v4.0.5.schema.json"
INT_OR_STRING = "io.k8s.apimachinery.pkg.util.intstr.IntOrString"


@functools.cache
def raw_schema() -> dict[str, Any]:
    return json.loads(SCHEMA_FILE.read_text(encoding="utf-8"))


@functools.cache
def lenient_schema() -> dict[str, Any]:
    """The published schema with IntOrString accepting an int or a string (it says string)."""
    schema = copy.deepcopy(raw_schema())
    schema["definitions"][INT_OR_STRING] = {"type": ["integer", "string"]}
    return schema


@functools.cache
def strict_schema() -> dict[str, Any]:
    """The lenient schema where every object with declared properties forbids any other key:
    a typo'd field fails here (the published schema lets unknown fields through)."""
    schema = copy.deepcopy(lenient_schema())
    for definition in schema["definitions"].values():
        if definition.get("type") == "object" and "properties" in definition:
            definition.setdefault("additionalProperties", False)
    return schema


@functools.cache
def _validator(kind: str) -> jsonschema.protocols.Validator:
    schema = {"lenient": lenient_schema, "strict": strict_schema, "raw": raw_schema}[kind]()
    cls = jsonschema.validators.validator_for(schema)
    return cls(schema)


def schema_errors(manifest: dict[str, Any], kind: str = "lenient") -> list[str]:
    """Schema violations, validating against the definition of the manifest's own kind (the
    top-level oneOf would report every other kind's mismatch as noise)."""
    validator = _validator(kind)
    ref = {"$ref": f"#/definitions/io.argoproj.workflow.v1alpha1.{manifest.get('kind')}"}
    schema = {k: v for k, v in validator.schema.items() if k not in ("oneOf", "type")}
    sub = validator.evolve(schema={**schema, **ref})
    errors = sorted(sub.iter_errors(manifest), key=lambda e: list(map(str, e.absolute_path)))
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message[:200]}" for e in errors]


def _hera_class(kind: str) -> Any:
    from hera.workflows import CronWorkflow, Workflow, WorkflowTemplate

    return {
        "WorkflowTemplate": WorkflowTemplate,
        "CronWorkflow": CronWorkflow,
        "Workflow": Workflow,
    }[kind]


def roundtrip_diff(manifest: dict[str, Any]) -> list[str]:
    """Keys that change through Hera's models (from_dict -> to_dict): unknown fields vanish,
    so a typo shows up here too."""
    from hera.workflows.models import CronWorkflow, Workflow, WorkflowTemplate

    model_cls = {
        "WorkflowTemplate": WorkflowTemplate,
        "CronWorkflow": CronWorkflow,
        "Workflow": Workflow,
    }[manifest["kind"]]
    try:
        model = model_cls.model_validate(manifest)
    except Exception as exc:  # pydantic.ValidationError: report, do not crash the check
        return [f"model rejects the manifest: {str(exc).splitlines()[0]}"]
    back = (
        _hera_class(manifest["kind"])
        .from_dict(model.model_dump(by_alias=True, exclude_none=True))
        .to_dict()
    )
    return _diff(manifest, back, "")


def _diff(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = []
        for k in sorted(set(a) | set(b)):
            if k not in b:
                out.append(f"{path}/{k}: lost in the round trip")
            elif k not in a:
                out.append(f"{path}/{k}: added in the round trip")
            else:
                out += _diff(a[k], b[k], f"{path}/{k}")
        return out
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return [f"{path}: {len(a)} items became {len(b)}"]
        return [
            d
            for i, (x, y) in enumerate(zip(a, b, strict=True))
            for d in _diff(x, y, f"{path}[{i}]")
        ]
    if a != b and str(a) != str(b):
        return [f"{path}: {a!r} became {b!r}"]
    return []


def all_problems(
    manifest: dict[str, Any], workflow_templates: list[dict[str, Any]] | None = None
) -> dict[str, list[str]]:
    """``workflow_templates``: what a workflowTemplateRef may call (the lint then checks the
    reference resolves and passes only declared parameters)."""
    return {
        "roundtrip": roundtrip_diff(manifest),
        "schema": schema_errors(manifest, "lenient"),
        "strict": schema_errors(manifest, "strict"),
        "lint": lint(manifest, workflow_templates=workflow_templates),
    }
