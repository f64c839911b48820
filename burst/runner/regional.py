"""``burst run`` of a ``strategy: regional-sync`` spec: the compiled ``burst-regional``
template, executed by the local runner as it executes ``burst-train``.

:class:`burst.runner.local.LocalRunner` runs ``burst/pipelines/compiled/burst-regional.yaml``
(preflight, plan, verify-image; every region's stack at once; then every region's branch at
once: its worker and, in the aggregation region, the aggregator, as parallel steps; teardown of
every region in the exit handler, whatever happened), with :class:`burst.runner.regions.
RegionSites` giving each pod of a region what that region would have (its store and keys, the
link emulator). Restarts of a worker or the aggregator are the template's ``retryStrategy``
(exit 75, exit 4, a lost node; ``restarts`` times). The report (``report.json``, a
:class:`burst.documents.regional.RegionalReport`) is assembled from the engine's nodes, the
aggregator's result and the link log; the documents of each region's steps are copied beside
it (``provision-<region>.json``, ``teardown-<region>.json``, ``<role>-<region>.config.json``),
and every step's start and end, in order, in ``events.jsonl`` (as for every local run).

The local run's data: the example entrypoint's dataset split over the regions in proportion
to ``data.shards`` (``regions.write_shards``), in each region's store.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.documents.regional import LinkTotals, RegionalReport, RegionalRound, RegionAttempts
from burst.documents.report import ContainerRun, WorkflowResult
from burst.errors import EXIT_BAD_INPUT, EXIT_INFRA, EXIT_REFUSED
from burst.plan.regional import first_local_steps_for, local_steps_for
from burst.regional.runtime import regional, rounds_for
from burst.regional.stores import read_link_log
from burst.runner.containers import ContainerLauncher
from burst.runner.engine import SUCCEEDED, PodNode, WorkflowEngine
from burst.runner.engine import WorkflowResult as EngineResult
from burst.runner.local import REGIONAL_TEMPLATE, LocalRunner, RunOptions
from burst.runner.regions import RegionSites, StoreMode, objects_dir
from burst.runs import run_paths
from burst.spec import BurstJob
from burst.storage.local import LocalStore

log = logging.getLogger(__name__)

PROVISION, WORKER, AGGREGATOR, TEARDOWN = (
    "regional-provision",
    "regional-worker",
    "regional-aggregator",
    "teardown",
)
ROLES = {WORKER: "worker", AGGREGATOR: "aggregator"}


@dataclass
class RegionalOptions:
    time_scale: float = 1.0  # emulated link seconds are slept times this
    stores: StoreMode = "s3"  # one S3 server a region (own keys); "dir": directory stores
    faults: dict[str, dict[str, str]] = field(default_factory=dict)  # "role:region" -> points
    wait_limit_s: float = 600.0
    on_event: Callable[[str, str, dict[str, Any]], None] | None = None
    template: Path = REGIONAL_TEMPLATE
    #: container mode (``burst run --containers``) and its images (workflow parameters)
    containers: ContainerLauncher | None = None
    parameters: dict[str, str] = field(default_factory=dict)


def run_regional(
    job: BurstJob, spec_path: Path, run_dir: Path, run_id: str, opts: RegionalOptions
) -> RegionalReport:
    rs = regional(job)
    regions = list(rs.regions or [])
    agg = str(rs.aggregation_region)
    local_steps, basis = local_steps_for(job)
    emit = opts.on_event or (lambda *_: None)
    started = time.monotonic()
    paths = run_paths(run_id, run_dir.parent)
    sites = RegionSites(
        job,
        paths.dir,
        regions,
        agg,
        stores=opts.stores,
        time_scale=opts.time_scale,
        wait_limit_s=opts.wait_limit_s,
        faults=opts.faults,
    )

    def on_event(step: str, status: str, info: dict[str, Any]) -> None:
        # (the runner records the run's timeline, events.jsonl: burst.runner.local)
        if step == "plan":  # the plan's H, as the planner chose it
            if status == "succeeded":
                emit("plan", status, {"local_steps": local_steps, "basis": basis})
            return
        emit(step, status, info)

    options = RunOptions(
        template=opts.template,
        prepare_pod=sites.prepare_pod,
        containers=opts.containers,
        parameters=dict(opts.parameters),
    )
    runner = LocalRunner(paths, spec_path, options, on_event)

    def finish(engine: WorkflowEngine, result: EngineResult) -> RegionalReport:
        sites.close()  # every store stopped, every key removed, before the report is read
        return _report(job, paths.dir, run_id, sites, engine, result, started, opts)

    paths.dir.mkdir(parents=True, exist_ok=True)
    try:
        sites.start()
        return runner.execute(finish)
    finally:
        sites.close()


def _region(node: PodNode) -> str:
    return node.inputs.get("region", "")


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    for ln in reversed(lines):  # the step's own one-line error, if it wrote one
        if ln.startswith("burst "):
            return ln[:300]
    return lines[-1][:300] if lines else "(empty log)"


def _one_line(tail: str, step: str) -> str:
    """The step's own error line without its ``burst <step>:`` prefix."""
    for prefix in (f"burst {step}: ", f"burst regional {step}: "):
        if tail.startswith(prefix):
            return tail[len(prefix) :].removeprefix("error: ")
    return tail


def _failure(nodes: list[PodNode], run_dir: Path, message: str) -> tuple[str, int]:
    """The first node that failed the run (one line naming it) and the run's exit code."""
    for n in nodes:
        if n.exit_handler or n.phase == SUCCEEDED or not n.attempts:
            continue
        rc = n.exit_code
        code = rc if rc is not None and rc > 0 else EXIT_INFRA
        tail = _last_line(run_dir / "logs" / f"{n.key}.log")
        shown = "-1 (pod deleted)" if rc is None else str(rc)
        if n.template == PROVISION:
            return f"provision: {_region(n)}: {_one_line(tail, PROVISION)}", code
        if n.template in ROLES:
            return f"{ROLES[n.template]}:{_region(n)} exited {shown}: {tail}", code
        return f"{n.step}: {_one_line(tail, n.step)}", code
    return message or "the workflow failed", EXIT_INFRA


def _copy_documents(nodes: list[PodNode], run_dir: Path) -> None:
    """Each region's step documents beside the report, by region."""
    for n in nodes:
        if n.template == "preflight" and "decision" in n.outputs:  # the decision record
            (run_dir / "preflight.json").write_text(n.outputs["decision"])
        region = _region(n)
        if not region:
            continue
        in_branch = n.key.endswith(".provision")  # regions(i:r).provision, not stacks(i:r)
        if n.template == PROVISION and "infra" in n.outputs and not in_branch:
            (run_dir / f"provision-{region}.json").write_text(n.outputs["infra"])
        if n.template == PROVISION and in_branch:
            for role in ("worker", "aggregator"):
                cfg = n.outputs.get(f"{role}-config")
                if cfg:
                    (run_dir / f"{role}-{region}.config.json").write_text(cfg)
        if n.template == TEARDOWN and "teardown" in n.outputs:
            (run_dir / f"teardown-{region}.json").write_text(n.outputs["teardown"])


def _torn_down(nodes: list[PodNode], regions: list[str]) -> list[str]:
    done = []
    for n in nodes:
        if n.template != TEARDOWN or n.phase != SUCCEEDED:
            continue
        try:
            doc = json.loads(n.outputs.get("teardown", "{}"))
        except json.JSONDecodeError:
            continue
        if doc.get("destroyed") and not doc.get("leaks"):
            done.append(_region(n))
    return [r for r in regions if r in done]


def _report(
    job: BurstJob,
    run_dir: Path,
    run_id: str,
    sites: RegionSites,
    engine: WorkflowEngine,
    result: EngineResult,
    started: float,
    opts: RegionalOptions,
) -> RegionalReport:
    rs = regional(job)
    regions, agg = sites.regions, sites.aggregation_region
    nodes = result.nodes
    _copy_documents(nodes, run_dir)
    local_steps, basis = local_steps_for(job)
    cfg_file = run_dir / f"worker-{regions[0]}.config.json"
    if cfg_file.exists():  # what the run's provision step chose (the plan's H and schedule)
        chosen = json.loads(cfg_file.read_text())
        local_steps, first = int(chosen["local_steps"]), chosen.get("first_local_steps")
    else:
        first = first_local_steps_for(job)[0]
    rounds = rounds_for(job.training.steps, local_steps, first)
    # a region whose provisioning began (a failure half-way is torn down too); bad input
    # (2) and a refusal (3) come before anything is applied
    provisioned = [
        r
        for r in regions
        if any(
            n.template == PROVISION
            and _region(n) == r
            and any(a.exit_code not in (EXIT_BAD_INPUT, EXIT_REFUSED) for a in n.attempts)
            for n in nodes
        )
    ]
    torn_down = _torn_down(nodes, regions)
    failure: str | None = None
    code = 0
    if result.phase != SUCCEEDED:
        failure, code = _failure(nodes, run_dir, result.message)
    if set(provisioned) - set(torn_down):
        left = sorted(set(provisioned) - set(torn_down))
        failure = (failure + "; " if failure else "") + (
            f"teardown of {', '.join(left)} not proven (teardown-<region>.json)"
        )
        code = code or EXIT_INFRA
    agg_out = run_dir / f"aggregator-{agg}.json"
    outcome = json.loads(agg_out.read_text()) if agg_out.exists() else {}
    history = outcome.get("rounds", [])
    if not history:  # failed run: the aggregator's state is the truth of what completed
        history = _history_from_store(objects_dir(run_dir, sites.exchange, sites.stores))
    records = read_link_log(sites.link_log)
    crossing = [r for r in records if r["src"] != r["dst"]]
    by_kind: dict[str, int] = {}
    for r in crossing:
        by_kind[r["kind"]] = by_kind.get(r["kind"], 0) + int(r["bytes"])
    total = sum(by_kind.values())
    by_round: dict[int, int] = {}
    for r in crossing:
        if r.get("round") is not None:
            by_round[int(r["round"])] = by_round.get(int(r["round"]), 0) + int(r["bytes"])
    history = [{**h, "bytes_crossing": by_round.get(int(h["round"]), 0)} for h in history]
    completed = len(history)
    report = RegionalReport(
        run_id=run_id,
        status="succeeded" if code == 0 and completed == rounds else "failed",
        exit_code=code,
        regions=regions,
        aggregation_region=agg,
        local_steps=local_steps,
        local_steps_basis=basis,
        rounds_planned=rounds,
        rounds_completed=completed,
        codec=rs.compression.codec,
        rounds=[RegionalRound.model_validate(r) for r in history],
        bytes_per_round=total / completed if completed else 0.0,
        links=LinkTotals(
            bytes_crossing=total,
            bytes_by_kind=by_kind,
            shard_bytes_crossing=by_kind.get("shard", 0),
            egress_usd=sum(float(r["usd"]) for r in crossing),
            link_seconds=round(sum(float(r["seconds"]) for r in crossing), 6),
            transfers=len(crossing),
        ),
        attempts=[
            RegionAttempts(
                region=_region(n),
                role=ROLES[n.template],
                attempts=len(n.attempts),
                exit_codes=[-1 if a.exit_code is None else a.exit_code for a in n.attempts],
            )
            for n in nodes
            if n.template in ROLES and n.attempts
        ],
        provisioned=provisioned,
        torn_down=torn_down,
        stores=sites.stores,
        terraform=True,
        final_weights_sha256=outcome.get("final_weights_sha256"),
        failure=failure,
        seconds=round(time.monotonic() - started, 3),
        workflow=WorkflowResult(
            template=str(opts.template),
            phase=result.phase,
            message=result.message,
            exit_handler_phase=result.exit_handler_phase,
        ),
        containers=(
            None
            if opts.containers is None
            else ContainerRun.model_validate(
                {"engine": opts.containers.engine.name, "pods": opts.containers.report()}
            )
        ),
    )
    (run_dir / "report.json").write_text(json.dumps(report.to_json(), indent=1))
    return report


def _history_from_store(root: Path) -> list[dict[str, Any]]:
    from burst.regional.runtime import newest_step, read
    from burst.regional.stores import AGGREGATOR, series

    if not root.exists():
        return []
    try:
        store = series(LocalStore(root), AGGREGATOR)
        last = newest_step(store)
        if last is None:
            return []
        return list(json.loads(read(store, last).state["history"]))
    except Exception as exc:
        log.warning("could not read the aggregator's history: %s", exc)
        return []
