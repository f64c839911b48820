"""The faults a serving run can inject (``burst serve --fault``, ``benchmarks/tiered.py``);
``burst.inference.serve.apply_fault`` injects them. Import-light (the CLI's choices)."""

from __future__ import annotations

FAULTS = (
    "none",
    "distilled killed",
    "distilled slowed past deadline",
    "distilled queue full",
    "heavy killed",
    "heavy queue full",
    "heavy region unreachable",
)

# what a Triton tier can be made to suffer here (a process killed, a region cut off); slowing
# or filling a Triton tier is not wired (the loopback servers do it)
TRITON_FAULTS = ("none", "distilled killed", "heavy killed", "heavy region unreachable")
