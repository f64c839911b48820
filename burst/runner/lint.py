"""A semantic lint of Argo manifests: what the JSON Schema cannot see.

* the entrypoint and every template a step or task calls exist;
* a Steps-based exit handler exists (``spec.onExit``) in every WorkflowTemplate and Workflow
  that holds its templates, unless it declares it needs none (annotation
  ``burst.dev/exit-handler: none``: it provisions nothing, as the reaper), which is refused
  where a template runs the provisioning step (``burst.steps.provision``: every template
  rents through it, a regional run's regions too);
* a spec that calls a WorkflowTemplate (``workflowTemplateRef``: a run, the reaper's
  CronWorkflow) sets nothing but what Argo's controller lets such a Workflow override under
  ``templateReferencing: Strict`` or ``Secure`` (anything else ends it in Error there); given
  the WorkflowTemplates, the one it names exists and declares every parameter it passes;
* every ``{{...}}`` tag names something declared where it is used: workflow parameters,
  the template's inputs, earlier steps and their declared outputs, ``retries`` only under a
  retry strategy; a step passes exactly the parameters its template declares;
* ``when`` operands that may be strings are quoted (govaluate reads a bare word as a variable);
* retry expressions and ``{{=...}}`` expressions parse, and read only what exists;
* no step reads the exit code or the outputs of an earlier step that continues on Error:
  an Error (a lost node, "pod deleted", a pod that never started) leaves neither, and from
  Argo v3.7.11 / v4.0.2 a missing variable requeues the reading step forever (the workflow
  hangs until its deadline, holding its semaphore and its nodes). Read ``.status``, or
  ``get(steps.X, 'exitCode') ?? '-1'`` in an expression (a guard every version accepts).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from typing import Any

from burst.runner import expr
from burst.runner.tags import tags

WORKFLOW_VARS = {
    "name",
    "namespace",
    "uid",
    "serviceAccountName",
    "status",
    "failures",
    "duration",
    "creationTimestamp",
    "mainEntrypoint",
}
LAST_RETRY_FIELDS = {"exitCode", "status", "duration", "message"}
STEP_FIELDS = {"exitCode", "status", "startedAt", "finishedAt", "id", "ip", "hostNodeName"}
_NUMERIC = re.compile(r"^-?\d+(\.\d+)?$")
#: A WorkflowTemplate or Workflow with this annotation, value ``none``, needs no exit handler:
#: nothing it runs provisions (burst/pipelines/burst_reaper.py).
NO_EXIT_HANDLER_ANNOTATION = "burst.dev/exit-handler"
#: What a provisioning step runs (the step contract: ``python -m burst.steps.<name>``); the exit
#: handler's teardown is what undoes it.
_PROVISIONS = re.compile(r"\bsteps\.\w*provision\b")
#: The WorkflowSpec fields a Workflow that calls a WorkflowTemplate may set when the controller
#: is in reference mode (argo-workflows v4.0.5 workflow/util/merge.go
#: allowedUserOverrideFields, checked by ValidateUserOverrides in operator.go setExecWorkflow);
#: a Workflow setting another ends in Error at its first reconciliation.
REFERENCE_FIELDS = frozenset(
    {
        "arguments",
        "entrypoint",
        "shutdown",
        "suspend",
        "activeDeadlineSeconds",
        "priority",
        "ttlStrategy",
        "podGC",
        "volumeClaimGC",
        "archiveLogs",
        "workflowMetadata",
        "workflowTemplateRef",
        "metrics",
        "artifactGC",
    }
)


def workflow_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    spec = manifest.get("spec") or {}
    if manifest.get("kind") == "CronWorkflow":
        spec = spec.get("workflowSpec") or {}
    return spec if isinstance(spec, dict) else {}


def _params(block: dict[str, Any] | None) -> list[dict[str, Any]]:
    return list(((block or {}).get("parameters")) or [])


def _provisioning_templates(spec: dict[str, Any]) -> list[str]:
    """The templates whose commands, scripts or resource manifests run a provisioning step."""
    out = []
    for t in spec.get("templates") or []:
        containers = [
            t.get("container"),
            t.get("script"),
            *(t.get("initContainers") or []),
            *(t.get("sidecars") or []),
            *((t.get("containerSet") or {}).get("containers") or []),
        ]
        texts = [str((t.get("resource") or {}).get("manifest") or "")]
        for c in containers:
            if isinstance(c, dict):
                texts += [str(x) for x in (c.get("command") or []) + (c.get("args") or [])]
                texts.append(str(c.get("source") or ""))
        if any(_PROVISIONS.search(text) for text in texts):
            out.append(str(t.get("name")))
    return out


class _Linter:
    def __init__(
        self,
        manifest: dict[str, Any],
        require_exit_handler: bool | None,
        workflow_templates: dict[str, dict[str, Any]] | None,
    ) -> None:
        self.manifest = manifest
        self.spec = workflow_spec(manifest)
        annotations = (manifest.get("metadata") or {}).get("annotations") or {}
        self.no_exit_handler = annotations.get(NO_EXIT_HANDLER_ANNOTATION)
        if require_exit_handler is None:
            require_exit_handler = (
                manifest.get("kind") in ("WorkflowTemplate", "Workflow")
                and self.no_exit_handler != "none"
            )
        self.require_exit_handler = require_exit_handler
        self.workflow_templates = workflow_templates
        self.problems: list[str] = []
        self.templates = {t.get("name"): t for t in self.spec.get("templates") or []}
        self.wf_params = {p.get("name"): p for p in _params(self.spec.get("arguments"))}

    def add(self, where: str, problem: str) -> None:
        self.problems.append(f"{where}: {problem}")

    # -- structure ---------------------------------------------------------------------
    def structure(self) -> None:
        if "workflowTemplateRef" in self.spec:
            self.reference()
            return
        self.exit_handler_declaration()
        entry = self.spec.get("entrypoint")
        if not entry:
            self.add("spec", "no entrypoint")
        elif entry not in self.templates:
            self.add("spec.entrypoint", f"template {entry!r} does not exist")
        on_exit = self.spec.get("onExit")
        if not on_exit:
            if self.require_exit_handler:
                self.add(
                    "spec",
                    "no exit handler (spec.onExit): teardown would not run when a step fails",
                )
        elif on_exit not in self.templates:
            self.add("spec.onExit", f"template {on_exit!r} does not exist")
        elif "steps" not in self.templates[on_exit]:
            self.add(
                "spec.onExit",
                f"exit handler {on_exit!r} must be a Steps template "
                "(DAG exit handlers are not run reliably under `argo stop`)",
            )

    def exit_handler_declaration(self) -> None:
        """``burst.dev/exit-handler: none`` only where nothing provisions and no handler is set."""
        if self.no_exit_handler is None:
            return
        where = f"metadata.annotations.{NO_EXIT_HANDLER_ANNOTATION}"
        if self.no_exit_handler != "none":
            self.add(where, f"must be 'none' (it is {self.no_exit_handler!r})")
            return
        provisioning = _provisioning_templates(self.spec)
        if provisioning:
            self.add(
                where,
                f"says no exit handler is needed, but {provisioning} provision: teardown must "
                "run when a step fails (spec.onExit)",
            )
        if self.spec.get("onExit"):
            self.add(where, "says no exit handler is needed, but spec.onExit is set")

    def reference(self) -> None:
        """A spec that calls a WorkflowTemplate: only what reference mode lets it set, and,
        when the WorkflowTemplates are known, a template that exists and takes its arguments."""
        ref = self.spec.get("workflowTemplateRef")
        name = ref.get("name") if isinstance(ref, dict) else None
        if not name:
            self.add("spec.workflowTemplateRef", "names no WorkflowTemplate")
        extra = sorted(k for k in self.spec if k not in REFERENCE_FIELDS)
        if extra:
            self.add(
                "spec",
                f"calls a WorkflowTemplate and also sets {extra}: Argo's controller with "
                "templateReferencing Strict or Secure ends such a Workflow in Error; they "
                "belong in the WorkflowTemplate",
            )
        if self.workflow_templates is None or not name or (ref or {}).get("clusterScope"):
            return
        target = self.workflow_templates.get(name)
        if target is None:
            self.add(
                "spec.workflowTemplateRef",
                f"WorkflowTemplate {name!r} does not exist "
                f"(there are {sorted(self.workflow_templates)})",
            )
            return
        tspec = workflow_spec(target)
        declared = {p.get("name"): p for p in _params(tspec.get("arguments"))}
        for pname in self.wf_params:
            if pname not in declared:
                self.add(
                    "spec.arguments",
                    f"passes parameter {pname!r} that WorkflowTemplate {name!r} does not "
                    "declare: nothing reads it (a misspelt name leaves the default in force)",
                )
        for pname, p in declared.items():
            if pname not in self.wf_params and "value" not in p and "valueFrom" not in p:
                self.add(
                    "spec.arguments",
                    f"does not pass parameter {pname!r} that WorkflowTemplate {name!r} requires",
                )
        entry = self.spec.get("entrypoint")
        if entry and entry not in {t.get("name") for t in tspec.get("templates") or []}:
            self.add(
                "spec.entrypoint",
                f"template {entry!r} does not exist in WorkflowTemplate {name!r}",
            )

    # -- references --------------------------------------------------------------------
    def _check_ref(self, where: str, path: tuple[str, ...], scope: dict[str, Any]) -> None:
        head = path[0]
        if head == "workflow":
            if len(path) >= 3 and path[1] == "parameters":
                if path[2] not in self.wf_params:
                    self.add(
                        where, f"workflow parameter {path[2]!r} is not declared in spec.arguments"
                    )
            elif len(path) < 2 or path[1] not in WORKFLOW_VARS | {"parameters"}:
                self.add(where, f"unknown workflow variable {'.'.join(path)!r}")
        elif head == "inputs":
            if len(path) < 3 or path[1] != "parameters":
                self.add(where, f"unsupported reference {'.'.join(path)!r}")
            elif path[2] not in scope["inputs"]:
                self.add(
                    where,
                    f"input parameter {path[2]!r} is not declared by template "
                    f"{scope['template']!r}",
                )
        elif head in ("steps", "tasks"):
            if len(path) == 2 and path[1] in (scope.get(head) or {}):
                return  # the step's map, e.g. get(steps.train, 'exitCode') ?? '-1'
            if len(path) < 3:
                self.add(where, f"incomplete reference {'.'.join(path)!r}")
                return
            siblings = scope.get(head) or {}
            if (
                path[1] in (scope.get("errors_continue") or set())
                and len(path) >= 3
                and path[2] in ("exitCode", "outputs")
            ):
                self.add(
                    where,
                    f"{'.'.join(path)!r} is missing when {head[:-1]} {path[1]!r} ends in Error "
                    "(node lost, pod deleted), which continueOn.error lets the run go past: "
                    "Argo >= v3.7.11 / v4.0.2 requeues this step forever; read "
                    f"{head}.{path[1]}.status",
                )
            if path[1] not in siblings:
                self.add(
                    where,
                    f"{head[:-1]} {path[1]!r} is not an earlier {head[:-1]} "
                    f"of template {scope['template']!r}",
                )
                return
            rest = path[2:]
            target = self.templates.get(siblings[path[1]]) or {}
            if rest[0] == "outputs":
                outs = {p.get("name") for p in _params(target.get("outputs"))}
                # an expanded step's outputs.parameters: the JSON list of its items' outputs
                # (operator.go processAggregateNodeOutputs)
                aggregate = path[1] in (scope.get("expanded") or set()) and rest[1:] == (
                    "parameters",
                )
                if not aggregate and (
                    len(rest) < 3 or rest[1] != "parameters" or rest[2] not in outs
                ):
                    self.add(
                        where,
                        f"{'.'.join(path)!r}: template {siblings[path[1]]!r} "
                        f"declares no such output (it has {sorted(map(str, outs))})",
                    )
            elif rest[0] not in STEP_FIELDS:
                self.add(where, f"unknown field {'.'.join(path)!r}")
        elif head == "retries":
            if not scope.get("retries"):
                self.add(where, "{{retries}} used in a template without retryStrategy")
        elif head == "lastRetry":
            if not scope.get("lastRetry") or len(path) != 2 or path[1] not in LAST_RETRY_FIELDS:
                self.add(
                    where,
                    f"{'.'.join(path)!r} is only valid as lastRetry."
                    f"{{{'|'.join(sorted(LAST_RETRY_FIELDS))}}} in a retry expression",
                )
        elif head == "item":
            # a loop's item: only in the arguments of a step expanded by withParam/withItems
            if not scope.get("item"):
                self.add(where, "{{item}} used outside a withParam/withItems step")
        elif head not in expr.FUNCTIONS:
            self.add(where, f"unknown variable {'.'.join(path)!r}")

    def _check_text(self, where: str, text: str, scope: dict[str, Any]) -> None:
        for is_expr, body in tags(text):
            if is_expr:
                self._check_expr(where, body, scope)
            else:
                self._check_ref(where, tuple(_split_plain(body)), scope)

    def _check_expr(self, where: str, text: str, scope: dict[str, Any]) -> None:
        try:
            node = expr.parse(text)
        except expr.ExprError as exc:
            self.add(where, f"expression does not parse: {exc.message}")
            return
        for path in expr.references(node):
            self._check_ref(where, path, scope)

    def _walk_strings(self, where: str, value: Any, scope: dict[str, Any]) -> None:
        if isinstance(value, str):
            self._check_text(where, value, scope)
        elif isinstance(value, list):
            for i, v in enumerate(value):
                self._walk_strings(f"{where}[{i}]", v, scope)
        elif isinstance(value, dict):
            for k, v in value.items():
                self._walk_strings(f"{where}.{k}", v, scope)

    def _check_when(self, where: str, when: str, scope: dict[str, Any]) -> None:
        self._check_text(where, when, scope)
        for mt in re.finditer(r"\{\{\s*(=?)\s*(.*?)\s*\}\}", when):
            if mt.group(1):
                continue  # an expression yields a typed value
            body = mt.group(2)
            if body.endswith(".exitCode") or body == "retries":
                continue
            param = body.split(".")
            if param[:2] == ["workflow", "parameters"] and len(param) == 3:
                default = str((self.wf_params.get(param[2]) or {}).get("value", ""))
                if _NUMERIC.match(default):
                    continue
            before = when[mt.start() - 1] if mt.start() > 0 else ""
            after = when[mt.end()] if mt.end() < len(when) else ""
            if before not in "'\"" or before == "" or after != before:
                self.add(
                    where,
                    f"operand {{{{{body}}}}} must be quoted: govaluate reads an "
                    "unquoted word as a variable",
                )
        substituted = re.sub(r"\{\{.*?\}\}", "0", when)
        try:
            expr.parse(substituted)
        except expr.ExprError as exc:
            self.add(where, f"condition does not parse: {exc.message}")

    def _check_call(self, where: str, call: dict[str, Any], scope: dict[str, Any]) -> None:
        name = call.get("template")
        if name not in self.templates:
            self.add(where, f"template {name!r} does not exist")
            return
        target = self.templates[name]
        declared = {p.get("name"): p for p in _params(target.get("inputs"))}
        passed = [p.get("name") for p in _params(call.get("arguments"))]
        for p in passed:
            if p not in declared:
                self.add(where, f"passes parameter {p!r} that template {name!r} does not declare")
        for pname, p in declared.items():
            if pname not in passed and "value" not in p and "default" not in p:
                self.add(
                    where, f"does not pass parameter {pname!r} that template {name!r} requires"
                )
        if "withParam" in call:
            self._walk_strings(f"{where}.withParam", call["withParam"], scope)
        looped = {**scope, "item": "withParam" in call or "withItems" in call}
        self._walk_strings(f"{where}.arguments", call.get("arguments") or {}, looped)
        if "when" in call:  # evaluated per item (steps.go executeStepGroup)
            self._check_when(f"{where}.when", str(call["when"]), looped)

    def templates_(self) -> None:
        for i, t in enumerate(self.spec.get("templates") or []):
            name = t.get("name")
            where = f"templates[{i}] ({name})"
            scope: dict[str, Any] = {
                "template": name,
                "inputs": {p.get("name") for p in _params(t.get("inputs"))},
                "retries": "retryStrategy" in t,
            }
            rs = t.get("retryStrategy") or {}
            if "expression" in rs:
                self._check_expr(
                    f"{where}.retryStrategy.expression",
                    str(rs["expression"]),
                    {**scope, "lastRetry": True, "inputs": set()},
                )
            for key in (
                "container",
                "activeDeadlineSeconds",
                "podSpecPatch",
                "nodeSelector",
                "inputs",
                "retryStrategy",
                "metadata",
            ):
                if key in t and key != "retryStrategy":
                    self._walk_strings(f"{where}.{key}", t[key], scope)
            if "limit" in rs:
                self._walk_strings(f"{where}.retryStrategy.limit", rs["limit"], scope)
            if "steps" in t:
                seen: dict[str, str] = {}
                erring: set[str] = set()
                expanded: set[str] = set()
                for g, group in enumerate(t.get("steps") or []):
                    for j, step in enumerate(group or []):
                        swhere = f"{where}.steps[{g}][{j}] ({step.get('name')})"
                        self._check_call(
                            swhere,
                            step,
                            {
                                **scope,
                                "steps": dict(seen),
                                "errors_continue": set(erring),
                                "expanded": set(expanded),
                            },
                        )
                    for step in group or []:
                        seen[step.get("name")] = step.get("template")
                        if "withParam" in step or "withItems" in step:
                            expanded.add(step.get("name"))
                        if (step.get("continueOn") or {}).get("error"):
                            erring.add(step.get("name"))
            if "dag" in t:
                tasks = {
                    task.get("name"): task.get("template")
                    for task in (t.get("dag") or {}).get("tasks") or []
                }
                for j, task in enumerate((t.get("dag") or {}).get("tasks") or []):
                    twhere = f"{where}.dag.tasks[{j}] ({task.get('name')})"
                    for dep in task.get("dependencies") or []:
                        if dep not in tasks:
                            self.add(twhere, f"depends on unknown task {dep!r}")
                    self._check_call(twhere, task, {**scope, "tasks": tasks})

    def metadata(self) -> None:
        labels_from = ((self.spec.get("workflowMetadata") or {}).get("labelsFrom")) or {}
        top: dict[str, Any] = {"template": "", "inputs": set()}
        for key, v in labels_from.items():
            self._check_expr(
                f"spec.workflowMetadata.labelsFrom.{key}", str((v or {}).get("expression", "")), top
            )
        for key in ("podMetadata", "synchronization"):
            if key in self.spec:
                self._walk_strings(f"spec.{key}", self.spec[key], {"template": "", "inputs": set()})


def _split_plain(body: str) -> list[str]:
    """``steps.a.outputs.parameters.x`` -> parts; parameter names may hold dashes only."""
    return body.split(".")


def lint(
    manifest: dict[str, Any],
    *,
    require_exit_handler: bool | None = None,
    workflow_templates: Iterable[dict[str, Any]] | None = None,
) -> list[str]:
    """Problems found in ``manifest`` (empty when it is sound), one line each.

    ``require_exit_handler``: by default, a WorkflowTemplate or Workflow that holds its
    templates needs one unless it is annotated ``burst.dev/exit-handler: none``.
    ``workflow_templates``: the WorkflowTemplates a ``workflowTemplateRef`` may name (the other
    manifests are ignored); without them, a reference is checked for its fields only."""
    templates = None
    if workflow_templates is not None:
        templates = {
            str((t.get("metadata") or {}).get("name")): t
            for t in workflow_templates
            if t.get("kind") == "WorkflowTemplate"
        }
    linter = _Linter(manifest, require_exit_handler, templates)
    linter.structure()
    linter.templates_()
    linter.metadata()
    return linter.problems
