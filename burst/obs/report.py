"""Assemble ``report.json`` from the step documents of a run directory."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from burst.errors import EXIT_FAILURE, EXIT_INFRA, EXIT_OK, BurstError
from burst.infra.terraform import count_state_resources
from burst.infra.workspace import state_file
from burst.runs import RunPaths, utcnow_iso
from burst.spec import load_spec


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
            attempts = s.get("attempt_details") or [{}]
            return {
                "step": s["name"],
                "exit_code": s["exit_code"],
                # the step's own last error line, else why its pod failed (not started, lost)
                "message": _last_error_line(paths.log(s["name"]))
                or attempts[-1].get("message")
                or None,
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


def store_view(paths: RunPaths) -> dict[str, Any] | None:
    """What the run's checkpoint store holds: committed checkpoints and attempt records
    (records left open are attempts that died). None when it cannot be read."""
    import logging

    from burst.checkpoint.catalog import list_checkpoints
    from burst.storage import open_store
    from burst.storage.location import run_store_url
    from burst.train.attempts import AttemptLog, settle_unclosed

    try:
        job = load_spec(paths.spec)
        url = run_store_url(job, paths.run_id)
        if url.startswith("file://") and not Path(url.removeprefix("file://")).exists():
            return {"store": url, "checkpoints": [], "attempts": []}
        store = open_store(url)
        refs = list_checkpoints(store)
        records = AttemptLog(paths.dir / "none.jsonl", store)._read_store(store)
    except (BurstError, OSError) as exc:
        logging.getLogger(__name__).warning("cannot read the run's checkpoint store: %s", exc)
        return None
    records.sort(key=lambda r: int(r.get("attempt") or 0))
    return {
        "store": url,
        "checkpoints": [{"step": r.step, "tier": r.tier} for r in refs],
        "attempts": settle_unclosed(records),
    }


def _attempt(a: dict[str, Any]) -> dict[str, Any]:
    """One train attempt: where it resumed, how it ended, what its emergency save was."""
    save = a.get("emergency_save") or {}
    return {
        "attempt": a.get("attempt"),
        "resumed_from": a.get("resumed_from"),
        "ended_at_step": a.get("ended_at_step"),
        "outcome": a.get("outcome"),
        "preempted": bool(a.get("preempted")),
        "killed": bool(a.get("killed")),
        "cost_usd": a.get("cost_usd"),
        "notice": (a.get("notice") or {}).get("source"),
        "emergency_save": save.get("tier") if save else None,
        "emergency_committed": save.get("committed") if save else None,
        # several ranks: how many, each one's checkpoint bytes and stall, notice to exit
        "world_size": a.get("world_size", 1),
        "ranks": a.get("ranks"),
        "notice_to_exit_s": a.get("notice_to_exit_s"),
    }


def _budget(paths: RunPaths) -> dict[str, Any] | None:
    try:
        job = load_spec(paths.spec)
    except BurstError:
        return None
    return {"max_usd": job.budget.max_usd, "max_hours": job.budget.max_hours}


def build_report(paths: RunPaths, steps: list[dict[str, Any]]) -> dict[str, Any]:
    train = _doc(paths, "train")
    teardown = _doc(paths, "teardown")
    provision = _doc(paths, "provision")
    plan = _doc(paths, "plan")
    state = state_file(paths.terraform)
    # the local state file when the run used the local stack; else what teardown counted in
    # the remote state (a run teardown never reached shows the local count, 0 for remote)
    remaining = (
        count_state_resources(state)
        if state.exists() or not teardown
        else int(teardown.get("resources_remaining") or 0)
    )
    failure = _failure(steps, paths, teardown)
    if failure is None and remaining:
        failure = {  # every step passed, yet something is left: the run has not succeeded
            "step": "teardown",
            "exit_code": EXIT_INFRA,
            "message": f"{remaining} resource(s) remain in {state}",
        }
    candidate = provision.get("candidate") or (plan.get("candidates") or [None])[0]
    # what is committed in the store is what counts; the train document is what its last
    # attempt said (absent when that attempt was killed or failed)
    held = store_view(paths) if paths.spec.exists() else None
    attempts = (held or {}).get("attempts") or train.get("attempts") or []
    final_step = train.get("final_step")
    checkpoints = train.get("checkpoints", 0)
    if held is not None:
        steps_held = [c["step"] for c in held["checkpoints"]]
        final_step = max(steps_held) if steps_held else None
        checkpoints = max(int(checkpoints or 0), len(steps_held))
    cost = sum(float(a.get("cost_usd") or 0) for a in attempts)
    if failure is None:
        exit_code = EXIT_OK
    else:  # a step lost before it could exit (killed, not started) has no code of its own
        exit_code = failure["exit_code"] if failure["exit_code"] is not None else EXIT_FAILURE
    ok = failure is None
    return {
        "run_id": paths.run_id,
        "status": "succeeded" if ok else "failed",
        "exit_code": exit_code,
        "finished_at": utcnow_iso(),
        "steps": steps,
        "failure": failure,
        "checkpoints": checkpoints,
        "final_step": final_step,
        "final_weights_sha256": train.get("final_weights_sha256"),
        "preemptions": sum(1 for a in attempts if a.get("preempted"))
        if held
        else train.get("preemptions", 0),
        "world_size": train.get("world_size", 1),
        "attempts": [_attempt(a) for a in attempts],
        "store": None if held is None else {"url": held["store"], "committed": held["checkpoints"]},
        "checkpoint_interval": train.get("checkpoint_interval"),
        "candidate": candidate,
        "provision_attempts": provision.get("attempts", []),
        "budget": _budget(paths),
        # USD by component, measured (the train step's rented hours at the plan's rate)
        "cost": {"compute": round(cost, 6)}
        if attempts
        else ({"compute": train["cost_usd"]} if train.get("cost_usd") is not None else {}),
        "pricing": {
            "usd_per_hour": train.get("usd_per_hour"),
            "expected_usd": (candidate or {}).get("expected_cost_usd"),
            "expected_hours": (candidate or {}).get("expected_hours"),
        },
        "terraform_state": str(teardown.get("terraform_state") or state),
        "resources_remaining": remaining,
        "teardown": {
            k: teardown.get(k)
            for k in (
                "checkpoint_sync",
                "destroyed",
                "attempts",
                "errors",
                "stale_locks_released",
                "leaks",
                "injected_failures",
            )
        }
        if teardown
        else None,
    }
