"""Assemble ``report.json`` (``burst.documents.RunReport``) from the step documents of a run
directory: the one report builder of every template (burst-train's; burst-regional's, whose
report adds its ``regional`` section: ``burst.obs.report_regional``)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any, TypeVar

from burst.documents import (
    PlanDocument,
    ProvisionDocument,
    RunReport,
    StepDocument,
    StepRecord,
    TeardownDocument,
    TrainAttempt,
    TrainDocument,
    parse_document,
    produce,
    read_document,
)
from burst.documents.base import DocumentError
from burst.documents.regional import RegionalMeasures
from burst.endings import BUDGET_OUTCOME, STOPPED_POD, Ending, decide, exit_code_of, stopped
from burst.errors import EXIT_FAILURE, EXIT_INFRA, BurstError
from burst.obs.report_regional import RegionalFacts, is_regional, regional_facts
from burst.runs import RunPaths, count_state_resources, state_file, utcnow_iso
from burst.spec import load_spec

log = logging.getLogger(__name__)
D = TypeVar("D", bound=StepDocument)


def _doc(paths: RunPaths, step: str, model: type[D]) -> D | None:
    """A step's document as its model; None when the step wrote none, or one of another
    shape (logged: the report then says what the other documents know)."""
    p = paths.doc(step)
    if not p.exists():
        return None
    try:
        return read_document(model, p)
    except DocumentError as exc:
        log.warning("%s: left out of the report", exc.one_line())
        return None


def _failure(
    steps: list[dict[str, Any]], paths: RunPaths, teardown: TeardownDocument | None
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
    injected = teardown.injected_failures if teardown is not None else []
    # the harness asked for failures; teardown survived them, the run still failed
    if teardown is not None and injected:
        return {
            "step": "teardown",
            "exit_code": 1,
            "message": f"failure injected in destroy attempt(s) {injected}; destroyed on "
            f"attempt {teardown.attempts}",
        }
    return None


def _ending(
    failure: dict[str, Any] | None,
    steps: list[dict[str, Any]],
    attempts: list[TrainAttempt],
    workflow_failed: str | None,
) -> Ending:
    """How the run ended (``burst.endings``), from facts: the workflow's message (a stop on
    request), the failing step's exit code and its last pod's message (a lost node), and
    train's last attempt record (a budget stop)."""
    if failure is None:
        return decide(failed=False)
    step = next((s for s in steps if s["name"] == failure["step"]), {})
    pods = step.get("attempt_details") or [{}]
    return decide(
        failed=True,
        stop=stopped(workflow_failed),
        step_code=failure["exit_code"],
        step_message=pods[-1].get("message"),
        budget=failure["step"] == "train"
        and bool(attempts)
        and attempts[-1].outcome == BUDGET_OUTCOME,
    )


def _stopped_train(steps: list[dict[str, Any]]) -> bool:
    """Train's last pod was stopped by the run's stop (the engine's message for a pod it
    stopped), so its last attempt's notice was that stop, not a preemption."""
    train = next((s for s in steps if s["name"] == "train"), {})
    pods = train.get("attempt_details") or [{}]
    return str(pods[-1].get("message") or "").startswith(STOPPED_POD)


def _last_error_line(log: Path) -> str | None:
    if not log.exists():
        return None
    from burst.obs.run_logs import error_text

    lines = [t for t in map(error_text, log.read_text(errors="replace").splitlines()) if t]
    return lines[-1] if lines else None


def store_view(paths: RunPaths) -> dict[str, Any] | None:
    """What the run's checkpoint store holds: committed checkpoints and attempt records
    (records left open are attempts that died). None when it cannot be read."""
    import logging

    from burst.attempt_records import read_store, settle_unclosed
    from burst.checkpoint.catalog import list_checkpoints
    from burst.storage import open_store
    from burst.storage.location import run_url

    try:
        job = load_spec(paths.spec)
        url = run_url(job.storage.checkpoint_uri, paths.run_id, paths.root)
        if url.startswith("file://") and not Path(url.removeprefix("file://")).exists():
            return {"store": url, "checkpoints": [], "attempts": []}
        store = open_store(url)
        refs = list_checkpoints(store)
        records = read_store(store)
    except (BurstError, OSError) as exc:
        logging.getLogger(__name__).warning("cannot read the run's checkpoint store: %s", exc)
        return None
    records.sort(key=lambda r: int(r.attempt or 0))
    return {
        "store": url,
        "checkpoints": [{"step": r.step, "tier": r.tier} for r in refs],
        "attempts": [r.to_json() for r in settle_unclosed(records)],
    }


def _attempt(a: TrainAttempt) -> dict[str, Any]:
    """One train attempt: where it resumed, how it ended, what its emergency save was."""
    save = a.emergency_save
    return {
        "attempt": a.attempt,
        "resumed_from": a.resumed_from,
        "restored_from_tier": a.restored_from_tier,
        "ended_at_step": a.ended_at_step,
        "outcome": a.outcome,
        "preempted": a.preempted,
        "killed": a.killed,
        "recovery_source": a.recovery_source,
        "cost_usd": a.cost_usd,
        "notice": a.notice.source if a.notice else None,
        "emergency_save": save.tier if save else None,
        "emergency_committed": save.committed if save else None,
        # several ranks: how many, each one's checkpoint bytes and stall, notice to exit
        "world_size": a.world_size or 1,
        "ranks": a.ranks,
        "notice_to_exit_s": a.notice_to_exit_s,
        "back_to_spot": _back_to_spot(a),
        "program": _program(a),
    }


#: what the report keeps of a back-to-spot decision (its terms: the attempt record)
SPOT_FIELDS = (
    "decision",
    "reason",
    "saving_usd",
    "move_cost_usd",
    "margin_usd",
    "candidate",
    "at_step",
    "probe",
    "probes",
)


def _back_to_spot(a: TrainAttempt) -> dict[str, Any] | None:
    """The move back to spot the attempt made, else the last probe's decision to stay."""
    made = a.back_to_spot or a.spot_probe
    if made is None:
        return None
    d = made.model_dump()
    return {k: d[k] for k in SPOT_FIELDS if k in d}


#: what the report keeps of a program attempt's record (the full record: docs/train.json)
PROGRAM_FIELDS = (
    "exit_code",
    "log_tail",
    "warnings",
    "saved_on_notice",
    "lost_seconds",
    "lost_gpu_seconds",
    "lost_steps",
    "not_committed",
)


def _program(a: TrainAttempt) -> dict[str, Any] | None:
    if a.program is None:
        return None
    rec = a.program.model_dump()
    out = {k: rec[k] for k in PROGRAM_FIELDS if rec.get(k) is not None}
    if "log_tail" in out:
        out["log_tail"] = list(out["log_tail"])[-5:]
    return out


def _budget(paths: RunPaths) -> dict[str, Any] | None:
    try:
        job = load_spec(paths.spec)
    except BurstError:
        return None
    return {"max_usd": job.budget.max_usd, "max_hours": job.budget.max_hours}


def _regional(
    paths: RunPaths, steps: list[dict[str, Any]], measures: RegionalMeasures | None
) -> RegionalFacts | None:
    """A regional-sync run's section (None for any other run)."""
    try:
        job = load_spec(paths.spec) if paths.spec.exists() else None
    except BurstError:
        return None
    if job is None or not is_regional(job):
        return None
    records = [parse_document(StepRecord, s, "a step record") for s in steps]
    return regional_facts(paths, job, records, measures)


def _regional_failure(
    facts: RegionalFacts, failure: dict[str, Any] | None
) -> dict[str, Any] | None:
    """A regional run also fails when a region it provisioned is not proven empty, and when
    its rounds did not all complete."""
    r = facts.section
    if facts.unproven:
        left = f"teardown of {', '.join(facts.unproven)} not proven (teardown-<region>.json)"
        if failure is None:
            return {"step": "teardown", "exit_code": EXIT_INFRA, "message": left}
        failure["message"] = f"{failure['message'] or 'failed'}; {left}"
    if failure is None and r.rounds_planned is not None and r.rounds_completed < r.rounds_planned:
        return {
            "step": "aggregate",
            "exit_code": EXIT_FAILURE,
            "message": f"{r.rounds_completed} of {r.rounds_planned} rounds completed",
        }
    return failure


def build_report(
    paths: RunPaths,
    steps: list[dict[str, Any]],
    workflow_failed: str | None = None,
    regional: RegionalMeasures | None = None,
) -> dict[str, Any]:
    """The run report as JSON, checked against its model (``RunReport``).
    ``workflow_failed``: the workflow's message when its phase is not Succeeded (a run the
    engine failed is never reported succeeded, whatever its steps say). A regional-sync run
    (its spec says so) gets its ``regional`` section, from its branches' documents and
    ``regional``: what the machine that ran it measured (the link log, the aggregator's
    store)."""
    facts = _regional(paths, steps, regional)
    train = _doc(paths, "train", TrainDocument)
    teardown = _doc(paths, "teardown", TeardownDocument)
    provision = _doc(paths, "provision", ProvisionDocument)
    plan = _doc(paths, "plan", PlanDocument)
    state = state_file(paths.terraform)
    # the local state file when the run used the local stack; else what teardown counted in
    # the remote state (a run teardown never reached shows the local count, 0 for remote)
    remaining = (
        count_state_resources(state)
        if state.exists() or teardown is None
        else teardown.resources_remaining
    )
    failure = _failure(steps, paths, teardown)
    if failure is None and remaining:
        failure = {  # every step passed, yet something is left: the run has not succeeded
            "step": "teardown",
            "exit_code": EXIT_INFRA,
            "message": f"{remaining} resource(s) remain in {state}",
        }
    if facts is not None:
        remaining += facts.resources_remaining
        failure = _regional_failure(facts, failure)
    if failure is None and workflow_failed is not None:
        failure = {"step": "workflow", "exit_code": EXIT_FAILURE, "message": workflow_failed}
    candidate = provision.candidate if provision is not None else None
    # (a regional run's regions each have their own: their branches' provision documents)
    if candidate is None and facts is None and plan is not None and plan.candidates:
        candidate = plan.candidates[0]
    # what is committed in the store is what counts; the train document is what its last
    # attempt said (absent when that attempt was killed or failed)
    held = store_view(paths) if paths.spec.exists() else None
    attempts: list[TrainAttempt] = list(train.attempts) if train else []
    if held is not None and held["attempts"]:
        attempts = [parse_document(TrainAttempt, a, "an attempt record") for a in held["attempts"]]
    final_step = train.final_step if train else None
    checkpoints = train.checkpoints if train else 0
    if held is not None:
        steps_held = [c["step"] for c in held["checkpoints"]]
        final_step = max(steps_held) if steps_held else None
        checkpoints = max(int(checkpoints or 0), len(steps_held))
    cost = sum(float(a.cost_usd or 0) for a in attempts)
    ending = _ending(failure, steps, attempts, workflow_failed)
    # a step lost before it could exit (killed, not started) has no code of its own; a step
    # stopped with the run (SIGTERM to `burst run`, like `argo stop`) may have exited 0 as it
    # was stopped: a run that did not succeed never exits 0
    exit_code = exit_code_of(ending, failure["exit_code"] if failure else None)
    summaries = [_attempt(a) for a in attempts]
    preemptions = (
        sum(1 for a in attempts if a.preempted) if held else (train.preemptions if train else 0)
    )
    if facts is not None and not attempts:  # the regions' worker and aggregator pods
        preemptions = facts.preemptions
    if ending is Ending.CANCELLED:
        if summaries and summaries[-1]["preempted"] and _stopped_train(steps):
            # the notice was the stop itself (the runner's SIGTERM, argo stop): no preemption
            summaries[-1].update(
                outcome=Ending.CANCELLED.value, preempted=False, recovery_source="cancel"
            )  # (burst.recovery.CANCEL; obs sits below recovery)
            preemptions = max(preemptions - 1, 0)
        if failure is not None and failure["step"] != "workflow" and workflow_failed:
            # what stopped it first, then what the step it stopped said as it went
            failure["message"] = f"{workflow_failed}; {failure['step']}: {failure['message']}"
    report: dict[str, Any] = {
        "run_id": paths.run_id,
        "status": ending.value,
        "exit_code": exit_code,
        "finished_at": utcnow_iso(),
        "steps": steps,
        "failure": failure,
        "checkpoints": checkpoints,
        "final_step": final_step,
        "final_weights_sha256": train.final_weights_sha256
        if train
        else (facts.final_weights_sha256 if facts else None),
        "preemptions": preemptions,
        "recovery_sources": dict(
            Counter(str(a["recovery_source"]) for a in summaries if a["recovery_source"])
        ),
        "world_size": (train.world_size if train else None) or 1,
        "attempts": summaries,
        "store": None if held is None else {"url": held["store"], "committed": held["checkpoints"]},
        "checkpoint_interval": train.checkpoint_interval if train else None,
        "candidate": candidate,
        "provision_attempts": provision.attempts if provision else [],
        "budget": _budget(paths),
        "reservation": provision.admission if provision else None,
        "settlement": teardown.settlement if teardown else None,
        # USD by component, measured (the train step's rented hours at the plan's rate)
        "cost": {"compute": round(cost, 6)}
        if attempts
        else ({"compute": train.cost_usd} if train and train.cost_usd is not None else {}),
        "pricing": {
            "usd_per_hour": train.usd_per_hour if train else None,
            "expected_usd": candidate.expected_cost_usd if candidate else None,
            "expected_hours": candidate.expected_hours if candidate else None,
        },
        "terraform_state": str((teardown.terraform_state if teardown else None) or state),
        "resources_remaining": remaining,
        "teardown": {
            # what teardown wrote (a field it did not write: null, as it always was)
            k: getattr(teardown, k) if k in teardown.model_fields_set else None
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
        if teardown is not None
        else None,
    }
    if facts is not None:
        report["regional"] = facts.section
    # each restart's split, in the report and as Prometheus gauges (metrics/recovery.prom);
    # neither fails the report
    from burst.obs.recovery_split import export_metrics, summary

    try:
        split = summary(paths.dir, steps)
    except (OSError, BurstError) as exc:
        log.warning("%s: no recovery split in the report (%s)", paths.dir, exc)
    else:
        if split["restarts"]:
            report["recovery_split"] = split
    export_metrics(paths.dir, paths.run_id, steps, paths.spec)
    return produce(RunReport, report).to_json()
