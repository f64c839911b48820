"""Issue 31: the outer optimizer's defaults come from the measured table shipped with burst
(burst/regional/outer_defaults.json, written by `benchmarks/regional.py --write-defaults`);
the spec's explicit values win; the planner shows the loss ratio the table expects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from burst.documents import parse_document
from burst.documents.plan import PlanDocument
from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.regional.defaults import (
    OuterPoint,
    OuterTable,
    outer_table,
    parse_table,
    resolve_outer,
)
from burst.spec import parse_spec

REPO = Path(__file__).resolve().parents[2]


def _cell(n: int, h: int, points: list[tuple[float, float, float]]) -> dict[str, Any]:
    grid = [{"lr": lr, "momentum": mu, "eval_loss_ratio": r} for lr, mu, r in points]
    return {
        "regions": n,
        "local_steps": h,
        "best": min(grid, key=lambda g: g["eval_loss_ratio"]),
        "grid": grid,
    }


TABLE = parse_table(
    {
        "steps_per_region": 300,
        "seeds": [21],
        "source": "test",
        "cells": [
            _cell(2, 10, [(1.0, 0.0, 1.03), (0.7, 0.3, 1.01), (0.7, 0.9, 1.10)]),
            _cell(2, 100, [(1.0, 0.0, 1.05), (1.3, 0.3, 1.04), (0.7, 0.9, 1.12)]),
            _cell(4, 10, [(1.0, 0.3, 1.02), (0.7, 0.9, 1.09)]),
            _cell(4, 100, [(1.3, 0.6, 1.06), (0.7, 0.9, 1.15)]),
        ],
    }
)


def test_lookup_takes_the_nearest_measured_cell() -> None:
    cell, exact = TABLE.cell(2, 10)
    assert (cell.regions, cell.local_steps, exact) == (2, 10, True)
    assert (cell.best.lr, cell.best.momentum) == (0.7, 0.3)
    # H on a log scale: 31 is nearer 10 than 100 (log 31 - log 10 < log 100 - log 31)
    assert TABLE.cell(2, 31)[0].local_steps == 10
    assert TABLE.cell(2, 32)[0].local_steps == 100
    # out of range: the edge cell, and it says so
    cell, exact = TABLE.cell(8, 500)
    assert (cell.regions, cell.local_steps, exact) == (4, 100, False)
    assert TABLE.cell(3, 10)[0].regions == 4  # a tie between 2 and 4: the larger
    with pytest.raises(ValueError, match=">= 1"):
        TABLE.cell(2, 0)


def test_null_outer_values_come_from_the_table_and_explicit_ones_win() -> None:
    r = resolve_outer("nesterov", None, None, 2, 10, TABLE)
    assert (r.lr, r.momentum, r.nesterov, r.expected_loss_ratio) == (0.7, 0.3, True, 1.01)
    assert r.basis == "measured table: regions 2, H 10"
    # both explicit: the spec's, and the grid's measurement of that point
    r = resolve_outer("nesterov", 0.7, 0.9, 2, 10, TABLE)
    assert (r.lr, r.momentum, r.expected_loss_ratio) == (0.7, 0.9, 1.10)
    assert r.basis == "training.regional_sync.outer"
    # one explicit: it wins, the other is the table's; a point the grid lacks: unknown
    r = resolve_outer("nesterov", 0.5, None, 4, 100, TABLE)
    assert (r.lr, r.momentum, r.expected_loss_ratio) == (0.5, 0.6, None)
    assert "lr" not in r.basis.split(";")[1] and "momentum from the measured table" in r.basis
    # plain (heavy-ball) momentum was not measured; with momentum 0 it is the same update
    assert resolve_outer("sgd", 0.7, 0.9, 2, 10, TABLE).expected_loss_ratio is None
    assert resolve_outer("sgd", 1.0, 0.0, 2, 10, TABLE).expected_loss_ratio == 1.03
    r = resolve_outer("nesterov", None, None, 4, 500, TABLE)
    assert "nearest measured to regions 4, H 500" in r.basis


def test_the_shipped_table_is_the_grids_best_per_cell() -> None:
    table = outer_table()
    assert isinstance(table, OuterTable) and table.seeds and table.steps_per_region > 0
    cells = {(c.regions, c.local_steps) for c in table.cells}
    assert {n for n, _ in cells} >= {2, 4}
    for c in table.cells:
        assert c.best == min(c.grid, key=lambda p: p.eval_loss_ratio)
        assert isinstance(c.best, OuterPoint) and 0 < c.best.lr <= 10 and 0 <= c.best.momentum < 1
        # DiLoCo's published setting is measured beside the grid, as the reference
        assert c.point(0.7, 0.9) is not None


def _regional_spec(**outer: float) -> str:
    doc = yaml.safe_load((REPO / "examples" / "regional.yaml").read_text())
    doc["training"]["regional_sync"]["local_steps"] = 10
    if outer:
        doc["training"]["regional_sync"]["outer"] = outer
    return yaml.safe_dump(doc)


def test_the_plan_carries_the_outer_setting_and_its_expected_loss_ratio() -> None:
    cat = load_catalog(use_env=False)
    doc = plan(parse_spec(_regional_spec(), "regional.yaml"), cat)
    parse_document(PlanDocument, doc, "plan")
    r = doc["regional"]
    shipped = resolve_outer("nesterov", None, None, 2, 10)
    assert (r["outer_lr"], r["outer_momentum"]) == (shipped.lr, shipped.momentum)
    assert r["expected_loss_ratio"] == shipped.expected_loss_ratio
    assert r["outer_basis"].startswith("measured table: regions 2, H 10")
    explicit = plan(parse_spec(_regional_spec(lr=0.7, momentum=0.9), "regional.yaml"), cat)
    r = explicit["regional"]
    assert (r["outer_lr"], r["outer_momentum"]) == (0.7, 0.9)
    assert r["outer_basis"] == "training.regional_sync.outer"
    cell, _ = outer_table().cell(2, 10)
    point = cell.point(0.7, 0.9)
    assert point is not None and r["expected_loss_ratio"] == point.eval_loss_ratio
