"""``burst run``: execute the compiled WorkflowTemplate on this machine.

The graph, the parameters, the retry policy (exit 75 and node loss), the deadlines and the
exit handler (teardown, always) come from ``burst/pipelines/compiled/burst-train.yaml`` (or, for a
``strategy: regional-sync`` spec, ``burst-regional.yaml``: :mod:`burst.runner.regional`),
the very file Argo runs; :mod:`burst.runner.engine` executes it, each step as its own process
(``python -m burst.steps.<name>``) started in the user's working directory. The run directory keeps
the step documents, logs, Terraform state, one directory per step attempt (``pods/``) and
``report.json``.
"""

from __future__ import annotations

import copy
import datetime as dt
import json
import logging
import shutil
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from burst import checkout, faults
from burst.documents.regional import RegionalMeasures
from burst.documents.report import WorkflowResult
from burst.errors import BadInputError
from burst.lease import Lease, Renewer, heartbeat_store
from burst.obs.report import build_report
from burst.runner.argo import spec_parameters, terraform_parameters
from burst.runner.containers import ContainerLauncher
from burst.runner.engine import (
    SUCCEEDED,
    EngineOptions,
    NodeLoss,
    PodNode,
    WorkflowEngine,
)
from burst.runner.engine import WorkflowResult as EngineResult
from burst.runner.pods import PreparePod
from burst.runs import RunPaths, write_json_atomic
from burst.settings import current
from burst.spec import load_spec
from burst.storage.base import StoreError

log = logging.getLogger(__name__)
_EVENTS_LOCK = threading.Lock()

COMPILED_DIR = checkout.COMPILED
TEMPLATE = COMPILED_DIR / "burst-train.yaml"
REGIONAL_TEMPLATE = COMPILED_DIR / "burst-regional.yaml"
RUNS_VOLUME = "burst-runs"
PREVIOUS_REPORT = "report.previous.json"  # the report of a resumed run's last drive
#: Locally a backoff of "10s" waits 1 s: same shape, less idle time on a laptop.
LOCAL_BACKOFF_SCALE = 0.1


@dataclass
class RunOptions:
    fail_at: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    template: Path = TEMPLATE
    parameters: dict[str, str] = field(default_factory=dict)  # overrides of workflow params
    backoff_scale: float = LOCAL_BACKOFF_SCALE
    node_loss: tuple[NodeLoss, ...] = ()  # fault point node-loss (see NodeLoss)
    prepare_pod: PreparePod | None = None  # what this machine adds to a pod (regions.py)
    #: container mode (``burst run --containers``): each pod in its template's image
    containers: ContainerLauncher | None = None


Event = Callable[[str, str, dict[str, Any]], None]
T = TypeVar("T")


def load_manifest(path: Path) -> dict[str, Any]:
    from burst.inputs import load_yaml_file

    # bounded: no FIFO, no alias bomb (burst's own compiled template: the faster loader)
    doc = load_yaml_file(path, what="workflow template", shipped=checkout.is_shipped(path))
    if not isinstance(doc, dict):
        raise BadInputError(f"{path}: not a manifest (a mapping)")
    return doc


def _module_of(cmd: list[str]) -> str | None:
    if len(cmd) >= 3 and cmd[1] == "-m" and cmd[2].startswith("burst.steps."):
        return cmd[2].removeprefix("burst.steps.").replace("_", "-")
    return None


def _runs_step_module(container: dict[str, Any]) -> bool:
    return _module_of(list(container.get("command") or [])) is not None


def step_module(node: PodNode) -> str | None:
    """``train`` for a container running ``python -m burst.steps.train``; None for helpers."""
    return _module_of(node.command)


def pipeline_order(manifest: dict[str, Any]) -> list[str]:
    """The pipeline's step names in order (main, then the exit handler), for the report."""
    spec = manifest.get("spec") or {}
    templates = {t["name"]: t for t in spec.get("templates") or []}
    order: list[str] = []

    def walk(name: str, seen: tuple[str, ...]) -> None:
        t = templates.get(name) or {}
        if "container" in t:
            module = _module_of(list(t["container"].get("command") or []))
            if module:
                order.append(module)
            return
        calls = [s for g in t.get("steps") or [] for s in g]
        calls += list((t.get("dag") or {}).get("tasks") or [])
        for call in calls:
            if call["template"] not in seen:
                walk(call["template"], (*seen, call["template"]))

    walk(spec["entrypoint"], (spec["entrypoint"],))
    if spec.get("onExit"):
        walk(spec["onExit"], (spec["onExit"],))
    return order


def _iso(t: float | None) -> str | None:
    if t is None:
        return None
    return dt.datetime.fromtimestamp(t, dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def _step_record(node: PodNode) -> dict[str, Any]:
    timed = [a for a in node.attempts if a.started_at is not None]
    region = node.inputs.get("region")
    if region and step_module(node):  # a region's branch (burst-regional): one entry a pod
        branch = {"name": node.key, "region": region, "module": step_module(node)}
    else:
        branch = {}
    return {
        "started_at": _iso(timed[0].started_at) if timed else None,
        "ended_at": _iso((timed[-1].started_at or 0.0) + timed[-1].seconds) if timed else None,
        "name": step_module(node) or node.step,
        "status": "succeeded" if node.phase == SUCCEEDED else "failed",
        "seconds": node.seconds,
        "exit_code": node.exit_code,
        "attempts": len(node.attempts),
        "path": node.path,
        "attempt_details": [
            {
                "exit_code": a.exit_code,
                "phase": a.phase,
                "message": a.message,
                "seconds": a.seconds,
                "started_at": _iso(a.started_at),
                "pod_dir": a.pod_dir,
                "outputs_dir": str(Path(a.pod_dir) / "tmp" / "outputs"),
            }
            for a in node.attempts
        ],
        **branch,
    }


def _merge(records: list[dict[str, Any]]) -> dict[str, Any]:
    """One entry for a step placed several times (requeued in the next candidate)."""
    if len(records) == 1:
        return records[0]
    last = records[-1]
    return {
        **last,
        "started_at": records[0].get("started_at"),
        "seconds": round(sum(r["seconds"] for r in records), 3),
        "attempts": sum(r["attempts"] for r in records),
        "placements": len(records),
        "attempt_details": [a for r in records for a in r["attempt_details"]],
    }


def report_steps(manifest: dict[str, Any], nodes: list[PodNode]) -> list[dict[str, Any]]:
    """One entry per pipeline step, in pipeline order, the exit handler's (teardown) last.

    A step run more than once (train requeued in the next candidate, and its provision) is
    one entry whose attempts add up; its status is its last run's. Steps that never ran are
    "skipped". A region's pods (burst-regional's branches: a ``region`` input) are one entry
    each, named as the pod (``regions(0:eu-west-1).train``) with its region. Helper
    containers (not ``python -m burst.steps.*``, e.g. give-up) are left out: the failure they
    propagate is already the step's.
    """
    spec = manifest["spec"]
    exit_names = (
        pipeline_order({"spec": {**spec, "entrypoint": spec["onExit"]}})
        if spec.get("onExit")
        else []
    )
    grouped: dict[str, list[dict[str, Any]]] = {}
    for n in nodes:
        if step_module(n) and not n.exit_handler:
            rec = _step_record(n)
            grouped.setdefault(rec["name"], []).append(rec)
    steps = [_merge(recs) for recs in grouped.values()]
    ran = {step_module(n) for n in nodes}
    for name in pipeline_order(manifest):
        if name not in grouped and name not in ran and name not in exit_names:
            steps.append(
                {
                    "name": name,
                    "status": "skipped",
                    "seconds": 0.0,
                    "exit_code": None,
                    "attempts": 0,
                }
            )
            grouped[name] = []
    steps += [_step_record(n) for n in nodes if step_module(n) and n.exit_handler]
    return steps


def name_images(
    steps: list[dict[str, Any]], nodes: list[PodNode], containers: ContainerLauncher | None
) -> None:
    """Each step's entry names the image and the digest it ran in (its last attempt's) and
    their provenance (burst.supplychain.provenance); in process (no containers): none, and
    says so."""
    from burst.supplychain.provenance import IN_PROCESS

    ran = containers.report() if containers is not None else {}
    by_path = {n.path: ran[n.key] for n in nodes if n.key in ran}
    for s in steps:
        got = by_path.get(str(s.get("path")))
        if got:
            s["image"], s["image_digest"] = got["image"], got["digest"] or got["id"]
            s["image_provenance"] = got.get("provenance")
        elif containers is None and s.get("attempts"):
            s["image_provenance"] = IN_PROCESS


def _regional(job: Any) -> bool:
    return bool(job.training.strategy == "regional-sync")


def local_regional_parameters(job: Any, spec_text: str) -> dict[str, str]:
    """burst-regional's parameters for a local run: what `burst submit` passes, less the
    images (a local run verifies the spec's own image reference, which need not be pinned in
    a registry)."""
    import json

    rs = job.training.regional_sync
    return {
        "spec": spec_text,
        "regions": json.dumps(list(rs.regions or [])),
        "aggregation-region": str(rs.aggregation_region),
        "train-deadline-seconds": str(int(job.budget.max_hours * 3600)),
        # whose quota, queue, band and cost labels (provision checks them against the spec)
        "team": job.team,
        "priority": str(job.priority),
        "cost-centre": job.cost_centre,
        "owner": job.owner,
    }


class LocalRunner:
    def __init__(
        self,
        paths: RunPaths,
        spec_file: Path,
        options: RunOptions | None = None,
        on_event: Event | None = None,
    ) -> None:
        self.paths = paths
        self.spec_file = spec_file
        self.options = options or RunOptions()
        self.on_event = on_event or (lambda *_: None)
        self._manifest: dict[str, Any] | None = None

    def manifest(self) -> dict[str, Any]:
        """The workflow template, parsed once (the bounded YAML loader is pure Python: a
        tenth of a CPU-second for burst-train.yaml); each engine gets its own copy."""
        if self._manifest is None:
            self._manifest = load_manifest(self.options.template)
        return copy.deepcopy(self._manifest)

    def parameters(self) -> dict[str, str]:
        """Workflow parameters from the spec, as `burst submit` passes them to Argo."""
        job = load_spec(self.spec_file)
        text = self.spec_file.read_text(encoding="utf-8")
        return {
            **(
                local_regional_parameters(job, text)
                if _regional(job)
                else spec_parameters(job, text)
            ),
            "tf-stack": "local",  # one machine: the embedded stack, unless the environment
            **terraform_parameters(),  # names another
            **self.options.parameters,
        }

    def engine(self) -> WorkflowEngine:
        # JSON-line logs (run id and step on every record): the report's timeline reads them
        env = {
            "BURST_LOG_JSON": "1",
            "BURST_SUBMITTED_AT": f"{time.time():.3f}",
            # one machine has no cloud metadata service: never poll a provider's (link-local)
            # metadata address from a local run, whatever the template says for the cluster
            "BURST_PREEMPT_WATCHERS": current().local_preempt_watchers,
            # this runner renews the run's driver heartbeat: train stops if it lapses
            "BURST_DRIVER_HEARTBEAT": "1",
            **self.options.env,
        }
        env.update(faults.arm(fail_at=self.options.fail_at))
        manifest = self.manifest()
        opts = EngineOptions(
            workflow_name=self.paths.run_id,
            parameters=self.parameters(),
            volumes={RUNS_VOLUME: self.paths.root},
            env=env,
            pods_dir=self.paths.dir / "pods",
            log_path=self.paths.log,
            backoff_scale=self.options.backoff_scale,
            node_loss=self.options.node_loss,
            prepare_pod=self.options.prepare_pod,
        )
        if self.options.containers is not None:
            opts.launch = self.options.containers.launch
            opts.end_pod = self.options.containers.end
        helpers = {
            t["name"]
            for t in (manifest.get("spec") or {}).get("templates") or []
            if "container" in t and not _runs_step_module(t["container"])
        }

        def on_event(step: str, status: str, info: dict[str, Any]) -> None:
            if info.get("template") not in helpers:  # progress for pipeline steps only
                self._record_event(step, status, info)
                self.on_event(step, status, info)

        return WorkflowEngine(manifest, opts, on_event)

    def _record_event(self, step: str, status: str, info: dict[str, Any]) -> None:
        """The run's timeline (``events.jsonl``): what the live views read while the run
        goes (a step is running from its start to its recorded end, succeeded only with exit
        code 0). Branches of a step group report from their own threads."""
        rec: dict[str, Any] = {"t": round(time.time(), 3), "step": step, "status": status}
        if status in ("succeeded", "failed", "requeued"):
            rec["exit_code"] = info.get("exit_code")
        if info.get("message"):
            rec["message"] = str(info["message"])
        with _EVENTS_LOCK, open(self.paths.events, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(rec) + "\n")

    def _take_driver_lease(self) -> tuple[Lease, Renewer]:
        """One driver per run, and never beside a live trainer of it: refuse (exit 3, one
        line naming the holder) while another runner drives the run or a trainer of it is
        still alive (an orphan of a killed runner stops by itself once the driver heartbeat
        lapses); else take the driver heartbeat and renew it while the run goes."""
        from burst.lease import (
            TRAINER_KEY,
            LeaseHeld,
            alive,
            describe_holder,
            heartbeat_key,
            held_line,
            read_lease,
        )
        from burst.storage import open_store
        from burst.storage.location import run_url

        rid = self.paths.run_id
        try:
            uri = load_spec(self.spec_file).storage.checkpoint_uri
            store = open_store(run_url(uri, rid, self.paths.root))
            trainer = read_lease(store, TRAINER_KEY)
        except StoreError as exc:
            log.warning("cannot read the run's trainer lease: %s", exc.one_line())
            trainer = None
        if alive(trainer) and trainer is not None:
            raise LeaseHeld(
                held_line(f"run {rid} is live: its trainer lease", trainer, TRAINER_KEY)
            )
        driver = Lease.for_env(
            heartbeat_store(rid, self.paths.dir),
            heartbeat_key("driver"),
            describe_holder(f"run {rid} driver (burst run)"),
            f"run {rid}'s driver lease",
        )
        driver.take()
        return driver, Renewer([driver], driver.ttl / 4).start()

    def check(self) -> None:
        """Refuse the template (kind, features, parameters) before anything is created."""
        self.engine().check()

    def execute(self, finish: Callable[[WorkflowEngine, EngineResult], T]) -> T:
        """The workflow, run once under the run's driver lease, then ``finish`` (the report)
        with the engine and its result, still under the lease."""
        engine = self.engine()
        engine.check()  # refuse an unsupported manifest before anything is created
        driver, renewer = self._take_driver_lease()
        try:
            self.paths.create()
            self._new_drive()
            if self.spec_file.resolve() != self.paths.spec.resolve():
                shutil.copyfile(self.spec_file, self.paths.spec)
            return finish(engine, engine.run())
        finally:
            renewer.stop()
            driver.release()

    def _new_drive(self) -> None:
        """A run driven again (``burst resume``): the views follow this drive, not the last
        one's end. Its report is kept beside (``report.previous.json``) until this drive
        writes its own; its timeline starts afresh."""
        if self.paths.report.exists():
            self.paths.report.replace(self.paths.dir / PREVIOUS_REPORT)
        self.paths.events.unlink(missing_ok=True)

    def run(self) -> dict[str, Any]:
        return self.execute(self.report)

    def report(
        self,
        engine: WorkflowEngine,
        result: EngineResult,
        regional: RegionalMeasures | None = None,
    ) -> dict[str, Any]:
        """``report.json`` by the one report builder, for every template (a regional run's
        ``regional``: what this machine measured of it, ``burst.runner.regional``)."""
        steps = report_steps(engine.manifest, result.nodes)
        name_images(steps, result.nodes, self.options.containers)
        failed = None if result.phase == SUCCEEDED else (result.message or result.phase)
        report = build_report(self.paths, steps, failed, regional)
        report["workflow"] = WorkflowResult(
            template=str(self.options.template),
            phase=result.phase,
            message=result.message,
            exit_handler_phase=result.exit_handler_phase,
        ).to_json()
        if self.options.containers is not None:
            report["containers"] = {
                "engine": self.options.containers.engine.name,
                "pods": self.options.containers.report(),
            }
        write_json_atomic(self.paths.report, report)
        return report
