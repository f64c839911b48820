"""Which Argo features the local runner executes, and the check that refuses the rest.

Every field of a manifest is either executed here (steps, DAG tasks, parameters, raw
artifacts, retries, deadlines, the exit handler...), accepted as cluster-only (scheduling,
garbage collection, labels, the semaphore: one local run on one machine needs none of them),
or refused: :func:`check_supported` names the first such field before anything runs.
"""

from __future__ import annotations

from typing import Any

from burst.errors import BadInputError

ANY = "*"  # a subtree taken as a whole (no effect locally, or free-form)

# Allowed keys per object kind: key -> kind of its value (a schema name, ANY, or "[kind]").
_SCHEMA: dict[str, dict[str, str]] = {
    "manifest": {"apiVersion": ANY, "kind": ANY, "metadata": ANY, "spec": "spec"},
    "spec": {
        "entrypoint": ANY,
        "onExit": ANY,
        "arguments": "arguments",
        "templates": "[template]",
        "activeDeadlineSeconds": ANY,
        "parallelism": ANY,  # pods running at once (a semaphore around every pod)
        "volumeClaimTemplates": "[claim]",
        "volumes": ANY,  # emptyDir and the like: the engine maps each by name to a directory
        # cluster-only: no effect on one machine
        "serviceAccountName": ANY,
        "synchronization": ANY,
        "podGC": ANY,
        "ttlStrategy": ANY,
        "podMetadata": ANY,
        "workflowMetadata": ANY,
        "securityContext": ANY,
        "nodeSelector": ANY,
        "tolerations": ANY,
        "affinity": ANY,
        "priority": ANY,
        "podPriorityClassName": ANY,
        "imagePullSecrets": ANY,
        "volumeClaimGC": ANY,
        "automountServiceAccountToken": ANY,
        "archiveLogs": ANY,
        "podDisruptionBudget": ANY,
    },
    "claim": {"metadata": ANY, "spec": ANY},
    "arguments": {"parameters": "[parameter]"},
    "parameter": {
        "name": ANY,
        "value": ANY,
        "default": ANY,
        "description": ANY,
        "enum": ANY,
        "valueFrom": "valueFrom",
    },
    "valueFrom": {"path": ANY, "default": ANY},
    "template": {
        "name": ANY,
        "inputs": "inputs",
        "outputs": "outputs",
        "container": "container",
        "resource": "resource",
        "steps": "[[step]]",
        "dag": "dag",
        "retryStrategy": "retryStrategy",
        "activeDeadlineSeconds": ANY,
        "parallelism": ANY,  # a steps template's children running at once
        # cluster-only
        "nodeSelector": ANY,
        "tolerations": ANY,
        "affinity": ANY,
        "podSpecPatch": ANY,
        "metadata": ANY,
        "securityContext": ANY,
        "serviceAccountName": ANY,
        "priorityClassName": ANY,
        "schedulerName": ANY,
        "synchronization": ANY,
        "executor": ANY,
    },
    # a Kubernetes object the workflow creates: executed locally only for the kinds that are
    # cluster-only identities (recorded, nothing to create on one machine); see engine.check
    "resource": {
        "action": ANY,
        "manifest": ANY,
        "setOwnerReference": ANY,
        "successCondition": ANY,
        "failureCondition": ANY,
    },
    "inputs": {"parameters": "[parameter]", "artifacts": "[rawArtifact]"},
    "outputs": {"parameters": "[parameter]", "artifacts": "[outputArtifact]"},
    # output artifacts are copied into the run directory (artifacts/<step>/<name>), the local
    # stand-in for the artifact repository
    "outputArtifact": {"name": ANY, "path": ANY, "archive": ANY, "optional": ANY},
    "rawArtifact": {"name": ANY, "path": ANY, "raw": "raw", "mode": ANY},
    "raw": {"data": ANY},
    "container": {
        "image": ANY,
        "command": ANY,
        "args": ANY,
        "env": "[env]",
        "workingDir": ANY,
        "volumeMounts": "[volumeMount]",
        # cluster-only
        "imagePullPolicy": ANY,
        "resources": ANY,
        "securityContext": ANY,
        "name": ANY,
    },
    "env": {"name": ANY, "value": ANY},
    "volumeMount": {"name": ANY, "mountPath": ANY, "readOnly": ANY},
    "step": {
        "name": ANY,
        "template": ANY,
        "arguments": "arguments",
        "when": ANY,
        "continueOn": "continueOn",
        # one parallel step per item (burst.runner.fanout)
        "withItems": ANY,
        "withParam": ANY,
    },
    "continueOn": {"failed": ANY, "error": ANY},
    "dag": {"tasks": "[task]"},
    "task": {
        "name": ANY,
        "template": ANY,
        "arguments": "arguments",
        "when": ANY,
        "dependencies": ANY,
        "continueOn": "continueOn",
    },
    "retryStrategy": {
        "limit": ANY,
        "retryPolicy": ANY,
        "expression": ANY,
        "backoff": "backoff",
        "affinity": ANY,
    },
    "backoff": {"duration": ANY, "factor": ANY, "maxDuration": ANY, "cap": ANY},
}

KINDS = ("WorkflowTemplate", "Workflow")


class UnsupportedFeature(BadInputError):
    """The manifest uses an Argo feature the local runner does not execute."""


def _walk(value: Any, kind: str, path: str) -> None:
    if kind == ANY:
        return
    if kind.startswith("["):
        inner = kind[1:-1]
        if not isinstance(value, list):
            raise UnsupportedFeature(f"{path} must be a list")
        for i, item in enumerate(value):
            _walk(item, inner, f"{path}[{i}]")
        return
    if not isinstance(value, dict):
        raise UnsupportedFeature(f"{path} must be a mapping")
    allowed = _SCHEMA[kind]
    for key, sub in value.items():
        if key not in allowed:
            raise UnsupportedFeature(
                f"Argo feature {key!r} at {path}.{key} is not supported by the local runner "
                f"(supported here: {', '.join(sorted(allowed))})"
            )
        _walk(sub, allowed[key], f"{path}.{key}")


def check_supported(manifest: dict[str, Any], reachable: set[str] | None = None) -> None:
    """Raise :class:`UnsupportedFeature` naming the first field the runner cannot execute.

    ``reachable``: the templates this run can reach (see :func:`reachable_templates`); the
    others (e.g. the multi-node branch of a one-node run) are not checked.
    """
    kind = manifest.get("kind")
    if kind not in KINDS:
        raise UnsupportedFeature(f"kind {kind!r}: the local runner executes {' or '.join(KINDS)}")
    spec = manifest.get("spec") or {}
    if reachable is not None:
        templates = spec.get("templates") or []
        spec = {**spec, "templates": [t for t in templates if t.get("name") in reachable]}
        manifest = {**manifest, "spec": spec}
    _walk(manifest, "manifest", "")
    for i, t in enumerate(spec.get("templates") or []):
        bodies = [k for k in ("container", "resource", "steps", "dag") if k in t]
        if len(bodies) != 1:
            raise UnsupportedFeature(
                f"templates[{i}] ({t.get('name')}): a template needs "
                "exactly one of container, resource, steps, dag"
            )


def reachable_templates(manifest: dict[str, Any], parameters: dict[str, str]) -> set[str]:
    """Templates reachable from the entrypoint and the exit handler, leaving out the steps
    whose ``when`` reads only workflow parameters and is false for these ``parameters``."""
    from burst.runner import expr
    from burst.runner.tags import TAG, substitute

    spec = manifest.get("spec") or {}
    templates = {t.get("name"): t for t in spec.get("templates") or []}
    variables = {f"workflow.parameters.{k}": v for k, v in parameters.items()}
    seen: set[str] = set()

    def static_false(when: str) -> bool:
        bodies = [mt.group(2) for mt in TAG.finditer(when)]
        if not bodies or any(mt.group(1) for mt in TAG.finditer(when)):
            return False
        if not all(b.startswith("workflow.parameters.") and b in variables for b in bodies):
            return False
        try:
            return not expr.evaluate_text(substitute(when, variables), {})
        except expr.ExprError:
            return False

    def walk(name: str) -> None:
        if name in seen or name not in templates:
            return
        seen.add(name)
        t = templates[name]
        calls = [s for g in t.get("steps") or [] for s in g or []]
        calls += list((t.get("dag") or {}).get("tasks") or [])
        for call in calls:
            if "when" in call and static_false(str(call["when"])):
                continue
            walk(str(call.get("template")))

    for root in (spec.get("entrypoint"), spec.get("onExit")):
        if root:
            walk(str(root))
    return seen
