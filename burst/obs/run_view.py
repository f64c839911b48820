"""A run directory read back for people: ``RunView`` merges report.json, the step documents,
the metric files and the JSON-line logs, and tolerates any of them missing or partial (a run
that crashed, or one still running, must still show what is known).

Sources, in order of trust: ``report.json`` (written by ``burst run`` at the end, read with
its model: ``burst.documents.RunReport``, a regional-sync run's with its ``regional`` section;
a report of another shape is set aside with a warning naming the field, and the view is built
as for a run without one), the run's timeline
``events.jsonl`` (each step's start, requeues and end with its exit code, as the runner
recorded them), the driver's heartbeat (a run without a report is running only while it is
renewed, lost once it has lapsed), the metric files ``metrics/*.prom``, events in
``logs/*.log``, the train step's attempt records (``burst.documents.TrainAttempt``),
``spec.yaml``. How the run ended is ``burst.endings``' word for it.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst import attempt_records
from burst.documents import (
    ATTEMPTS_FILE,
    DocumentError,
    RunReport,
    TeardownDocument,
    TrainAttempt,
    parse_document,
)
from burst.documents.regional import RegionalSection
from burst.endings import RUNNING, UNKNOWN, Ending, ending_of, exit_code_of
from burst.endings import as_json as ending_json
from burst.errors import EXIT_PREEMPTED, BadInputError, BurstError
from burst.inputs import load_yaml_file, read_bytes
from burst.obs import events as ev
from burst.obs.metrics import MetricTotals, metrics_dir, read_metric_files
from burst.obs.overview import overview
from burst.obs.run_files import LOG_MAX_BYTES, epoch_seconds, read_json
from burst.runs import EVENTS_FILE, RUN_ID_RE, runs_root

REAPED_FILE = "reaped.json"  # written by `burst reap --yes` in a run directory it destroyed

log = logging.getLogger(__name__)


@dataclass
class StepView:
    name: str
    status: str
    seconds: float
    exit_code: int | None = None
    attempts: int = 1
    start: float | None = None  # seconds since the run started, on the timeline
    end: float | None = None


@dataclass
class Event:
    kind: str  # preemption | checkpoint | ...
    at: float | None  # seconds since the run started, None when not recorded
    step: str | None = None
    detail: str = ""


@dataclass
class Attempt:
    """One attempt of the train step on the timeline (seconds since the run started)."""

    number: int
    start: float | None
    end: float | None
    outcome: str


@dataclass
class RunView:
    run_id: str
    dir: Path
    status: str
    report: RunReport | None
    spec: dict[str, Any]
    steps: list[StepView]
    events: list[Event]
    metrics: MetricTotals
    timeline_source: str  # recorded | logs | sequential
    started_at: float | None = None  # epoch seconds
    attempts: list[Attempt] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # each region's teardown document (``teardown-<region>.json``) of a regional run
    region_teardowns: dict[str, TeardownDocument] = field(default_factory=dict)
    #: a run without a report: until when it is known to have gone (epoch seconds: now while
    #: its driver lives, its last sign of life once that has lapsed)
    live_until: float | None = None

    @property
    def regional(self) -> RegionalSection | None:
        """A regional-sync run's section of its report: rounds, links, regions."""
        return self.report.regional if self.report is not None else None

    @property
    def kind(self) -> str:
        return "regional-sync" if self.regional is not None else "train"

    # -- derived figures -------------------------------------------------------------------

    @property
    def ending(self) -> Ending | None:
        """How the run ended (``burst.endings``); None while it runs or cannot be told. A
        report written before the endings (succeeded / failed only) is read as it says."""
        return ending_of(self.status)

    @property
    def exit_code(self) -> int | None:
        """The code its run exited with (``burst run``), or would have: a lost run's."""
        if self.report is not None:
            return self.report.exit_code
        ending = self.ending
        return None if ending is None else exit_code_of(ending)

    @property
    def wall_seconds(self) -> float:
        """From the clock: the first step's start to the last one's end (a run still going:
        to now; a lost one: to its last sign of life), never a sum of steps."""
        if self.live_until is not None and self.started_at is not None:
            return max(self.live_until - self.started_at, 0.0)
        ends = [s.end for s in self.steps if s.end is not None]
        if ends:
            return max(ends)
        return sum(s.seconds for s in self.steps)

    @property
    def team(self) -> str | None:
        return _str(self.spec.get("team"))

    @property
    def name(self) -> str | None:
        return _str(self.spec.get("name"))

    @property
    def gpu_count(self) -> int | None:
        return _int(_dig(self.spec, "compute", "gpu_count"))

    @property
    def gpu_type(self) -> str | None:
        cand = self.report.candidate if self.report else None
        return (cand.gpu_type if cand else None) or _str(_dig(self.spec, "compute", "gpu_type"))

    @property
    def train_seconds(self) -> float:
        if self.regional is not None:  # each region's worker trains on GPUs of its own
            return sum(s.seconds for s in self.steps if s.name.endswith(".train"))
        return sum(s.seconds for s in self.steps if s.name == "train")

    @property
    def gpu_hours(self) -> float | None:
        """Billed GPU-hours, the ledger's basis (``burst.budget.run_gpu_hours``)."""
        return self._gpu_hours()[0]

    @property
    def gpu_hours_basis(self) -> str | None:
        """How ``gpu_hours`` was counted, in words."""
        return self._gpu_hours()[1]

    def _gpu_hours(self) -> tuple[float | None, str | None]:
        from burst.budget import run_gpu_hours

        cand = self.report.candidate if self.report else None
        settled = self.report.settlement if self.report else None
        return run_gpu_hours(
            attempt_records.read_file(self.dir / ATTEMPTS_FILE),
            (cand.gpus if cand else None) or self.gpu_count,
            settled.actual_gpu_hours if settled else None,
            self.train_seconds,
        )

    @property
    def preemptions(self) -> int:
        if self.report is not None:  # a regional run's: its roles' pods that exited 75
            return self.report.preemptions
        if self.metrics.has("burst_preemptions_total"):
            return int(self.metrics.total("burst_preemptions_total"))
        timed = [e for e in self.events if e.kind == "preemption"]
        if timed:
            return len(timed)
        return sum(max(s.attempts - 1, 0) for s in self.steps if s.name == "train") + sum(
            1 for s in self.steps if s.exit_code == EXIT_PREEMPTED
        )

    @property
    def checkpoints(self) -> int | None:
        if self.report is not None:
            return self.report.checkpoints
        if self.metrics.has("burst_checkpoints_committed_total"):
            return int(self.metrics.total("burst_checkpoints_committed_total"))
        return None

    @property
    def checkpoint_bytes(self) -> dict[str, float]:
        return self.metrics.by_label("burst_checkpoint_bytes_sum", "tier")

    @property
    def egress(self) -> dict[str, float]:
        """Bytes by "src -> dst" (the metric files)."""
        out: dict[str, float] = {}
        for (name, labels), v in self.metrics.samples.items():
            if name == "burst_egress_bytes_total":
                d = dict(labels)
                key = f"{d.get('src_region', '?')} -> {d.get('dst_region', '?')}"
                out[key] = out.get(key, 0.0) + v
        return out

    @property
    def leaks(self) -> int | None:
        values: list[int] = []
        if self.report is not None:
            values.append(self.report.resources_remaining)
            if self.report.teardown is not None and self.report.teardown.leaks is not None:
                values.append(len(self.report.teardown.leaks))
        if self.regional is not None:
            # a region provisioned and not proven empty counts as one left, whatever it holds
            unproven = set(self.regional.provisioned) - set(self.regional.torn_down)
            found = sum(
                max(len(t.leaks or []), t.resources_remaining or 0)
                for t in self.region_teardowns.values()
            )
            values.append(len(unproven) + found)
        if self.metrics.has("burst_resources_leaked"):
            values.append(int(self.metrics.total("burst_resources_leaked")))
        if self.status == "reaped":
            left = read_json(self.dir / REAPED_FILE, []).get("resources_remaining")
            if isinstance(left, int):
                values.append(left)
        return max(values) if values else None

    @property
    def provision_attempts(self) -> int | None:
        if self.report is not None:
            return len(self.report.provision_attempts)
        if self.metrics.has("burst_provision_attempts_total"):
            return int(self.metrics.total("burst_provision_attempts_total"))
        return None

    @property
    def budget_usd(self) -> float | None:
        if self.report is not None and self.report.budget is not None:
            return self.report.budget.max_usd
        return _num(_dig(self.spec, "budget", "max_usd"))

    @property
    def ledger(self) -> dict[str, Any] | None:
        """The run's reservation in its team's ledger and its settlement (burst.admission)."""
        if self.report is None or self.report.reservation is None:
            return None
        settled = self.report.settlement
        return {
            "reservation": self.report.reservation.model_dump(mode="json"),
            "settlement": None if settled is None else settled.model_dump(mode="json"),
        }

    @property
    def rented_seconds(self) -> float:
        """From the start of provision to the end of teardown (the hardware exists then)."""
        rented = [s for s in self.steps if s.name in ("provision", "train", "teardown")]
        first = next((s for s in rented if s.name == "provision"), None)
        last = next((s for s in reversed(rented) if s.name == "teardown"), None)
        if first and last and first.start is not None and last.end is not None:
            return max(last.end - first.start, 0.0)
        return sum(s.seconds for s in rented)

    @property
    def cost_source(self) -> str | None:
        return self._cost()[1]

    @property
    def cost(self) -> dict[str, float]:
        """The running estimate by component (see ``cost_source`` for where it comes from)."""
        return self._cost()[0]

    def _cost(self) -> tuple[dict[str, float], str | None]:
        if self.report is not None and self.report.cost:
            return dict(self.report.cost), "report"
        if self.regional is not None and self.regional.links is not None:
            # what the link emulator priced; GPUs are emulated here
            return {"egress": self.regional.links.egress_usd}, "link emulator (GPU time emulated)"
        by = self.metrics.by_label("burst_cost_usd", "component")
        if by:
            return dict(by), "metrics"
        # Last resort: the plan's hourly rate for the candidate it got, for the rented time.
        cand = self.report.candidate if self.report else None
        rate = cand.price_per_hour if cand else None
        if rate is not None and self.rented_seconds > 0:
            return {"compute": rate * self.rented_seconds / 3600.0}, "plan rate x rented time"
        return {}, None

    @property
    def expected_cost(self) -> dict[str, float]:
        """The plan's expected cost for the chosen candidate, by component when it has them."""
        cand = self.report.candidate if self.report else None
        if cand is None:
            return {}
        parts = {
            "compute": cand.compute_usd,
            "egress": cand.egress_usd,
            "storage": cand.storage_usd,
            "orchestration": cand.orchestration_usd,
            "labour": cand.labour_usd,
        }
        known = {k: float(v) for k, v in parts.items() if v is not None and v > 0}
        if known:
            return known
        if cand.expected_cost_usd is not None:
            return {"total": cand.expected_cost_usd}
        return {}

    def overview(self) -> dict[str, Any]:
        """The first screen: where, why there, law, from what, how it went, cost."""
        return overview(self)

    def regional_summary(self) -> dict[str, Any] | None:
        r = self.regional
        if r is None:
            return None
        return {
            "regions": r.regions,
            "aggregation_region": r.aggregation_region,
            "local_steps": r.local_steps,
            "local_steps_basis": r.local_steps_basis,
            "rounds_planned": r.rounds_planned,
            "rounds_completed": r.rounds_completed,
            "codec": r.codec,
            "bytes_crossing": r.links.bytes_crossing if r.links else None,
            "bytes_per_round": r.bytes_per_round,
            "shard_bytes_crossing": r.links.shard_bytes_crossing if r.links else None,
            "egress_usd": r.links.egress_usd if r.links else None,
            "provisioned": r.provisioned,
            "torn_down": r.torn_down,
            "rounds": [
                {
                    "round": x.round,
                    "loss": x.loss,
                    "accepted": x.accepted,
                    "dropped": x.dropped,
                    "late": x.late,
                    "bytes_crossing": x.bytes_crossing,
                }
                for x in r.rounds
            ],
            "attempts": [a.model_dump() for a in r.attempts],
            "workflow": (
                self.report.workflow.to_json() if self.report and self.report.workflow else None
            ),
        }

    def _failure(self) -> dict[str, Any] | None:
        if self.report is not None and self.report.failure:
            return self.report.failure.to_json()
        return None

    def summary(self) -> dict[str, Any]:
        """Everything the text and HTML reports show, as plain JSON."""
        cost = self.cost
        return {
            "run_id": self.run_id,
            "kind": self.kind,
            "name": self.name,
            "team": self.team,
            "status": self.status,
            "exit_code": self.exit_code,
            "ending": ending_json(self.ending, self.exit_code, self.run_id, self.dir.parent),
            "wall_seconds": round(self.wall_seconds, 3),
            "steps": [
                {
                    "name": s.name,
                    "status": s.status,
                    "seconds": s.seconds,
                    "exit_code": s.exit_code,
                    "attempts": s.attempts,
                }
                for s in self.steps
            ],
            "gpu_type": self.gpu_type,
            "gpu_count": self.gpu_count,
            # the ledger's precision (burst.admission.admit.settle): one figure, printed alike
            "gpu_hours": None if self.gpu_hours is None else round(self.gpu_hours, 6),
            "gpu_hours_basis": self.gpu_hours_basis,
            "cost_usd": {k: round(v, 4) for k, v in cost.items()},
            "cost_total_usd": round(sum(cost.values()), 4) if cost else None,
            "cost_source": self.cost_source,
            "expected_cost_usd": {k: round(v, 4) for k, v in self.expected_cost.items()},
            "budget_usd": self.budget_usd,
            "ledger": self.ledger,
            "preemptions": self.preemptions,
            "recovery_sources": dict(self.report.recovery_sources) if self.report else {},
            "recovery_split": (
                self.report.recovery_split.median_s
                if self.report and self.report.recovery_split
                else {}
            ),
            "checkpoints": self.checkpoints,
            "checkpoint_bytes": self.checkpoint_bytes,
            "egress_bytes": self.egress,
            "provision_attempts": self.provision_attempts,
            "resources_remaining": self.leaks,
            "final_step": self.report.final_step if self.report else None,
            "final_weights_sha256": self.report.final_weights_sha256 if self.report else None,
            "terraform_state": self.report.terraform_state if self.report else None,
            "failure": self._failure(),
            "regional": self.regional_summary(),
            "overview": self.overview(),
            "timeline_source": self.timeline_source,
            "events": [
                {"kind": e.kind, "at": e.at, "step": e.step, "detail": e.detail}
                for e in self.events
            ],
            "metric_files": self.metrics.files,
            "warnings": self.warnings,
        }


# -- loading ---------------------------------------------------------------------------------


def resolve_run_dir(run: str, root: Path | None = None) -> Path:
    """RUN is a run id under the runs root, or the path of a run directory."""
    p = Path(run)
    if p.is_dir() and ((p / "report.json").exists() or (p / "docs").is_dir()):
        return p.resolve()
    if not RUN_ID_RE.match(run):
        raise BadInputError(f"run {run!r} is neither a run directory nor a valid run id")
    d = (root or runs_root()) / run
    if not d.is_dir():
        raise BadInputError(f"run {run!r} not found: no directory {d}")
    marks = ("report.json", "spec.yaml", "docs", "events.jsonl", "heartbeat/driver.json")
    if not any((d / n).exists() for n in marks):
        # not a run (the quickstart's checkpoint store, runs/checkpoints): `burst runs`
        # leaves it out, and status, logs, report, cancel and down say it is no run (a run
        # that has just begun has its driver's heartbeat, before anything else)
        raise BadInputError(f"run {run!r} not found: {d} holds no run (no report.json or docs/)")
    return d


def load_run(run_dir: Path) -> RunView:
    """The run as its directory tells it. A run that ends while it is read (no report at the
    first look, its driver's lease released by the last) is read again: its report is there
    then, and the run is not shown lost or unknown in between."""
    view = _load_run(run_dir)
    if view.report is None and view.status != RUNNING and (run_dir / "report.json").exists():
        view = _load_run(run_dir)
    return view


def _load_run(run_dir: Path) -> RunView:
    warnings: list[str] = []
    report = _read_report(run_dir / "report.json", warnings)
    spec = _read_yaml(run_dir / "spec.yaml", warnings)
    metrics = read_metric_files(metrics_dir(run_dir).glob("*.prom"))
    log_records = _read_log_events(run_dir / "logs")
    steps = _steps(report, run_dir)
    status: str
    live_until: float | None = None
    if report is not None:
        status = report.status
    else:  # no report: the driver's heartbeat says whether anything still drives the run
        status, live_until = _undriven_status(run_dir, steps, log_records, warnings)
        for s in steps:  # a step that started and never ended goes with its run
            if s.status == RUNNING and status != RUNNING:
                s.status = "lost"

    source, started = _place_steps(steps, log_records, live_until)
    records = attempt_records.read_file(run_dir / ATTEMPTS_FILE)
    events, attempts = _events(log_records, started, steps, records)
    run_id = report.run_id if report is not None else run_dir.name
    return RunView(
        run_id=run_id,
        dir=run_dir,
        status=status,
        report=report,
        spec=spec,
        steps=steps,
        events=events,
        metrics=metrics,
        timeline_source=source,
        started_at=started,
        attempts=attempts,
        warnings=warnings,
        region_teardowns=_region_teardowns(
            run_dir, report.regional if report is not None else None, warnings
        ),
        live_until=live_until,
    )


def _undriven_status(
    run_dir: Path,
    steps: list[StepView],
    log_records: dict[str, list[dict[str, Any]]],
    warnings: list[str],
) -> tuple[str, float | None]:
    """A run without a report: ``running`` while its driver's heartbeat is renewed (the
    view goes up to now); else ``reaped`` when `burst reap` / `burst down` destroyed what it
    left, ``lost`` when something of it ran (up to its last sign of life), ``unknown`` when
    nothing did."""
    import time

    from burst.lease import alive, heartbeat_store, heartbeats

    try:
        beat = heartbeats(heartbeat_store(run_dir.name, run_dir)).get("driver")
    except BurstError as exc:  # a heartbeat store that cannot be opened: say so, go on
        warnings.append(f"cannot read the run's heartbeat: {exc.one_line()}")
        beat = None
    if alive(beat):
        return RUNNING, time.time()
    seen = [float(beat.get("renewed_at") or 0.0)] if beat else []
    seen += [s.end if s.end is not None else s.start or 0.0 for s in steps]
    seen += [r["_t"] for recs in log_records.values() for r in recs]
    last = max(seen) if any(seen) else None
    if (run_dir / "report.json").exists():  # written (atomically) as the run ended, now unreadable
        warnings.append("report.json cannot be read: the run ended; how, nothing here tells")
        return UNKNOWN, last
    if (run_dir / REAPED_FILE).exists():  # `burst reap` destroyed what it had left
        reaped = read_json(run_dir / REAPED_FILE, warnings)
        warnings.append(
            f"reaped at {reaped.get('reaped_at')} by `burst reap` or `burst down` (its runner "
            f"had died): {reaped.get('resources_remaining')} resource(s) left after it"
        )
        return Ending.REAPED.value, last
    if beat is None and not steps and not log_records:
        warnings.append("no report.json and no heartbeat: nothing tells how the run went")
        return UNKNOWN, None
    how = "its driver's heartbeat lapsed" if beat is not None else "nothing drives it"
    warnings.append(f"no report.json and {how}: the run was killed or lost")
    return Ending.LOST.value, last


def _read_report(path: Path, warnings: list[str]) -> RunReport | None:
    """report.json as its model; None (with a warning naming the field) when it is missing
    or of another shape: the view then shows what the other sources know."""
    if not path.exists():
        return None
    raw = read_json(path, warnings)
    if not raw:
        return None
    try:
        return parse_document(RunReport, raw, path.name)
    except DocumentError as exc:
        warnings.append(f"{exc.one_line()}: shown as if there were no report")
        return None


def _region_teardowns(
    run_dir: Path, regional: RegionalSection | None, warnings: list[str]
) -> dict[str, TeardownDocument]:
    out: dict[str, TeardownDocument] = {}
    for region in regional.regions if regional is not None else []:
        raw = read_json(run_dir / f"teardown-{region}.json", warnings)
        if not raw:
            continue
        try:
            out[region] = parse_document(TeardownDocument, raw, f"teardown-{region}.json")
        except DocumentError as exc:
            warnings.append(exc.one_line())
    return out


def _steps_from_events(path: Path) -> list[StepView]:
    """The steps of ``events.jsonl`` (the runner records each step's start, requeues and end
    with its exit code, epoch seconds), in the order they first started. A step placed again
    (train requeued in the next candidate) runs again from its new start; one that started and
    has not ended is ``running`` (its run's heartbeat then says whether it still is)."""
    out: dict[str, StepView] = {}
    try:
        text = read_bytes(path, what="run events", max_bytes=LOG_MAX_BYTES).decode(
            "utf-8", errors="replace"
        )
    except BadInputError:
        return []
    for line in text.splitlines():
        try:
            rec = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if not isinstance(rec, dict) or not isinstance(rec.get("step"), str):
            continue
        t, status = _num(rec.get("t")), str(rec.get("status"))
        if t is None:
            continue
        view = out.get(rec["step"])
        if view is None:
            view = out[rec["step"]] = StepView(rec["step"], RUNNING, 0.0, start=t)
            if status == "started":
                continue
        if status == "started":  # placed again: running from here on
            view.status, view.end, view.exit_code = RUNNING, None, None
            view.attempts += 1
            continue
        if status == "requeued":
            view.attempts += 1
            continue
        code = _int(rec.get("exit_code"))
        if "exit_code" not in rec:  # a timeline written before exit codes were recorded
            code = 0 if status == "succeeded" else None
        if status == "skipped":
            view.status = status
        else:  # succeeded only with exit code 0; anything else that ended failed
            view.status = "succeeded" if status == "succeeded" and code == 0 else "failed"
        view.end = t
        view.seconds = max(t - (view.start or t), 0.0)
        view.exit_code = code
    return list(out.values())


def _steps(report: RunReport | None, run_dir: Path) -> list[StepView]:
    out: list[StepView] = []
    if report is not None:
        for item in report.steps:
            out.append(
                StepView(
                    name=item.name,
                    status=item.status,
                    seconds=max(_num(item.seconds) or 0.0, 0.0),
                    exit_code=item.exit_code,
                    attempts=item.attempts or 1,
                    start=epoch_seconds(item.started_at),
                    end=epoch_seconds(item.ended_at),
                )
            )
        return out
    if (run_dir / EVENTS_FILE).exists():  # the runner's own timeline
        return _steps_from_events(run_dir / EVENTS_FILE)
    # No report and no timeline (steps run by hand, a run directory of an older burst): the
    # step documents. A document says a step wrote it, not how its process ended: only one
    # that records its exit code (a failed step's) says that much.
    docs = run_dir / "docs"
    for path in (
        sorted(docs.glob("*.json"), key=lambda p: p.stat().st_mtime) if docs.is_dir() else []
    ):
        doc = read_json(path, [])
        code = _int(doc.get("exit_code"))
        out.append(
            StepView(
                name=path.stem,
                status=UNKNOWN if code is None else ("succeeded" if code == 0 else "failed"),
                seconds=max(_num(doc.get("seconds")) or 0.0, 0.0),
                exit_code=code,
            )
        )
    return out


def _place_steps(
    steps: list[StepView],
    log_records: dict[str, list[dict[str, Any]]],
    live_until: float | None = None,
) -> tuple[str, float | None]:
    """Give every step a start and end on the timeline (seconds from the run's start). A step
    that has not ended (running, or lost with its run) goes up to ``live_until``."""
    # 1. Times recorded in report.json or the runner's timeline.
    if steps and all(s.start is not None for s in steps if s.status != "skipped"):
        origin = min(s.start for s in steps if s.start is not None)
        for s in steps:
            if s.start is None:
                continue
            if s.end is None and live_until is not None:
                s.seconds = max(live_until - s.start, 0.0)
            s.end = (s.end if s.end is not None else s.start + s.seconds) - origin
            s.start -= origin
        return "recorded", origin
    # 2. First and last JSON log record of each step.
    spans = {
        name: (min(r["_t"] for r in recs), max(r["_t"] for r in recs))
        for name, recs in log_records.items()
        if recs
    }
    if any(s.name in spans for s in steps) and all(
        s.name in spans for s in steps if s.status != "skipped" and s.seconds
    ):
        origin = min(spans[s.name][0] for s in steps if s.name in spans)
        for s in steps:
            if s.name in spans:
                first, last = spans[s.name]
                s.start = first - origin
                s.end = max(last - origin, s.start + s.seconds)
        return "logs", origin
    # 3. One after another, in order, each as long as it took.
    t = 0.0
    for s in steps:
        s.start, s.end = t, t + s.seconds
        t = s.end
    return "sequential", None


def _events(
    log_records: dict[str, list[dict[str, Any]]],
    origin: float | None,
    steps: list[StepView],
    attempts: list[TrainAttempt],
) -> tuple[list[Event], list[Attempt]]:
    """Events on the timeline, from (in order) JSON-line logs, the train step's attempt
    records, and, as a last resort, steps that ended with exit 75."""
    # Absolute times are placed against the run's origin; without one (steps laid out one
    # after another), against the start of their own step's bar and that step's first record.
    anchors: dict[str, float] = {}
    for step, recs in log_records.items():
        if recs:
            anchors[step] = min(r["_t"] for r in recs)
    starts = [t for a in attempts if (t := epoch_seconds(a.started_at)) is not None]
    if starts:
        anchors["train"] = min([*starts, anchors.get("train", starts[0])])

    def place(t: float | None, step: str | None) -> float | None:
        if t is None:
            return None
        if origin is not None:
            return t - origin
        bar = next((s for s in steps if s.name == step and s.start is not None), None)
        if bar is None or bar.start is None or step not in anchors:
            return None
        return bar.start + t - anchors[step]

    out: list[Event] = []
    for step, recs in log_records.items():
        for r in recs:
            kind = {ev.PREEMPTION: "preemption", ev.CHECKPOINT: "checkpoint"}.get(
                str(r.get("event"))
            )
            if kind is None:
                continue
            detail = ", ".join(
                f"{k}={r[k]}" for k in ("train_step", "tier", "bytes", "source") if k in r
            )
            out.append(Event(kind, place(r["_t"], step), step, detail))
    spans: list[Attempt] = []
    from_attempts: list[Event] = []
    for a in attempts:
        n = a.attempt or len(spans) + 1
        outcome = a.outcome or ("preempted" if a.preempted else "unknown")
        spans.append(
            Attempt(
                n,
                place(epoch_seconds(a.started_at), "train"),
                place(epoch_seconds(a.finished_at), "train"),
                outcome,
            )
        )
        if a.preempted:
            received = a.notice.received_at if a.notice else None
            t = epoch_seconds(received) or epoch_seconds(a.finished_at)
            detail = f"attempt {n} at step {a.ended_at_step}"
            if a.notice is not None and a.notice.source:
                detail += f" ({a.notice.source})"
            from_attempts.append(Event("preemption", place(t, "train"), "train", detail))
        save = a.emergency_save
        if save is not None and save.committed_at is not None:
            from_attempts.append(
                Event(
                    "checkpoint",
                    place(epoch_seconds(save.committed_at), "train"),
                    "train",
                    f"emergency {save.tier} save at step {save.committed_step}",
                )
            )
    for kind in ("preemption", "checkpoint"):
        if not any(e.kind == kind for e in out):
            out += [e for e in from_attempts if e.kind == kind]
    if not any(e.kind == "preemption" for e in out):
        # Without any record, a step that ended with exit 75 was preempted at its end.
        for s in steps:
            if s.exit_code == EXIT_PREEMPTED:
                out.append(Event("preemption", s.end, s.name, "exit 75"))
    out.sort(key=lambda e: (e.at is None, e.at or 0.0))
    return out, spans


def _read_log_events(logs: Path) -> dict[str, list[dict[str, Any]]]:
    """JSON-line records of each step's log, with their time parsed into ``_t``; other lines
    (human-readable logs, tracebacks) are ignored."""
    out: dict[str, list[dict[str, Any]]] = {}
    if not logs.is_dir():
        return out
    for path in sorted(logs.glob("*.log")):
        recs: list[dict[str, Any]] = []
        try:  # bounded: a FIFO or a device in the run directory does not block the report
            text = read_bytes(path, what="step log", max_bytes=LOG_MAX_BYTES).decode(
                "utf-8", errors="replace"
            )
        except BadInputError:
            continue
        for line in text.splitlines():
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                rec = json.loads(line)
            except (ValueError, RecursionError):  # not JSON, nested too deep, a huge number
                continue
            if not isinstance(rec, dict):
                continue
            t = epoch_seconds(rec.get("ts"))
            if t is None:
                continue
            rec["_t"] = t
            recs.append(rec)
        out[path.stem] = recs
    return out


def _read_yaml(path: Path, warnings: list[str]) -> dict[str, Any]:
    if not path.exists() and not path.is_symlink():
        return {}
    try:
        doc = load_yaml_file(path, what="run's spec")
    except BadInputError:
        warnings.append(f"{path.name}: unreadable YAML")
        return {}
    return doc if isinstance(doc, dict) else {}


def _dig(d: Any, *keys: str) -> Any:
    for k in keys:
        if not isinstance(d, dict):
            return None
        d = d.get(k)
    return d


def _str(v: Any) -> str | None:
    return (
        str(v) if isinstance(v, str | int | float) and not isinstance(v, bool) and v != "" else None
    )


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    f = float(v)
    return f if f == f and f not in (float("inf"), float("-inf")) else None


def _int(v: Any) -> int | None:
    n = _num(v)
    return int(n) if n is not None else None
