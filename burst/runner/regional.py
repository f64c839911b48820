"""``burst run`` of a ``strategy: regional-sync`` spec: the compiled ``burst-regional``
template, executed by the local runner as it executes ``burst-train``.

:class:`burst.runner.local.LocalRunner` runs ``burst/pipelines/compiled/burst-regional.yaml``
(preflight, plan, verify-image; every region's stack at once; then every region's place branch
at once: burst-train's ``provision`` and ``train`` (the worker) and, in the aggregation region,
``aggregate``, as parallel steps; teardown of every region in the exit handler, whatever
happened), with :class:`burst.runner.regions.RegionSites` giving each pod of a region what
that region would have (its store and keys, the link emulator). Restarts of a worker or the
aggregator are the template's ``retryStrategy`` (exit 75, exit 4, a lost node; ``restarts``
times). The report (``report.json``) is every run's: ``LocalRunner.report``, the one builder
(``burst.obs.report.build_report``), whose ``regional`` section it fills from the branches'
documents (the ``aggregate`` step's: its rounds, the final weights' digest) and what this
machine measured (``RegionalMeasures``: the link log; the aggregator's store when its step
wrote no document); the documents of each region's steps are copied beside it
(``provision-<region>.json``, ``teardown-<region>.json``, ``<role>-<region>.config.json``: what
the region's ``train`` and ``aggregate`` steps derived), and every step's start and end, in
order, in ``events.jsonl`` (as for every local run).

The local run's data: the example entrypoint's dataset split over the regions in proportion
to ``data.shards`` (``regions.write_shards``), in each region's store.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.documents import RunReport
from burst.documents.regional import LinkTransfer, RegionalMeasures, RegionalRound
from burst.plan.regional import local_steps_for
from burst.regional.runtime import regional
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

PROVISION, WORKER, AGGREGATOR, TEARDOWN = ("provision", "train", "aggregate", "teardown")
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
) -> RunReport:
    rs = regional(job)
    regions = list(rs.regions or [])
    agg = str(rs.aggregation_region)
    local_steps, basis = local_steps_for(job)
    emit = opts.on_event or (lambda *_: None)
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

    def finish(engine: WorkflowEngine, result: EngineResult) -> RunReport:
        sites.close()  # every store stopped, every key removed, before the report is read
        _copy_documents(result.nodes, paths.dir)
        measures = _measures(result.nodes, paths.dir, sites)
        return RunReport.model_validate(runner.report(engine, result, measures))

    paths.dir.mkdir(parents=True, exist_ok=True)
    try:
        sites.start()
        return runner.execute(finish)
    finally:
        sites.close()


def _region(node: PodNode) -> str:
    return node.inputs.get("region", "")


def _copy_documents(nodes: list[PodNode], run_dir: Path) -> None:
    """Each region's step documents beside the report, by region; the role configs its
    train and aggregate steps derived (kept in the region's workspace, ``<run>-<region>/``)."""
    for n in nodes:
        if n.template == "preflight" and "decision" in n.outputs:  # the decision record
            (run_dir / "preflight.json").write_text(n.outputs["decision"])
        region = _region(n)
        if not region:
            continue
        in_branch = n.key.endswith(".provision")  # regions(i:r).provision, not stacks(i:r)
        if n.template == PROVISION and "infra" in n.outputs and not in_branch:
            (run_dir / f"provision-{region}.json").write_text(n.outputs["infra"])
        if n.template in ROLES and n.attempts:
            role = ROLES[n.template]
            cfg = run_dir.parent / f"{run_dir.name}-{region}" / f"{role}.config.json"
            if cfg.is_file():
                (run_dir / f"{role}-{region}.config.json").write_text(cfg.read_text())
        if n.template == TEARDOWN and "teardown" in n.outputs:
            (run_dir / f"teardown-{region}.json").write_text(n.outputs["teardown"])


def _measures(nodes: list[PodNode], run_dir: Path, sites: RegionSites) -> RegionalMeasures:
    """What this machine measured of the run: the link emulator's transfers, and (the
    ``aggregate`` step wrote no document) the rounds its store holds as committed."""
    aggregated = any(n.template == AGGREGATOR and n.phase == SUCCEEDED for n in nodes)
    committed = (
        []
        if aggregated
        else _history_from_store(objects_dir(run_dir, sites.exchange, sites.stores))
    )
    return RegionalMeasures(
        transfers=[LinkTransfer.model_validate(r) for r in read_link_log(sites.link_log)],
        committed=[RegionalRound.model_validate(r) for r in committed],
        stores=sites.stores,
        terraform=True,
    )


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
