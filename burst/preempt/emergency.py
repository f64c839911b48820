"""What to save when a preemption notice arrives: what fits in the time left.

The time a save takes is estimated from what the run measured: the blocking cost of a save
(tensors copied out of the training state) and the upload throughput of the checkpoints
already written. A full checkpoint if it fits, else weights only, else nothing (the last
committed checkpoint stands). An estimate is multiplied by ``SAFETY`` and a reserve is kept
for the process to exit before the deadline.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

SAFETY = 1.5
RESERVE_S = 1.0
# Throughput assumed before any checkpoint of this run was measured: a conservative figure for
# a remote object store from a GPU node (the catalog assumes 0.5 GB/s).
ASSUMED_BYTES_PER_S = 50e6


@dataclass(frozen=True)
class SaveCosts:
    full_bytes: int
    weights_bytes: int
    bytes_per_s: float | None  # measured upload throughput; None if nothing was measured yet
    blocking_s_per_byte: float = 0.0  # measured copy-out cost per byte
    pending_s: float = 0.0  # time still needed by a background save already under way

    def estimate_s(self, tier: str) -> float:
        n = self.full_bytes if tier == "full" else self.weights_bytes
        rate = self.bytes_per_s or ASSUMED_BYTES_PER_S
        return self.pending_s + n * self.blocking_s_per_byte + n / rate


@dataclass(frozen=True)
class EmergencyChoice:
    tier: str  # full | weights | none
    reason: str
    seconds_left: float | None
    estimate_full_s: float
    estimate_weights_s: float
    throughput: str  # measured | assumed

    def as_dict(self) -> dict[str, Any]:
        d = asdict(self)
        for k in ("seconds_left", "estimate_full_s", "estimate_weights_s"):
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
        return EmergencyChoice(tier, reason, seconds_left, full, weights, source)

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
