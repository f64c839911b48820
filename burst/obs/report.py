"""Assemble ``report.json`` from the step documents of a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from burst.errors import EXIT_OK
from burst.infra.terraform import count_state_resources
from burst.infra.workspace import state_file
from burst.runs import RunPaths, utcnow_iso


def _doc(paths: RunPaths, step: str) -> dict[str, Any]:
    p = paths.doc(step)
    if not p.exists():
        return {}
    try:
        doc = json.loads(p.read_text())
    except json.JSONDecodeError:
        return {}
    return doc if isinstance(doc, dict) else {}


def _failure(
    steps: list[dict[str, Any]], paths: RunPaths, teardown: dict[str, Any]
) -> dict[str, Any] | None:
    for s in steps:
        if s["status"] == "failed":
            return {
                "step": s["name"],
                "exit_code": s["exit_code"],
                "message": _last_error_line(paths.log(s["name"])),
            }
    injected = teardown.get("injected_failures") or []
    if injected:  # the harness asked for failures; teardown survived them, the run still failed
        return {
            "step": "teardown",
            "exit_code": 1,
            "message": f"failure injected in destroy attempt(s) {injected}; destroyed on "
            f"attempt {teardown.get('attempts')}",
        }
    return None


def _last_error_line(log: Path) -> str | None:
    if not log.exists():
        return None
    lines = [ln for ln in log.read_text(errors="replace").splitlines() if "error" in ln]
    return lines[-1].strip() if lines else None


def build_report(paths: RunPaths, steps: list[dict[str, Any]]) -> dict[str, Any]:
    train = _doc(paths, "train")
    teardown = _doc(paths, "teardown")
    provision = _doc(paths, "provision")
    plan = _doc(paths, "plan")
    state = state_file(paths.terraform)
    remaining = count_state_resources(state)
    failure = _failure(steps, paths, teardown)
    ok = failure is None and remaining == 0
    exit_code = EXIT_OK if ok else (failure["exit_code"] if failure else 4) or 1
    return {
        "run_id": paths.run_id,
        "status": "succeeded" if ok else "failed",
        "exit_code": exit_code,
        "finished_at": utcnow_iso(),
        "steps": steps,
        "failure": failure,
        "checkpoints": train.get("checkpoints", 0),
        "final_step": train.get("final_step"),
        "final_weights_sha256": train.get("final_weights_sha256"),
        "candidate": provision.get("candidate") or (plan.get("candidates") or [None])[0],
        "provision_attempts": provision.get("attempts", []),
        "terraform_state": str(state),
        "resources_remaining": remaining,
        "teardown": {
            k: teardown.get(k)
            for k in ("destroyed", "attempts", "errors", "leaks", "injected_failures")
        }
        if teardown
        else None,
    }
