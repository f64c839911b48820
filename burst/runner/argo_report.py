"""``burst report`` of a submitted run: the workflow the Argo server holds, made into the run
directory a local run leaves, then the one report builder (``burst.obs.report``).

Each step's document is the output parameter its pod wrote (``/tmp/outputs/<doc>.json``, the
step contract); the spec is the workflow's ``spec`` parameter; each step's record (status,
exit code, times, attempts) comes from its pod nodes, the last one's status counting (a
retried train: every try one attempt). The checkpoint store is read as for a local run (the
attempt records and committed checkpoints; unreadable: the report says what the documents
say). What a CI job's report step runs, with ``ARGO_SERVER`` set and no local run.
"""

from __future__ import annotations

import datetime as dt
import json
import logging
from pathlib import Path
from typing import Any

from burst import checkout
from burst.documents.report import WorkflowResult
from burst.endings import STOPPED_POD, stopped
from burst.errors import BadInputError
from burst.runner.argo import ArgoSettings, workflow_json
from burst.runner.local import load_manifest, pipeline_order
from burst.runs import RunPaths, check_run_id, write_json_atomic

log = logging.getLogger(__name__)

SUCCEEDED = "Succeeded"


def _module(template: dict[str, Any]) -> str | None:
    cmd = list((template.get("container") or {}).get("command") or [])
    if len(cmd) >= 3 and cmd[1] == "-m" and cmd[2].startswith("burst.steps."):
        return str(cmd[2]).removeprefix("burst.steps.").replace("_", "-")
    return None


def _templates(wf: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The workflow's templates by name: what Argo stored for it, else the checkout's
    compiled template it references."""
    st = wf.get("status") or {}
    stored = st.get("storedTemplates") or {}
    found = {t["name"]: t for t in stored.values() if isinstance(t, dict) and "name" in t}
    for t in (wf.get("spec") or {}).get("templates") or []:
        found.setdefault(t["name"], t)
    ref = ((wf.get("spec") or {}).get("workflowTemplateRef") or {}).get("name")
    if ref and (checkout.COMPILED / f"{ref}.yaml").is_file():
        manifest = load_manifest(checkout.COMPILED / f"{ref}.yaml")
        for t in manifest["spec"].get("templates") or []:
            found.setdefault(t["name"], t)
    return found


def _seconds(a: str | None, b: str | None) -> float:
    if not a or not b:
        return 0.0
    start = dt.datetime.fromisoformat(a.replace("Z", "+00:00"))
    end = dt.datetime.fromisoformat(b.replace("Z", "+00:00"))
    return max((end - start).total_seconds(), 0.0)


def _code(node: dict[str, Any]) -> int | None:
    raw = (node.get("outputs") or {}).get("exitCode")
    try:
        return int(raw) if raw is not None else None
    except ValueError:
        return None


def _document(node: dict[str, Any], template: dict[str, Any]) -> dict[str, Any] | None:
    """The step's document: its output parameter read from /tmp/outputs/<doc>.json."""
    declared = {
        p["name"]
        for p in (template.get("outputs") or {}).get("parameters") or []
        if str((p.get("valueFrom") or {}).get("path", "")).startswith("/tmp/outputs/")
    }
    for p in (node.get("outputs") or {}).get("parameters") or []:
        if p.get("name") in declared and p.get("value"):
            try:
                doc = json.loads(p["value"])
            except ValueError:
                log.warning("step %s: its output %s is not JSON", node.get("name"), p["name"])
                continue
            if isinstance(doc, dict):
                return doc
    return None


def _pod(node: dict[str, Any], stopped_with_run: bool) -> dict[str, Any]:
    """One pod of a step as the report records it (``PodAttempt``): the facts the one report
    builder decides with, as the local runner gives them: its exit code, phase and message
    (a pod lost with its node: "pod deleted"); the last pod of a step that had not succeeded
    when the workflow was stopped on request was stopped by that stop (``STOPPED_POD``), so
    train's last attempt, whose notice was the stop, is a cancel, not a preemption."""
    message = str(node.get("message") or "")
    if stopped_with_run and node.get("phase") != SUCCEEDED:
        message = f"{STOPPED_POD} ({message})" if message else STOPPED_POD
    return {
        "exit_code": _code(node),
        "phase": node.get("phase"),
        "message": message or None,
        "seconds": _seconds(node.get("startedAt"), node.get("finishedAt")),
        "started_at": node.get("startedAt"),
    }


def materialize(name: str, settings: ArgoSettings, root: Path) -> RunPaths:
    """Write the submitted run ``name`` as a run directory under ``root``, with its
    report.json built by the one report builder; its paths."""
    from burst.obs.report import build_report

    check_run_id(name)
    wf = workflow_json(name, settings)
    templates = _templates(wf)
    st = wf.get("status") or {}
    phase = str(st.get("phase") or "Pending")
    if phase in ("Pending", "Running"):
        raise BadInputError(
            f"workflow {name} is {phase.lower()}: its report is made when it ends "
            f"(burst status {name} --follow)"
        )
    paths = RunPaths(root, name).create()
    params = {
        p.get("name"): p.get("value")
        for p in ((wf.get("spec") or {}).get("arguments") or {}).get("parameters") or []
    }
    if params.get("spec"):
        paths.spec.write_text(str(params["spec"]), encoding="utf-8")
    pods = sorted(
        (n for n in (st.get("nodes") or {}).values() if n.get("type") == "Pod"),
        key=lambda n: n.get("startedAt") or "",
    )
    grouped: dict[str, list[dict[str, Any]]] = {}
    for node in pods:
        template = templates.get(node.get("templateName") or "") or {}
        step = _module(template)
        if step is None:
            continue  # a helper container (give-up, a resource template's executor)
        grouped.setdefault(step, []).append(node)
        doc = _document(node, template)
        if doc is not None:
            write_json_atomic(paths.doc(step), doc)
    steps: list[dict[str, Any]] = []
    stop = stopped(st.get("message"))
    for step, nodes in grouped.items():
        last = nodes[-1]
        steps.append(
            {
                "name": step,
                "status": "succeeded" if last.get("phase") == SUCCEEDED else "failed",
                "seconds": sum(_seconds(n.get("startedAt"), n.get("finishedAt")) for n in nodes),
                "exit_code": _code(last),
                "attempts": len(nodes),
                "started_at": nodes[0].get("startedAt"),
                "ended_at": last.get("finishedAt"),
                "attempt_details": [_pod(n, stop and n is last) for n in nodes],
            }
        )
    ref = ((wf.get("spec") or {}).get("workflowTemplateRef") or {}).get("name")
    if ref and (checkout.COMPILED / f"{ref}.yaml").is_file():
        for step in pipeline_order(load_manifest(checkout.COMPILED / f"{ref}.yaml")):
            if step not in grouped:
                steps.append(
                    {"name": step, "status": "skipped", "seconds": 0.0, "exit_code": None,
                     "attempts": 0}
                )  # fmt: skip
    failed = None if phase == SUCCEEDED else (st.get("message") or phase)
    report = build_report(paths, steps, failed)
    _agree_with_status(report, phase, st)
    report["workflow"] = WorkflowResult(
        template=str(ref or ""), phase=phase, message=st.get("message") or "",
        exit_handler_phase=None,
    ).to_json()  # fmt: skip
    write_json_atomic(paths.report, report)
    return paths


def _agree_with_status(report: dict[str, Any], phase: str, st: dict[str, Any]) -> None:
    """The report's ending is the one `burst status` and `burst runs --argo` give the
    workflow (``burst.endings.argo_ending``, from its phase, message and pod nodes): a pod lost
    with its node (no exit code) is lost, train's exit 3 a budget stop, even where the
    checkpoint store, which holds train's attempt records, cannot be read from here."""
    from burst.endings import argo_ending, exit_code_of

    nodes = sorted(
        (
            {
                "name": n.get("displayName") or n.get("name"),
                "phase": n.get("phase"),
                "exit_code": _code(n),
                "message": n.get("message") or "",
                "started_at": n.get("startedAt") or "",
            }
            for n in (st.get("nodes") or {}).values()
            if n.get("type") in ("Pod", "Retry")
        ),
        key=lambda n: str(n["started_at"]),
    )
    ending = argo_ending(phase, st.get("message"), nodes)
    if ending is None or report["status"] == ending.value:
        return
    failure = report.get("failure") or {}
    log.info(
        "%s: %s by its workflow's nodes (burst status says the same)", report["run_id"], ending
    )
    report["status"] = ending.value
    report["exit_code"] = exit_code_of(ending, failure.get("exit_code"))
