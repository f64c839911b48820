"""The outer optimizer's defaults per (regions, H), measured (issue 31), and the loss the
measurement expects.

DiLoCo publishes one outer setting (Nesterov, lr 0.7, momentum 0.9; Douillard et al., arXiv
2311.08105) for its H = 500 from a pretrained model. "Scaling Laws for DiLoCo" (Charles et al.,
arXiv 2503.09799, 2025, figures 7-8) finds that the best outer learning rate grows with the
number of replicas and with H, independently of model size, so it can be measured on a small
model and carried over. ``outer_defaults.json`` beside this module is that measurement on
``benchmarks/regional.py``'s model: for every (regions, H) of its grid, the (lr, momentum) with
the lowest held-out loss and the loss ratio against synchronous data parallelism at equal
tokens, plus every grid point measured. It is generated, never edited by hand:
``python benchmarks/regional.py --tune-outer`` measures the grid
(``benchmarks/results/regional_outer_grid.json``), ``--write-defaults`` writes the table.

Lookup (``OuterTable.cell``): the measured region count nearest the run's (a tie: the larger),
then the measured H nearest the run's on a log scale (a tie: the larger); outside the measured
range the edge cell is used and ``measured`` says it was not measured there.

``resolve_outer``: the spec's explicit ``outer.lr`` / ``outer.momentum`` win, each on its own;
what the spec leaves null comes from the table. The expected loss ratio is the table's when
both come from it, the grid point's when the spec names one the grid measured, else unknown.
"""

from __future__ import annotations

import functools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TABLE_FILE = Path(__file__).with_name("outer_defaults.json")


@dataclass(frozen=True)
class OuterPoint:
    """One measured outer setting and its held-out loss / synchronous DP's at equal tokens."""

    lr: float
    momentum: float
    eval_loss_ratio: float


@dataclass(frozen=True)
class OuterCell:
    regions: int
    local_steps: int
    best: OuterPoint
    grid: tuple[OuterPoint, ...]

    def point(self, lr: float, momentum: float) -> OuterPoint | None:
        """The measured grid point with these values, if the grid has it."""
        for p in self.grid:
            if math.isclose(p.lr, lr, abs_tol=1e-9) and math.isclose(
                p.momentum, momentum, abs_tol=1e-9
            ):
                return p
        return None


@dataclass(frozen=True)
class OuterTable:
    cells: tuple[OuterCell, ...]
    steps_per_region: int
    seeds: tuple[int, ...]
    source: str

    def cell(self, regions: int, local_steps: int) -> tuple[OuterCell, bool]:
        """The cell for a run of ``regions`` regions and H ``local_steps`` (module docstring)
        and whether that exact (regions, H) was measured."""
        if regions < 1 or local_steps < 1:
            raise ValueError("regions and local steps must be >= 1")
        counts = sorted({c.regions for c in self.cells})
        n = min(counts, key=lambda r: (abs(r - regions), -r))
        hs = sorted({c.local_steps for c in self.cells if c.regions == n})
        h = min(hs, key=lambda x: (abs(math.log(x) - math.log(local_steps)), -x))
        cell = next(c for c in self.cells if c.regions == n and c.local_steps == h)
        return cell, (n, h) == (regions, local_steps)


def _point(d: dict[str, Any]) -> OuterPoint:
    return OuterPoint(float(d["lr"]), float(d["momentum"]), float(d["eval_loss_ratio"]))


def parse_table(doc: dict[str, Any]) -> OuterTable:
    cells = tuple(
        OuterCell(
            regions=int(c["regions"]),
            local_steps=int(c["local_steps"]),
            best=_point(c["best"]),
            grid=tuple(_point(p) for p in c["grid"]),
        )
        for c in doc["cells"]
    )
    if not cells:
        raise ValueError("the outer defaults table has no cells")
    return OuterTable(
        cells=cells,
        steps_per_region=int(doc["steps_per_region"]),
        seeds=tuple(int(s) for s in doc["seeds"]),
        source=str(doc["source"]),
    )


@functools.cache
def outer_table() -> OuterTable:
    """The table shipped with burst (``outer_defaults.json``)."""
    return parse_table(json.loads(TABLE_FILE.read_text()))


@dataclass(frozen=True)
class ResolvedOuter:
    """The outer optimizer a run uses, where each value came from, and the loss ratio
    against synchronous DP the measurement expects for it (None: not measured)."""

    nesterov: bool
    lr: float
    momentum: float
    basis: str
    expected_loss_ratio: float | None


def resolve_outer(
    optimizer: str,
    lr: float | None,
    momentum: float | None,
    regions: int,
    local_steps: int,
    table: OuterTable | None = None,
) -> ResolvedOuter:
    """The spec's ``outer`` settings with what it leaves null filled from the table."""
    table = table or outer_table()
    cell, exact = table.cell(regions, local_steps)
    where = f"regions {cell.regions}, H {cell.local_steps}"
    if not exact:
        where += f" (nearest measured to regions {regions}, H {local_steps})"
    use_lr = cell.best.lr if lr is None else lr
    use_mu = cell.best.momentum if momentum is None else momentum
    if lr is None and momentum is None:
        basis = f"measured table: {where}"
        point: OuterPoint | None = cell.best
    elif lr is not None and momentum is not None:
        basis = "training.regional_sync.outer"
        point = cell.point(use_lr, use_mu)
    else:
        from_table = "lr" if lr is None else "momentum"
        basis = f"training.regional_sync.outer; {from_table} from the measured table: {where}"
        point = cell.point(use_lr, use_mu)
    nesterov = optimizer == "nesterov"
    if point is not None and not nesterov and use_mu != 0:
        point = None  # the grid is Nesterov's; plain momentum with mu > 0 was not measured
    return ResolvedOuter(
        nesterov=nesterov,
        lr=use_lr,
        momentum=use_mu,
        basis=basis,
        expected_loss_ratio=point.eval_loss_ratio if point is not None else None,
    )
