"""What to save when a preemption notice arrives: what fits in the time left.

The time a save takes is estimated from what the run measured (``SaveMeter``): the blocking
cost of a save (tensors copied out of the training state), and the upload time of the
checkpoints already written, fitted as a fixed cost plus bytes over throughput. A full
checkpoint if it fits, else weights only, else nothing (the last committed checkpoint
stands). An estimate is multiplied by ``SAFETY`` and a reserve is kept
for the process to exit before the deadline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

SAFETY = 2.0  # benchmarks/preemption.py: actual / estimate up to ~1.9 on a busy machine
RESERVE_S = 1.0
# Throughput assumed before any checkpoint of this run was measured: a conservative figure for
# a remote object store from a GPU node (the catalog assumes 0.5 GB/s).
ASSUMED_BYTES_PER_S = 50e6
MAX_SAMPLES = 8


@dataclass(frozen=True)
class SaveCosts:
    full_bytes: int
    weights_bytes: int
    bytes_per_s: float | None  # measured upload throughput; None if nothing was measured yet
    blocking_s_per_byte: float = 0.0  # measured copy-out cost per byte
    pending_s: float = 0.0  # time still needed by a background save already under way
    fixed_s: float = 0.0  # measured cost of any save whatever its size (commit, round trips)

    def estimate_s(self, tier: str) -> float:
        n = self.full_bytes if tier == "full" else self.weights_bytes
        rate = self.bytes_per_s or ASSUMED_BYTES_PER_S
        return self.pending_s + self.fixed_s + n * self.blocking_s_per_byte + n / rate


@dataclass
class SaveMeter:
    """What saves cost on this run: ``upload_s = fixed_s + bytes / bytes_per_s``, fitted by
    least squares on the last commits (a small save is dominated by its fixed cost, a large one
    by throughput), and the blocking cost per byte."""

    bytes_per_s: float | None = None
    fixed_s: float = 0.0
    blocking_s_per_byte: float = 0.0
    last_upload_s: float = 0.0
    commits: int = 0
    samples: list[tuple[int, float]] = field(default_factory=list)  # (bytes sent, upload s)

    def record(self, total_bytes: int, sent_bytes: int, blocking_s: float, upload_s: float) -> None:
        self.commits += 1
        self.last_upload_s = upload_s
        sent = sent_bytes or total_bytes
        if sent > 0 and upload_s > 0:
            self.samples = [*self.samples, (sent, upload_s)][-MAX_SAMPLES:]
            self._fit()
        if total_bytes > 0:
            self.blocking_s_per_byte = blocking_s / total_bytes

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
        )

    def as_dict(self) -> dict[str, float]:
        out = {"blocking_s_per_byte": self.blocking_s_per_byte, "fixed_s": self.fixed_s}
        if self.bytes_per_s is not None:
            out["bytes_per_s"] = self.bytes_per_s
        return out

    @staticmethod
    def from_dict(d: dict[str, Any] | None) -> SaveMeter:
        d = d or {}
        rate = d.get("bytes_per_s")
        return SaveMeter(
            bytes_per_s=float(rate) if isinstance(rate, int | float) else None,
            fixed_s=float(d.get("fixed_s") or 0.0),
            blocking_s_per_byte=float(d.get("blocking_s_per_byte") or 0.0),
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

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("seconds_left", "estimate_full_s", "estimate_weights_s", "bytes_per_s"):
            if d[k] is not None:
                d[k] = round(d[k], 4)
        return d


def choose_emergency_save(
    seconds_left: float | None,
    costs: SaveCosts,
    safety: float = SAFETY,
    reserve_s: float = RESERVE_S,
) -> EmergencyChoice:
    full = costs.estimate_s("full")
    weights = costs.estimate_s("weights")
    source = "measured" if costs.bytes_per_s else "assumed"

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
        )

    if seconds_left is None:
        return make("full", "no deadline known: full checkpoint")
    budget = seconds_left - reserve_s
    if full * safety <= budget:
        return make(
            "full",
            f"full checkpoint fits: ~{full:.3f}s x{safety:g} of "
            f"{seconds_left:.1f}s left ({source} throughput)",
        )
    if weights * safety <= budget:
        return make(
            "weights",
            f"full checkpoint (~{full:.3f}s x{safety:g}) does not fit "
            f"{seconds_left:.1f}s left; weights-only (~{weights:.3f}s) does",
        )
    return make(
        "none",
        f"no checkpoint fits {seconds_left:.1f}s left (weights-only needs "
        f"~{weights:.3f}s x{safety:g} + {reserve_s:g}s reserve): relying on the last "
        "committed checkpoint",
    )
