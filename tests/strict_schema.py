"""Strict JSON Schema from a Kubernetes CRD's (or API's) OpenAPI v3 schema: every object that
lists its properties refuses any other field (additionalProperties: false), as the API
server's field validation (kubectl --validate=strict) does, unless the schema says
x-kubernetes-preserve-unknown-fields. Shared by the admission-policy and deploy/ tests."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

DATA = Path(__file__).resolve().parent / "data"


def strict(schema: Any) -> Any:
    node = copy.deepcopy(schema)

    def walk(n: Any) -> None:
        if isinstance(n, dict):
            if (
                "properties" in n
                and "additionalProperties" not in n
                and not n.get("x-kubernetes-preserve-unknown-fields")
            ):
                n["additionalProperties"] = False
            for v in n.values():
                walk(v)
        elif isinstance(n, list):
            for v in n:
                walk(v)

    walk(node)
    return node


def kyverno_cluster_policy() -> dict[str, Any]:
    doc = json.loads((DATA / "kyverno-v1.19.0-clusterpolicy.schema.json").read_text())
    doc.pop("$comment", None)
    doc.pop("source", None)
    return strict(doc)  # type: ignore[no-any-return]
