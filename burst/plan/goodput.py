"""A deterministic discrete-event simulator of training under pre-emptions (``burst simulate``).

The model (docs/planning.md "Goodput simulator"):

* The job needs ``work_s`` seconds of useful training, in steps of ``step_s``.
* Every ``interval_s`` of training (rounded up to whole steps) it checkpoints: training blocks
  for ``checkpoint_cost_s`` (copy into a reused host buffer), then the upload runs in the
  background for ``upload_s``; the checkpoint counts (is committed) only when the upload ends.
  The buffer is reused, so a checkpoint that falls due while the previous upload still runs
  waits for it (that wait is paid, not useful).
* Pre-emptions arrive as a Poisson process with mean ``mtbf_s`` of running time (seeded), or
  at the times of a trace. ``notice_s`` before each one the job hears the notice, stops at
  the next step boundary and saves what fits before the deadline: an emergency checkpoint if
  waiting for an in-flight upload, one copy and one upload fit, else it relies on the last
  committed checkpoint (an in-flight upload that ends before the deadline still commits).
* After a pre-emption the work since the last committed checkpoint is lost and a replacement
  costs ``restart_s`` of paid time before training resumes from that checkpoint.

Goodput = useful training time / paid time. Paid time splits exactly into useful work, lost
work, checkpoint blocking, upload waits, notice time after the stop, and restarts.

The on-demand fallback and the move back to spot are the mode of ``burst.plan.fallback``
(the runtime's own rule, ``burst.recovery.back_to_spot``).
"""

from __future__ import annotations

import logging
import math
import random
import statistics
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

from burst.errors import BadInputError
from burst.inputs import parse_json, read_text, short
from burst.plan.interval import choose_interval

log = logging.getLogger(__name__)

DEFAULT_UPLOAD_FACTOR = 40.0  # host copy ~20 GB/s (measured) / ~0.5 GB/s upload (assumed)
COMPARE_FACTORS = (0.25, 1.0, 4.0)


MAX_SECONDS = 1e12  # ~31,700 years: any duration beyond is a mistake, not a plan
MIN_STEP_S = 1e-6
# Work bound: checkpoints + pre-emptions simulated in all (across replicas). A longer run is
# simulated over a sampled window of its work (goodput is a ratio of sums, so the window
# estimates it); the absolute figures are scaled back up, and the summary says so.
MAX_EVENTS = 250_000
# A sampled window spans at least this many MTBFs (when the whole run does), or the
# simulation is refused: a window shorter would see too few pre-emptions to say anything.
SAMPLE_MTBFS = 10
MAX_LOOP_PER_RUN = 1_000_000  # a hard stop on one run's event loop, whatever happens


@dataclass(frozen=True)
class SimParams:
    mtbf_s: float = math.inf
    notice_s: float = 0.0
    checkpoint_cost_s: float = 5.0
    step_s: float = 1.0
    upload_s: float | None = None  # None: checkpoint_cost_s * DEFAULT_UPLOAD_FACTOR
    restart_s: float = 300.0
    work_s: float | None = None  # None: 100 x MTBF (or past the end of the trace)

    def resolved_upload_s(self) -> float:
        if self.upload_s is not None:
            return self.upload_s
        return self.checkpoint_cost_s * DEFAULT_UPLOAD_FACTOR

    def check(self) -> None:
        for name in ("notice_s", "checkpoint_cost_s", "restart_s", "step_s", "upload_s", "work_s"):
            value = getattr(self, name)
            if value is not None and not (math.isfinite(value) and value <= MAX_SECONDS):
                flag = name.removesuffix("_s").replace("_", "-")
                raise BadInputError(
                    f"{flag} must be a finite number of seconds <= {MAX_SECONDS:g} (got {value!r})"
                )
        if math.isnan(self.mtbf_s) or (not math.isinf(self.mtbf_s) and self.mtbf_s > MAX_SECONDS):
            raise BadInputError(
                f"mtbf must be a finite number of seconds <= {MAX_SECONDS:g} (got {self.mtbf_s!r})"
            )
        for name in ("notice_s", "checkpoint_cost_s", "restart_s"):
            if getattr(self, name) < 0:
                raise BadInputError(f"{name.removesuffix('_s').replace('_', '-')} must be >= 0")
        if self.step_s <= 0:
            raise BadInputError("step-time must be > 0")
        if self.mtbf_s <= 0:
            raise BadInputError("mtbf must be > 0")
        if self.upload_s is not None and self.upload_s < 0:
            raise BadInputError("upload-time must be >= 0")
        if self.work_s is not None and self.work_s <= 0:
            raise BadInputError("work must be > 0")
        if self.step_s < MIN_STEP_S:
            raise BadInputError(f"step-time must be >= {MIN_STEP_S:g} s (got {self.step_s!r})")


@dataclass
class SimResult:
    interval_s: float
    work_s: float
    paid_s: float = 0.0
    lost_seconds: float = 0.0
    checkpoint_blocking_s: float = 0.0
    upload_wait_s: float = 0.0
    notice_idle_s: float = 0.0
    restart_s: float = 0.0
    preemptions: int = 0
    emergency_saves: int = 0
    checkpoints: int = 0
    finished: bool = True

    @property
    def goodput(self) -> float:
        return self.work_s / self.paid_s if self.paid_s > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "goodput": self.goodput}


class Arrivals(Protocol):
    def next_after(self, t: float) -> float | None: ...

    def notice_before(self, kill: float, default: float) -> float:
        """The notice the pre-emption at ``kill`` gives (``default``: the params')."""
        ...


@dataclass
class PoissonArrivals:
    mtbf_s: float
    rng: random.Random

    def next_after(self, t: float) -> float | None:
        if math.isinf(self.mtbf_s):
            return None
        return t + self.rng.expovariate(1.0 / self.mtbf_s)

    def notice_before(self, kill: float, default: float) -> float:
        return default


@dataclass
class TraceArrivals:
    times: Sequence[float]
    #: each event's own notice, in the order of ``times`` (None: the params' ``notice_s``);
    #: 0 is an event without a notice (a node lost, a rank killed)
    notices: Sequence[float] | None = None
    _i: int = field(default=0)

    def next_after(self, t: float) -> float | None:
        while self._i < len(self.times) and self.times[self._i] <= t:
            self._i += 1
        return self.times[self._i] if self._i < len(self.times) else None

    def notice_before(self, kill: float, default: float) -> float:
        if self.notices is None or self._i >= len(self.times) or self.times[self._i] != kill:
            return default
        return self.notices[self._i]


def _round_up(x: float, step: float) -> float:
    return math.ceil(x / step - 1e-9) * step


def simulate_once(p: SimParams, interval_s: float, arrivals: Arrivals, work_s: float) -> SimResult:
    """One run of ``work_s`` useful seconds under the arrivals. Pure given the arrivals."""
    tau = max(_round_up(interval_s, p.step_s), p.step_s)
    c, u, big_w = p.checkpoint_cost_s, p.resolved_upload_s(), work_s
    res = SimResult(interval_s=tau, work_s=big_w)
    t = work = committed = 0.0
    inflight: tuple[float, float] | None = None  # (upload ends at, work it holds)
    next_ck = tau
    kill = arrivals.next_after(0.0)
    limit_t = max(1000.0 * big_w, 1e6)
    loops = 0

    def preempted(stop_t: float, stopped: bool) -> None:
        """From the notice (or a cut copy) to the restart; updates the state."""
        nonlocal t, work, committed, inflight, next_ck, kill
        assert kill is not None
        saved = False
        if stopped:
            wait = max(0.0, inflight[0] - stop_t) if inflight else 0.0
            needed = wait if (inflight and inflight[1] == work) else wait + c + u
            if stop_t + needed <= kill:
                saved = True
                committed = work
                res.emergency_saves += 1
        if not saved and inflight is not None and inflight[0] <= kill:
            committed = inflight[1]
        if not stopped:  # training ran on to the deadline; all of it is lost below
            work += kill - stop_t
            stop_t = kill
        res.notice_idle_s += kill - stop_t
        res.lost_seconds += work - committed
        res.restart_s += p.restart_s
        res.preemptions += 1
        t = kill + p.restart_s
        work = committed
        inflight = None
        next_ck = committed + tau
        kill = arrivals.next_after(t)

    while True:
        loops += 1
        if t > limit_t or loops > MAX_LOOP_PER_RUN:
            res.finished = False
            break
        notice_at = (
            math.inf if kill is None else max(t, kill - arrivals.notice_before(kill, p.notice_s))
        )
        target = min(next_ck, big_w)
        t_target = t + (target - work)
        if t_target <= notice_at:
            t, work = t_target, target
            if inflight is not None and inflight[0] <= t:
                committed, inflight = inflight[1], None
            if work >= big_w:
                break
            if inflight is not None:  # the checkpoint waits for the reused buffer
                if inflight[0] > notice_at:
                    res.upload_wait_s += notice_at - t
                    t = notice_at
                    preempted(t, stopped=True)
                    continue
                res.upload_wait_s += inflight[0] - t
                t, committed, inflight = inflight[0], inflight[1], None
            if kill is not None and t + c > kill:  # the copy is cut by the pre-emption
                res.checkpoint_blocking_s += kill - t
                t = kill
                preempted(t, stopped=True)
                continue
            res.checkpoint_blocking_s += c
            res.checkpoints += 1
            t += c
            inflight = (t + u, work)
            next_ck = work + tau
            continue
        # the notice arrives while training: stop at the next step boundary if it fits
        work += notice_at - t
        t = notice_at
        assert kill is not None
        to_boundary = _round_up(work, p.step_s) - work
        if t + to_boundary <= kill:
            work += to_boundary
            t += to_boundary
            preempted(t, stopped=True)
        else:
            preempted(t, stopped=False)
    res.paid_s = t
    return res


def default_work_s(p: SimParams, trace: Sequence[float] | None) -> float:
    if p.work_s is not None:
        return p.work_s
    if trace:
        return max(trace) * 1.5
    if math.isinf(p.mtbf_s):
        return 100.0 * 3600.0
    return 100.0 * p.mtbf_s


@dataclass(frozen=True)
class Summary:
    interval_s: float
    replicas: int
    goodput: float
    lost_seconds: float
    paid_s: float
    preemptions: float
    emergency_saves: float
    checkpoints: float
    checkpoint_blocking_s: float
    upload_wait_s: float
    notice_idle_s: float
    restart_s: float
    work_s: float
    finished: bool
    sample_factor: float = 1.0  # > 1: a window of 1/sample_factor of the work was simulated

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def simulate(
    p: SimParams,
    interval_s: float,
    *,
    seed: int = 0,
    replicas: int = 20,
    trace: Sequence[float] | None = None,
    notices: Sequence[float] | None = None,
) -> Summary:
    """Mean over ``replicas`` seeded Poisson runs (or one run of the trace; ``notices``: each
    trace event's own notice, in the trace's order, 0 for an event without one).

    Goodput is total useful time over total paid time across replicas (a ratio of sums).
    """
    p.check()
    if interval_s <= 0:
        raise BadInputError("interval must be > 0")
    if not (math.isfinite(interval_s) and interval_s <= MAX_SECONDS):
        raise BadInputError(f"interval must be a finite number of seconds <= {MAX_SECONDS:g}")
    full_work = default_work_s(p, trace)
    work, factor = full_work, 1.0
    runs: list[SimResult] = []
    if trace is not None:
        if notices is not None and len(notices) != len(trace):
            raise BadInputError(f"{len(notices)} notices for a trace of {len(trace)} events")
        pairs = sorted(zip(trace, notices if notices is not None else trace, strict=True))
        arrivals = TraceArrivals(
            [t for t, _ in pairs], [n for _, n in pairs] if notices is not None else None
        )
        runs.append(simulate_once(p, interval_s, arrivals, work))
    else:
        replicas = max(1, replicas)
        events = expected_events(p, interval_s, work) * replicas
        if events > MAX_EVENTS:
            factor = events / MAX_EVENTS
            work = full_work / factor
            spans = SAMPLE_MTBFS * p.mtbf_s
            if math.isfinite(p.mtbf_s) and full_work >= spans and work < spans:
                raise BadInputError(
                    f"the goodput simulation would take {events:.3g} events (a {interval_s:.3g} s "
                    f"interval against a {p.mtbf_s:.3g} s MTBF, {replicas} runs), more than "
                    f"{MAX_EVENTS}, and a sample short enough would not span {SAMPLE_MTBFS} "
                    "pre-emptions: use a longer interval or step time, or fewer --replicas"
                )
            log.info(
                "goodput simulation sampled: %.3g events expected, %d simulated "
                "(a window of 1/%.3g of the work, figures scaled back up)",
                events,
                MAX_EVENTS,
                factor,
            )
        for i in range(replicas):
            rng = random.Random(f"{seed}:{i}")
            runs.append(simulate_once(p, interval_s, PoissonArrivals(p.mtbf_s, rng), work))
    paid = sum(r.paid_s for r in runs)

    def mean(name: str) -> float:
        return statistics.fmean(float(getattr(r, name)) for r in runs) * factor

    return Summary(
        interval_s=runs[0].interval_s,
        replicas=len(runs),
        goodput=sum(r.work_s for r in runs) / paid if paid > 0 else 0.0,
        lost_seconds=mean("lost_seconds"),
        paid_s=mean("paid_s"),
        preemptions=mean("preemptions"),
        emergency_saves=mean("emergency_saves"),
        checkpoints=mean("checkpoints"),
        checkpoint_blocking_s=mean("checkpoint_blocking_s"),
        upload_wait_s=mean("upload_wait_s"),
        notice_idle_s=mean("notice_idle_s"),
        restart_s=mean("restart_s"),
        work_s=full_work,
        finished=all(r.finished for r in runs),
        sample_factor=factor,
    )


def expected_events(p: SimParams, interval_s: float, work_s: float) -> float:
    """Checkpoints plus pre-emptions one run of ``work_s`` is expected to simulate."""
    tau = max(_round_up(interval_s, p.step_s), p.step_s)
    per_run = work_s / tau + 1.0
    if math.isfinite(p.mtbf_s):
        per_run += (work_s + work_s / tau * p.checkpoint_cost_s) / p.mtbf_s
    return per_run


def trace_mtbf_s(trace: Sequence[float]) -> float:
    """Mean gap between the trace's pre-emptions (from t=0)."""
    times = sorted(trace)
    return times[-1] / len(times)


def young_daly_report(
    p: SimParams,
    *,
    interval_s: float | None = None,
    seed: int = 0,
    replicas: int = 20,
    trace: Sequence[float] | None = None,
) -> dict[str, Any]:
    """The ``burst simulate`` document: goodput at the chosen interval (default Young/Daly)
    and at 1/4 and 4 times the Young/Daly interval."""
    p.check()
    mtbf = trace_mtbf_s(trace) if trace else p.mtbf_s
    if math.isinf(mtbf):
        raise BadInputError("give --mtbf SECONDS or --trace FILE")
    choice = choose_interval(p.checkpoint_cost_s, mtbf, p.resolved_upload_s(), p.step_s)
    yd = choice.interval_s  # Young/Daly clamped to the upload and the step time
    main = simulate(p, interval_s or yd, seed=seed, replicas=replicas, trace=trace)
    comparison = []
    for f in COMPARE_FACTORS:
        s = (
            main
            if (interval_s is None and f == 1.0)
            else simulate(p, yd * f, seed=seed, replicas=replicas, trace=trace)
        )
        comparison.append(
            {
                "factor": f,
                "interval_s": s.interval_s,
                "goodput": s.goodput,
                "lost_seconds": s.lost_seconds,
            }
        )
    by_factor = {c["factor"]: c["goodput"] for c in comparison}
    params = asdict(replace(p, upload_s=p.resolved_upload_s()))
    params["mtbf_s"] = mtbf
    return {
        **main.as_dict(),
        # one name, one quantity (as in the plan and the train document): the raw sqrt(2 C M)
        "young_daly_interval_s": choice.young_daly_s,
        "default_interval_s": yd,
        "interval_reason": choice.reason,
        "comparison": comparison,
        "peak_near_young_daly": by_factor[1.0] > by_factor[0.25]
        and by_factor[1.0] > by_factor[4.0],
        "params": params,
        "seed": seed,
        "arrivals": "trace" if trace else "poisson",
    }


def read_trace(path: str | Path) -> list[float]:
    """Pre-emption times in seconds from the start: one number a line (``#`` comments), or a
    JSON list. One clear line on a bad file."""

    p = Path(path)
    text = read_text(p, what="trace")  # bounded: file type and size
    times: list[float] = []
    if text.lstrip().startswith("["):
        raw = parse_json(text, str(p), what="trace")  # strict: depth, 64-bit ints, NaN
        if not isinstance(raw, list):
            raise BadInputError("a JSON trace must be a list of seconds", where=str(p))
        for i, v in enumerate(raw):
            if (
                isinstance(v, bool)
                or not isinstance(v, int | float)
                or not math.isfinite(v)
                or not 0 <= v <= MAX_SECONDS
            ):
                raise BadInputError(
                    f"entry {i}: must be a number of seconds from 0 to {MAX_SECONDS:g} "
                    f"(got {short(v)})",
                    where=str(p),
                )
            times.append(float(v))
    else:
        for n, line in enumerate(text.splitlines(), 1):
            s = line.split("#", 1)[0].strip()
            if not s:
                continue
            try:
                v = float(s)
            except ValueError:
                raise BadInputError(
                    f"not a number of seconds: {short(s)}", where=f"{p}:{n}"
                ) from None
            if not (math.isfinite(v) and 0 <= v <= MAX_SECONDS):
                raise BadInputError(
                    f"must be a number of seconds from 0 to {MAX_SECONDS:g} (got {short(s)})",
                    where=f"{p}:{n}",
                ) from None
            times.append(v)
    if not times:
        raise BadInputError("the trace holds no pre-emption times", where=str(p))
    return sorted(times)
