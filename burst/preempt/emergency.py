"""What to save when a preemption notice arrives: what commits by half the window.

The time a save takes is estimated from what the run measured (``SaveMeter``): the blocking
cost of a save (tensors copied out of the training state), and the upload time of the
checkpoints already written, fitted as a fixed cost plus bytes over throughput. A full
checkpoint if it fits, else weights only, else nothing (the last committed checkpoint
stands).

The rule (``choose_emergency_save``; issue 44: the notice-to-commit time at most half the
window): a tier fits if ``margin x estimate <= min(TARGET x window - elapsed, seconds_left -
reserve)``, where the window is the notice's (its deadline less when it was received) and
``elapsed`` the time already spent since the notice (the step boundary it waited for, the
ranks agreeing). So an admitted save is predicted to commit by half the window *from the
notice*, and never later than the reserve before the deadline. The older rule (``SAFETY x
estimate <= seconds_left - reserve``) admitted a save predicted to commit at (window -
reserve) / 2 with no time spent, so any detect time, or any error of the estimate above 1.0,
put its worst case past half the window (benchmarks/notice_window.py: 0.53 x).

The margin is the estimate's own error on this run, measured out of sample: each save the
meter records is first compared with what the meter predicted for it before it was measured
(``actual / predicted``, blocking plus upload), and the margin is the largest of the last
``MAX_SAMPLES`` such ratios, never below 1 (the largest, not a mean: the goal is the p99,
and with at most eight ratios the largest is the nearest-rank p99). Emergency saves count as
well (they are recorded like routine ones, and the ratios travel to the next attempt in the
attempt record), so a run whose store slows down widens its own margin. With fewer than
``MIN_RATIOS`` ratios (a new run, or throughput only assumed) the margin is ``SAFETY``:
``benchmarks/preemption.py`` measured actual / estimate up to ~1.9 on a busy machine. A
measured margin is not capped at ``SAFETY``: a run whose estimates err by 3x uses 3.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SAFETY = 2.0  # benchmarks/preemption.py: actual / estimate up to ~1.9 on a busy machine
RESERVE_S = 1.0
TARGET = 0.5  # of the notice's window, from the notice: by when an admitted save commits
# Throughput assumed before any checkpoint of this run was measured: a conservative figure for
# a remote object store from a GPU node (the catalog assumes 0.5 GB/s).
ASSUMED_BYTES_PER_S = 50e6
MAX_SAMPLES = 8
MIN_RATIOS = 2  # measured errors needed before the margin is measured rather than SAFETY


@dataclass(frozen=True)
class SaveCosts:
    full_bytes: int
    weights_bytes: int
    bytes_per_s: float | None  # measured upload throughput; None if nothing was measured yet
    blocking_s_per_byte: float = 0.0  # measured copy-out cost per byte
    pending_s: float = 0.0  # time still needed by a background save already under way
    fixed_s: float = 0.0  # measured cost of any save whatever its size (commit, round trips)
    error: float | None = None  # measured actual / estimate bound (None: SAFETY applies)
    error_saves: int = 0  # how many saves measured it

    def estimate_s(self, tier: str) -> float:
        n = self.full_bytes if tier == "full" else self.weights_bytes
        rate = self.bytes_per_s or ASSUMED_BYTES_PER_S
        return self.pending_s + self.fixed_s + n * self.blocking_s_per_byte + n / rate

    def margin(self) -> tuple[float, str]:
        """The factor an estimate is multiplied by, and where it comes from."""
        if self.error is None or not self.bytes_per_s:
            return SAFETY, "SAFETY: the estimate's error not measured yet"
        return (
            self.error,
            f"the largest actual/estimate of this run's last {self.error_saves} saves",
        )


@dataclass
class SaveMeter:
    """What saves cost on this run: ``upload_s = fixed_s + bytes / bytes_per_s``, fitted by
    least squares on the last commits (a small save is dominated by its fixed cost, a large one
    by throughput), the blocking cost per byte, and how far off the estimate was: each save's
    ``actual / predicted`` before it joined the fit (``ratios``)."""

    bytes_per_s: float | None = None
    fixed_s: float = 0.0
    blocking_s_per_byte: float = 0.0
    last_upload_s: float = 0.0
    commits: int = 0
    samples: list[tuple[int, float]] = field(default_factory=list)  # (bytes sent, upload s)
    ratios: list[float] = field(default_factory=list)  # actual / predicted, out of sample

    def predict_s(self, total_bytes: int, sent_bytes: int) -> float | None:
        """What the meter, as it stands, predicts a save of these bytes takes (blocking and
        upload); None before anything was measured (an assumed rate is no measurement)."""
        if self.bytes_per_s is None:
            return None
        sent = sent_bytes or total_bytes
        return self.fixed_s + total_bytes * self.blocking_s_per_byte + sent / self.bytes_per_s

    def record(self, total_bytes: int, sent_bytes: int, blocking_s: float, upload_s: float) -> None:
        self.commits += 1
        self.last_upload_s = upload_s
        sent = sent_bytes or total_bytes
        predicted = self.predict_s(total_bytes, sent_bytes)
        if predicted and predicted > 0 and upload_s > 0:
            self.ratios = [*self.ratios, (blocking_s + upload_s) / predicted][-MAX_SAMPLES:]
        if sent > 0 and upload_s > 0:
            self.samples = [*self.samples, (sent, upload_s)][-MAX_SAMPLES:]
            self._fit()
        if total_bytes > 0:
            self.blocking_s_per_byte = blocking_s / total_bytes

    def error(self) -> float | None:
        """The estimate's measured error bound: the largest ratio, at least 1; None with fewer
        than ``MIN_RATIOS`` ratios."""
        if len(self.ratios) < MIN_RATIOS:
            return None
        return max(1.0, *self.ratios)

    def _fit(self) -> None:
        xs = [float(x) for x, _ in self.samples]
        ys = [y for _, y in self.samples]
        mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
        var = sum((x - mx) ** 2 for x in xs)
        slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / var if var else 0.0
        fixed = my - slope * mx
        if slope <= 0 or fixed < 0:  # one size only, or noise: the slowest rate seen, no fixed
            slope, fixed = max(y / x for x, y in zip(xs, ys, strict=True)), 0.0
        self.bytes_per_s, self.fixed_s = 1.0 / slope, fixed

    def costs(self, full_bytes: int, weights_bytes: int, pending_s: float = 0.0) -> SaveCosts:
        return SaveCosts(
            full_bytes,
            weights_bytes,
            self.bytes_per_s,
            self.blocking_s_per_byte,
            pending_s,
            self.fixed_s,
            self.error(),
            len(self.ratios),
        )

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "blocking_s_per_byte": self.blocking_s_per_byte,
            "fixed_s": self.fixed_s,
            "error_ratios": [round(r, 4) for r in self.ratios],
        }
        if self.bytes_per_s is not None:
            out["bytes_per_s"] = self.bytes_per_s
        return out

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> SaveMeter:
        d = d or {}
        rate = d.get("bytes_per_s")
        ratios = d.get("error_ratios")
        return SaveMeter(
            bytes_per_s=float(rate) if isinstance(rate, int | float) else None,
            fixed_s=float(d.get("fixed_s") or 0.0),
            blocking_s_per_byte=float(d.get("blocking_s_per_byte") or 0.0),
            ratios=[float(r) for r in ratios if isinstance(r, int | float) and r > 0][-MAX_SAMPLES:]
            if isinstance(ratios, list)
            else [],
        )


def pending_s(
    meter: SaveMeter,
    full_bytes: int,
    weights_bytes: int,
    in_flight: int | None,
    last_full: int | None,
) -> float:
    """How long a save still in flight (its step ``in_flight``; None: none) may take yet, at
    most: the meter's estimate of the whole save, full if it is the last full one handed over
    (step ``last_full``), else weights-only. Not the last commit's upload time: that is 0 until
    this attempt has measured a commit, so the first save of a run, or of a requeued attempt
    (which has its earlier attempts' throughput), was ignored, and the emergency save queued
    behind it took twice its estimate (benchmarks/notice_window.py)."""
    if in_flight is None:
        return 0.0
    tier = "full" if in_flight == last_full else "weights"
    return meter.costs(full_bytes, weights_bytes).estimate_s(tier)


@dataclass(frozen=True)
class EmergencyChoice:
    tier: str  # full | weights | none
    reason: str
    seconds_left: float | None
    estimate_full_s: float
    estimate_weights_s: float
    throughput: str  # measured | assumed
    bytes_per_s: float = 0.0  # the save bandwidth the estimates used
    full_bytes: int = 0
    weights_bytes: int = 0
    margin: float = SAFETY  # the factor the estimates were multiplied by
    margin_source: str = "safety"  # measured | safety
    window_s: float | None = None  # the notice's window (deadline - received)
    elapsed_s: float = 0.0  # spent since the notice when the choice was made
    budget_s: float | None = None  # from the choice, by when the save must commit

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in (
            "seconds_left",
            "estimate_full_s",
            "estimate_weights_s",
            "bytes_per_s",
            "margin",
            "window_s",
            "elapsed_s",
            "budget_s",
        ):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        return d


def choose_emergency_save(
    seconds_left: float | None,
    costs: SaveCosts,
    window_s: float | None = None,
    reserve_s: float = RESERVE_S,
    target: float = TARGET,
) -> EmergencyChoice:
    """Full, weights or none: the largest tier whose estimate, times the margin, commits by
    ``target`` x the window from the notice and by the reserve before the deadline.
    ``window_s``: the notice's whole window (deadline less when it was received); None: the
    notice has just arrived (the window is ``seconds_left``, nothing spent yet)."""
    full = costs.estimate_s("full")
    weights = costs.estimate_s("weights")
    source = "measured" if costs.bytes_per_s else "assumed"
    margin, why_margin = costs.margin()
    window = seconds_left if window_s is None or seconds_left is None else window_s
    elapsed = 0.0 if window is None or seconds_left is None else max(0.0, window - seconds_left)
    budget = (
        None
        if window is None or seconds_left is None
        else min(target * window - elapsed, seconds_left - reserve_s)
    )

    def make(tier: str, reason: str) -> EmergencyChoice:
        rate = costs.bytes_per_s or ASSUMED_BYTES_PER_S
        return EmergencyChoice(
            tier,
            reason,
            seconds_left,
            full,
            weights,
            source,
            rate,
            costs.full_bytes,
            costs.weights_bytes,
            margin,
            "measured" if costs.error is not None and costs.bytes_per_s else "safety",
            window,
            elapsed,
            budget,
        )

    if budget is None:
        return make("full", "no deadline known: full checkpoint")
    within = (
        f"{budget:.1f}s ({target:g} x the {window:.1f}s window, {elapsed:.2f}s spent since the "
        f"notice, {seconds_left:.1f}s left; margin x{margin:.2f}: {why_margin})"
    )
    if full * margin <= budget:
        return make(
            "full",
            f"full checkpoint fits: ~{full:.3f}s x{margin:.2f} within {within}"
            f" ({source} throughput)",
        )
    if weights * margin <= budget:
        return make(
            "weights",
            f"full checkpoint (~{full:.3f}s x{margin:.2f}) does not fit {within}; "
            f"weights-only (~{weights:.3f}s) does",
        )
    return make(
        "none",
        f"no checkpoint fits {within}: weights-only needs ~{weights:.3f}s x{margin:.2f}; "
        "relying on the last committed checkpoint",
    )
