"""``burst run`` of a ``strategy: regional-sync`` spec: the regional graph on this machine.

For each region, all at once: *provision* (``burst.regional.localregions``: its own Terraform
stack, the embedded local stack, and its own S3 server on loopback with keys of its own; its
shard placed into its store), then its *worker* as its own process (``python -m
steps.regional_worker``); the *aggregator* runs as a process of the aggregation region
(``python -m steps.regional_aggregator``) on the exchange store, a server of its own in that
region; then *teardown* of every region, whatever happened (server stopped, stack destroyed
and proven empty, scratch and credentials removed; the data stays, as a bucket would). Every
process gets only its own region's store and, for a worker, the exchange store (their specs
name a profile; the process's own credentials file holds those keys only) through the link
emulator, with the catalog's bandwidth, latency and price between the two regions; every
transfer lands in the run's link log (``links.jsonl``).

A process killed by a signal, or exiting 75 (preempted) or 4 (infrastructure), is started
again, at most as often as the compiled template's ``restarts`` says, as Argo's retry strategy
would: a worker rejoins from the newest global
checkpoint, the aggregator from its last committed round. Any other failure stops the run:
every process is stopped, every region torn down, and the report says which role failed.

The local run's data: the example entrypoint's dataset (``burst.train.example.make_dataset``)
split over the regions in proportion to ``data.shards``, written as ``shard/shard.npz``
(arrays x and y) into each region's store. A real run's provision step places (or finds) the
region's shard there.
"""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path
from typing import Any

import numpy as np

from burst import checkout
from burst.children import die_with_parent
from burst.documents.regional import LinkTotals, RegionalReport, RegionalRound, RegionAttempts
from burst.errors import EXIT_INFRA, EXIT_PREEMPTED, BadInputError, BurstError
from burst.plan.catalog import load_catalog
from burst.plan.datastrategy import link_class
from burst.regional.localregions import LocalRegions, StoreMode, objects_dir
from burst.regional.runtime import RoleConfig, regional, rounds_for
from burst.regional.stores import SHARD_KEY, read_link_log
from burst.spec import BurstJob
from burst.storage.base import ObjectStore
from burst.storage.local import LocalStore

log = logging.getLogger(__name__)

#: The compiled regional template: the local run restarts a role as often as it says.
TEMPLATE = checkout.COMPILED / "burst-regional.yaml"


def template_restarts(path: Path = TEMPLATE) -> int:
    """The ``restarts`` parameter of the regional WorkflowTemplate (the worker's and the
    aggregator's ``retryStrategy.limit``)."""
    from burst.runner.local import load_manifest

    params = load_manifest(path).get("spec", {}).get("arguments", {}).get("parameters", [])
    for p in params:
        if p.get("name") == "restarts":
            return int(p["value"])
    raise BadInputError(f"{path}: no restarts parameter (run `make goldens`)")


def retryable(rc: int) -> bool:
    """The template's retry expression (``pipelines.common.RETRY_ON_PREEMPTION``) on one
    machine: preempted (75), an infrastructure failure (4), or killed by a signal (a lost
    node's pod leaves no exit code: Argo's -1)."""
    return rc < 0 or rc in (EXIT_PREEMPTED, EXIT_INFRA)


@dataclass
class RegionalOptions:
    time_scale: float = 1.0  # emulated link seconds are slept times this
    stores: StoreMode = "s3"  # one S3 server a region (own keys); "dir": directory stores
    terraform: bool = True  # a Terraform stack a region (the embedded local stack)
    faults: dict[str, dict[str, str]] = field(default_factory=dict)  # role key -> points
    wait_limit_s: float = 600.0
    on_event: Callable[[str, str, dict[str, Any]], None] | None = None


def run_links(job: BurstJob, regions: list[str]) -> list[dict[str, Any]]:
    """Every pair of the run's regions with the catalog's link (seed 002's classes: same area
    and provider is ``cross_region``, anything else ``cross_continent``)."""
    cat = load_catalog()
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    out = []
    for a, b in combinations(regions, 2):
        cls = link_class(cat, (provider, a), (provider, b))
        ln = cat.link(cls)
        out.append(
            {
                "a": a,
                "b": b,
                "class": cls,
                "gb_per_s": ln["gb_per_s"],
                "latency_ms": ln["latency_ms"],
                "usd_per_gb": ln["usd_per_gb"],
            }
        )
    return out


def write_shards(job: BurstJob, stores: Mapping[str, ObjectStore]) -> dict[str, int]:
    """Split the example dataset over the regions by ``data.shards`` and write each region's
    part into its own store only. Returns rows per region."""
    from burst.train.example import make_dataset

    shards = job.data.shards or {}
    x, y = make_dataset(job.training.seed)
    total = float(sum(shards[r] for r in stores)) or 1.0
    rows = int(x.shape[0])
    out: dict[str, int] = {}
    start = 0
    names = list(stores)
    for i, region in enumerate(names):
        n = rows - start if i == len(names) - 1 else round(rows * shards[region] / total)
        n = max(1, min(n, rows - start - (len(names) - 1 - i)))
        buf = io.BytesIO()
        np.savez(buf, x=x[start : start + n].numpy(), y=y[start : start + n].numpy())
        stores[region].put_bytes(SHARD_KEY, buf.getvalue())
        out[region] = n
        start += n
    return out


def local_steps_for(job: BurstJob) -> tuple[int, str]:
    """H of the run and where it comes from: ``regional_sync.local_steps``, or (null) the
    planner's pick (``burst.plan.regional.plan_regional_sync``: the smallest H whose sync over
    the catalog's link stays under ``sync_fraction`` of a round's compute, with the workload's
    step time, ``burst.plan.workload.estimate``: ``training.step_seconds`` when the spec gives
    it, else the FLOP estimate on the spec's GPUs), capped at ``training.steps``."""
    rs = regional(job)
    if rs.local_steps is not None:
        return rs.local_steps, "training.regional_sync.local_steps"
    from burst.plan.regional import plan_regional_sync
    from burst.plan.workload import estimate

    cat = load_catalog()
    provider = job.compute.providers[0] if job.compute.providers else "aws"
    doc = plan_regional_sync(job, cat, estimate(job, cat), provider)
    if doc is None:  # not reached: regional() refused a spec without the strategy
        raise BadInputError(f"spec {job.name}: training.strategy is not regional-sync")
    picked = int(doc["local_steps"])
    basis = f"{doc['local_steps_basis']} (step time: {estimate(job, cat).basis})"
    if picked > job.training.steps:
        basis += f"; the planner's H {picked} exceeds training.steps, capped to one round"
        picked = job.training.steps
    return picked, basis


@dataclass
class _Proc:
    key: str  # "worker:<region>" or "aggregator:<region>"
    config: Path
    log: Path
    env: dict[str, str]
    popen: subprocess.Popen[bytes] | None = None
    attempts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    done: bool = False


def _module(key: str) -> str:
    return "steps.regional_worker" if key.startswith("worker:") else "steps.regional_aggregator"


def _start(p: _Proc) -> None:
    p.attempts += 1
    with open(p.log, "ab") as fh:
        fh.write(f"--- attempt {p.attempts}\n".encode())
        p.popen = subprocess.Popen(
            [sys.executable, "-m", _module(p.key), "--config", str(p.config)],
            stdout=fh,
            stderr=subprocess.STDOUT,
            env=p.env,
            cwd=str(checkout.ROOT),
            start_new_session=True,
            preexec_fn=die_with_parent,  # a killed `burst run` leaves no role behind
        )


def _stop(p: _Proc) -> None:
    if p.popen is not None and p.popen.poll() is None:
        os.killpg(p.popen.pid, signal.SIGTERM)
        try:
            p.popen.wait(5)
        except subprocess.TimeoutExpired:
            os.killpg(p.popen.pid, signal.SIGKILL)
            p.popen.wait()


def run_regional(
    job: BurstJob, spec_path: Path, run_dir: Path, run_id: str, opts: RegionalOptions
) -> RegionalReport:
    rs = regional(job)
    regions = list(rs.regions or [])
    agg = str(rs.aggregation_region)
    local_steps, basis = local_steps_for(job)
    log.info("regional run: H = %d (%s)", local_steps, basis)
    rounds = rounds_for(job.training.steps, local_steps)
    restarts = template_restarts()
    started = time.monotonic()
    emit = opts.on_event or (lambda *_: None)
    emit("plan", "succeeded", {"local_steps": local_steps, "basis": basis})
    run_dir.mkdir(parents=True, exist_ok=True)
    scratch, logs = run_dir / "scratch", run_dir / "logs"
    for d in (run_dir / "stores", scratch, logs):
        d.mkdir(parents=True, exist_ok=True)
    # the processes read the run's own copy: editing the spec mid-run changes nothing, and a
    # restarted role reads what the run started with
    run_spec = run_dir / "spec.yaml"
    if spec_path.resolve() != run_spec.resolve():
        shutil.copyfile(spec_path, run_spec)
    link_log = run_dir / "links.jsonl"
    links = run_links(job, regions)
    (run_dir / "links.json").write_text(json.dumps(links, indent=1))

    sites = LocalRegions(job, run_id, run_dir, agg, stores=opts.stores, terraform=opts.terraform)
    procs: list[_Proc] = []
    failure: str | None = None
    code = 0
    # a process gets no credentials but the ones its role file names (s3 mode)
    base_env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    base_env["PYTHONPATH"] = os.pathsep.join(
        [str(checkout.ROOT)] + [p for p in base_env.get("PYTHONPATH", "").split(os.pathsep) if p]
    )
    try:
        sites.preflight(regions)
        emit("preflight", "succeeded", {})
        for region in regions:
            emit(f"provision:{region}", "started", {})
        sites.provision_all(regions)
        rows = write_shards(job, {r: sites.launcher_store(r) for r in regions})
        for region in regions:
            emit(f"provision:{region}", "succeeded", {"rows": rows[region]})

        def config(role: str, region: str) -> _Proc:
            key = f"{role}:{region}"
            name = key.replace(":", "-")
            cfg = RoleConfig(
                spec=str(run_spec),
                role=role,
                region=region,
                aggregation_region=agg,
                regions=tuple(regions),
                local_steps=local_steps,
                rounds=rounds,
                region_store=sites.region_spec(region) if role == "worker" else None,
                exchange_store=sites.exchange_spec(),
                links=tuple(links),
                link_log=str(link_log),
                time_scale=opts.time_scale,
                state_dir=str(scratch / name),
                out=str(run_dir / f"{name}.json"),
                faults=opts.faults.get(key),
                wait_limit_s=opts.wait_limit_s,
            )
            path = run_dir / f"{name}.config.json"
            path.write_text(cfg.to_json())
            env = {
                **base_env,
                **sites.role_env(region if role == "worker" else None, scratch / name),
            }
            return _Proc(key, path, logs / f"{name}.log", env)

        procs = [config("aggregator", agg)] + [config("worker", r) for r in regions]
        for p in procs:
            emit(p.key, "started", {})
            _start(p)
        while not all(p.done for p in procs):
            for p in procs:
                if p.done or p.popen is None:
                    continue
                rc = p.popen.poll()
                if rc is None:
                    continue
                p.exit_codes.append(rc)
                if rc == 0:
                    p.done = True
                    emit(p.key, "succeeded", {"attempts": p.attempts})
                elif retryable(rc) and p.attempts <= restarts:
                    emit(p.key, "requeued", {"attempt": p.attempts + 1, "exit_code": rc})
                    log.warning("%s ended with %d: starting it again", p.key, rc)
                    _start(p)
                else:
                    code = rc if rc > 0 else EXIT_INFRA
                    tail = _last_line(p.log)
                    failure = f"{p.key} exited {rc}: {tail}"
                    emit(p.key, "failed", {"exit_code": rc})
                    raise _Stop
            time.sleep(0.05)
    except _Stop:
        pass
    except BurstError as exc:  # preflight or a region's provision failed: nothing runs
        where = "provision" if sites.provisioned else "preflight"
        failure, code = f"{where}: {exc.one_line()}", exc.exit_code
        emit(where, "failed", {"exit_code": code})
    finally:
        for p in procs:
            _stop(p)
        for region in sites.provisioned:
            emit(f"teardown:{region}", "started", {})
        docs = sites.teardown_all(
            {r: [scratch / f"worker-{r}", scratch / f"aggregator-{r}"] for r in sites.provisioned}
        )
        for region, doc in docs.items():
            emit(f"teardown:{region}", "succeeded" if region in sites.torn_down else "failed", doc)
    if set(sites.provisioned) - set(sites.torn_down):
        left = sorted(set(sites.provisioned) - set(sites.torn_down))
        failure = (failure + "; " if failure else "") + (
            f"teardown of {', '.join(left)} not proven (teardown-<region>.json)"
        )
        code = code or EXIT_INFRA
    return _report(
        run_id,
        run_dir,
        job,
        regions,
        agg,
        local_steps,
        basis,
        rounds,
        procs,
        sites,
        failure,
        code,
        time.monotonic() - started,
    )


class _Stop(Exception):
    pass


def _last_line(path: Path) -> str:
    try:
        lines = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "(no log)"
    return lines[-1][:300] if lines else "(empty log)"


def _report(
    run_id: str,
    run_dir: Path,
    job: BurstJob,
    regions: list[str],
    agg: str,
    local_steps: int,
    basis: str,
    rounds: int,
    procs: list[_Proc],
    sites: LocalRegions,
    failure: str | None,
    code: int,
    seconds: float,
) -> RegionalReport:
    rs = regional(job)
    agg_out = run_dir / f"aggregator-{agg}.json"
    result = json.loads(agg_out.read_text()) if agg_out.exists() else {}
    history = result.get("rounds", [])
    if not history:  # failed run: the aggregator's state is the truth of what completed
        history = _history_from_store(objects_dir(run_dir, sites.exchange, sites.stores))
    records = read_link_log(run_dir / "links.jsonl")
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
                region=p.key.split(":", 1)[1],
                role=p.key.split(":", 1)[0],
                attempts=p.attempts,
                exit_codes=p.exit_codes,
            )
            for p in procs
        ],
        provisioned=sites.provisioned,
        torn_down=sites.torn_down,
        stores=sites.stores,
        terraform=sites.terraform,
        final_weights_sha256=result.get("final_weights_sha256"),
        failure=failure,
        seconds=round(seconds, 3),
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
