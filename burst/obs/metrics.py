"""Run metrics (prometheus-client), labelled for FinOps with run id, team, experiment, priority.

One ``RunMetrics`` per step process, on its own registry (never the global one, so tests and
several runs in one process do not collide). Three ways out:

* ``serve(port)``: the train step serves ``/metrics`` for Prometheus to scrape while it runs;
* ``write_textfile(path)``: short steps (and train, at each checkpoint and on exit) write the
  text exposition to ``runs/<run-id>/metrics/<step>[.<attempt>].prom``, which the report reads;
* ``push(gateway_url)``: Pushgateway-compatible push, grouped by job, run id and step.

Families (the exposition adds ``_total`` to counters and ``_bucket/_sum/_count`` to histograms):

    burst_gpu_wait_seconds            gauge      submit to first training step
    burst_preemptions_total           counter    preemption notices acted on
    burst_checkpoint_bytes            histogram  bytes written per checkpoint, label tier
    burst_checkpoint_seconds          histogram  seconds per checkpoint, label tier
    burst_checkpoints_committed_total counter    committed checkpoints, label tier
    burst_checkpoint_stall_seconds    histogram  training blocked per checkpoint
    burst_egress_bytes                counter    bytes moved between regions, src/dst_region
    burst_provision_attempts_total    counter    provision attempts, labels region, outcome
    burst_cost_usd                    gauge      running cost estimate, label component
    burst_resources_leaked            gauge      resources left after teardown
    burst_recovery_seconds            gauge      median seconds per restart term, label term
                                                 (burst.obs.recovery_split; term=gap: all)
    burst_restarts                    gauge      restarts of the train step so split
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, write_to_textfile

from burst.errors import BadInputError

log = logging.getLogger(__name__)

BASE_LABELS = ("run_id", "team", "experiment", "priority")
# Checkpoint tiers as the checkpoint engine names them ("full", "weights"); any short label.
TIER_RE = re.compile(r"^[a-z][a-z0-9_-]{0,31}$")
COST_COMPONENTS = ("compute", "egress", "storage", "orchestration")
PROVISION_OUTCOMES = ("ok", "no_capacity", "error")

# Checkpoint sizes from a few MB (the quickstart) to a few TB (a large model's full state).
BYTES_BUCKETS = tuple(float(4**k * 1024 * 1024) for k in range(0, 12))
SECONDS_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0)
_LABEL_VALUE_RE = re.compile(r"^[^\n\r]{0,200}$")


def metrics_dir(run_dir: Path) -> Path:
    """Where a run's metric files live: ``runs/<run-id>/metrics``."""
    return run_dir / "metrics"


def metrics_file(run_dir: Path, step: str, attempt: int | None = None) -> Path:
    """``metrics/<step>.prom``, or ``metrics/<step>.<attempt>.prom`` for retried steps (train):
    every attempt keeps its own file, so counters of a requeued step add up in the report."""
    name = step if attempt is None or attempt <= 1 else f"{step}.{attempt}"
    return metrics_dir(run_dir) / f"{name}.prom"


@dataclass
class RunMetrics:
    """The metrics of one step of one run. All methods are cheap and thread-safe."""

    run_id: str
    team: str = "unknown"
    experiment: str = "unknown"
    priority: str = "normal"
    registry: CollectorRegistry = field(default_factory=CollectorRegistry)

    def __post_init__(self) -> None:
        for name in BASE_LABELS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value or not _LABEL_VALUE_RE.match(value):
                raise BadInputError(f"metric label {name}={value!r} must be a one-line string")
        r = self.registry
        base = list(BASE_LABELS)
        self._gpu_wait = Gauge(
            "burst_gpu_wait_seconds",
            "Seconds from submission to the first training step.",
            base,
            registry=r,
        )
        self._preemptions = Counter(
            "burst_preemptions", "Preemption notices acted on.", base, registry=r
        )
        self._ckpt_bytes = Histogram(
            "burst_checkpoint_bytes",
            "Bytes written per checkpoint, by storage tier.",
            [*base, "tier"],
            buckets=BYTES_BUCKETS,
            registry=r,
        )
        self._ckpt_seconds = Histogram(
            "burst_checkpoint_seconds",
            "Seconds per checkpoint (stage to commit), by tier.",
            [*base, "tier"],
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self._ckpt_committed = Counter(
            "burst_checkpoints_committed",
            "Checkpoints committed (manifest written), by tier.",
            [*base, "tier"],
            registry=r,
        )
        self._stall = Histogram(
            "burst_checkpoint_stall_seconds",
            "Seconds training was blocked per checkpoint.",
            base,
            buckets=SECONDS_BUCKETS,
            registry=r,
        )
        self._egress = Counter(
            "burst_egress_bytes",
            "Bytes moved between regions.",
            [*base, "src_region", "dst_region"],
            registry=r,
        )
        self._provision = Counter(
            "burst_provision_attempts",
            "Provision attempts, by outcome.",
            [*base, "region", "outcome"],
            registry=r,
        )
        self._cost = Gauge(
            "burst_cost_usd",
            "Running cost estimate in USD, by component.",
            [*base, "component"],
            registry=r,
        )
        self._leaked = Gauge(
            "burst_resources_leaked", "Resources of the run left after teardown.", base, registry=r
        )
        self._recovery = Gauge(
            "burst_recovery_seconds",
            "Median seconds of each term of the run's restarts (burst.obs.recovery_split), "
            "and of their whole gap (term=gap).",
            [*base, "term"],
            registry=r,
        )
        self._restarts = Gauge(
            "burst_restarts", "Restarts of the train step (the recovery split's).", base, registry=r
        )
        self._base = {n: getattr(self, n) for n in BASE_LABELS}

    @classmethod
    def for_job(cls, run_id: str, job: Any) -> RunMetrics:
        """From a ``BurstJob`` (team, experiment, priority); experiment defaults to the name."""
        return cls(
            run_id=run_id,
            team=str(getattr(job, "team", None) or "unknown"),
            experiment=str(getattr(job, "experiment", None) or getattr(job, "name", "unknown")),
            priority=str(getattr(job, "priority", None) or "normal"),
        )

    # -- recording -----------------------------------------------------------------------

    def set_gpu_wait(self, seconds: float) -> None:
        self._gpu_wait.labels(**self._base).set(_non_negative("gpu wait seconds", seconds))

    def record_preemption(self) -> None:
        self._preemptions.labels(**self._base).inc()

    def record_checkpoint(
        self, tier: str, nbytes: int, seconds: float, *, committed: bool = True
    ) -> None:
        """One checkpoint of ``tier`` (``full``, ``weights``) written in ``seconds``."""
        if not isinstance(tier, str) or not TIER_RE.match(tier):
            raise BadInputError(f"checkpoint tier {tier!r} must be a short lowercase label")
        labels = {**self._base, "tier": tier}
        self._ckpt_bytes.labels(**labels).observe(_non_negative("checkpoint bytes", nbytes))
        self._ckpt_seconds.labels(**labels).observe(_non_negative("checkpoint seconds", seconds))
        if committed:
            self._ckpt_committed.labels(**labels).inc()

    def record_stall(self, seconds: float) -> None:
        self._stall.labels(**self._base).observe(_non_negative("stall seconds", seconds))

    def record_egress(self, src_region: str, dst_region: str, nbytes: int) -> None:
        self._egress.labels(**self._base, src_region=src_region, dst_region=dst_region).inc(
            _non_negative("egress bytes", nbytes)
        )

    def record_provision_attempt(self, region: str, outcome: str) -> None:
        if outcome not in PROVISION_OUTCOMES:
            raise BadInputError(
                f"provision outcome {outcome!r} is not one of {', '.join(PROVISION_OUTCOMES)}"
            )
        self._provision.labels(**self._base, region=region, outcome=outcome).inc()

    def set_cost(self, component: str, usd: float) -> None:
        """The running estimate of one cost component (compute, egress, storage, orchestration)."""
        if component not in COST_COMPONENTS:
            raise BadInputError(
                f"cost component {component!r} is not one of {', '.join(COST_COMPONENTS)}"
            )
        self._cost.labels(**self._base, component=component).set(_non_negative("cost", usd))

    def set_leaked(self, count: int) -> None:
        self._leaked.labels(**self._base).set(_non_negative("leaked resources", count))

    def set_recovery_split(self, restarts: int, median_s: Mapping[str, float | None]) -> None:
        """The recovery split's medians by term (``burst.obs.recovery_split.medians``); a
        term not known for any restart is left out."""
        self._restarts.labels(**self._base).set(_non_negative("restarts", restarts))
        for term, seconds in median_s.items():
            if seconds is not None:
                value = _non_negative(f"recovery {term} seconds", seconds)
                self._recovery.labels(**self._base, term=term).set(value)

    # -- export --------------------------------------------------------------------------

    def serve(self, port: int, addr: str = "127.0.0.1") -> Any:
        """Serve ``/metrics`` on ``addr:port`` (port 0 picks a free one) in a daemon thread.
        Returns the server; ``server.server_port`` is the bound port, ``shutdown()`` stops it."""
        from prometheus_client import start_http_server

        server, _thread = start_http_server(port, addr=addr, registry=self.registry)
        log.info("serving metrics on http://%s:%d/metrics", addr, server.server_port)
        return server

    def write_textfile(self, path: Path | str) -> Path:
        """Write the text exposition atomically (temp file and rename)."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True)
        write_to_textfile(str(p), self.registry)
        return p

    def push(
        self, gateway_url: str, step: str, *, job: str = "burst", timeout: float = 10.0
    ) -> None:
        """Push to a Prometheus Pushgateway, grouped by run id and step (PUT: replaces the
        group, so a retried step does not double count)."""
        from prometheus_client import push_to_gateway

        push_to_gateway(
            gateway_url,
            job=job,
            registry=self.registry,
            timeout=timeout,
            grouping_key={"run_id": self.run_id, "step": step},
        )

    def exposition(self) -> str:
        from prometheus_client import generate_latest

        return generate_latest(self.registry).decode("utf-8")


def export_from_env(
    metrics: RunMetrics, run_dir: Path, step: str, attempt: int | None = None
) -> list[str]:
    """What a step calls at its end: write its metric file; push as well when
    ``BURST_PUSHGATEWAY`` is set. A failed push is logged, never fatal. Returns where it went."""
    where = [str(metrics.write_textfile(metrics_file(run_dir, step, attempt)))]
    from burst.settings import current

    gateway = current().pushgateway
    if gateway:
        try:
            metrics.push(gateway, step)
            where.append(gateway)
        except OSError as exc:
            log.warning("could not push metrics to %s: %s", gateway, exc)
    return where


@contextmanager
def exported(
    metrics: RunMetrics, run_dir: Path, step: str, attempt: int | None = None
) -> Iterator[RunMetrics]:
    """Export at the end of the block whatever happens in it (done, preempted, failed):
    ``with exported(RunMetrics.for_job(run_id, job), run_dir, "train", attempt) as m: ...``"""
    try:
        yield metrics
    finally:
        try:
            export_from_env(metrics, run_dir, step, attempt)
        except OSError as exc:  # never hide the block's own outcome behind an export error
            log.warning("could not write the metrics of %s: %s", step, exc)


def _non_negative(what: str, value: float) -> float:
    v = float(value)
    if not v >= 0:  # also rejects NaN
        raise BadInputError(f"{what} must be a non-negative number, got {value!r}")
    return v


# -- reading (for the report) ------------------------------------------------------------


@dataclass
class MetricTotals:
    """Metric files of a run merged: counters and histogram sums and counts add up across
    files (one per step or attempt); gauges take the largest value seen (each has one owner)."""

    samples: dict[tuple[str, tuple[tuple[str, str], ...]], float] = field(default_factory=dict)
    files: list[str] = field(default_factory=list)

    def total(self, name: str, **match: str) -> float:
        return sum(
            v
            for (n, labels), v in self.samples.items()
            if n == name and all(dict(labels).get(k) == w for k, w in match.items())
        )

    def by_label(self, name: str, label: str) -> dict[str, float]:
        out: dict[str, float] = {}
        for (n, labels), v in self.samples.items():
            if n == name:
                key = dict(labels).get(label, "")
                out[key] = out.get(key, 0.0) + v
        return out

    def has(self, name: str) -> bool:
        return any(n == name for n, _ in self.samples)


_SKIP_SUFFIXES = ("_created", "_bucket")


def read_metric_files(paths: Iterable[Path]) -> MetricTotals:
    """Parse text-exposition files. A file that does not parse is skipped with a warning
    (a report must render from whatever a crashed run left behind)."""
    from prometheus_client.parser import text_string_to_metric_families

    from burst.errors import BadInputError
    from burst.inputs import read_text

    totals = MetricTotals()
    for path in sorted(paths):
        try:  # bounded: a FIFO or a device among the metric files does not block the report
            text = read_text(path, what="metric file")
            families = list(text_string_to_metric_families(text))
        except (BadInputError, ValueError) as exc:
            log.warning("skipping metric file %s: %s", path, exc)
            continue
        totals.files.append(str(path))
        for fam in families:
            if not fam.name.startswith("burst_"):
                continue
            for s in fam.samples:
                if s.name.endswith(_SKIP_SUFFIXES):
                    continue
                key = (s.name, tuple(sorted(s.labels.items())))
                if fam.type == "gauge":
                    totals.samples[key] = max(totals.samples.get(key, s.value), s.value)
                else:
                    totals.samples[key] = totals.samples.get(key, 0.0) + s.value
    return totals
