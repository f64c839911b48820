"""Data strategy (seed 000): compute to data, data to compute, regional shards."""

from __future__ import annotations

import pytest

from burst.plan.catalog import load_catalog
from burst.plan.datastrategy import (
    COMPUTE_TO_DATA,
    DATA_TO_COMPUTE,
    REGIONAL_SHARDS,
    compare,
    for_candidate,
    link_class,
)


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalog(use_env=False)


def test_same_region_is_compute_to_data(cat) -> None:  # type: ignore[no-untyped-def]
    d = for_candidate(cat, 5000, "ap-southeast-1", ("aws", "ap-southeast-1"), may_move=True)
    assert d.strategy == COMPUTE_TO_DATA and d.egress_usd == 0 and d.feasible


def test_moving_data_is_priced_at_the_source_and_timed_by_the_link(cat) -> None:  # type: ignore[no-untyped-def]
    d = for_candidate(cat, 100_000, "ap-southeast-1", ("aws", "ap-southeast-3"), may_move=True)
    assert d.strategy == DATA_TO_COMPUTE
    assert d.egress_usd == pytest.approx(9000.0)  # 100 TB at the catalog's $0.09/GB
    assert d.transfer_hours == pytest.approx(100_000 / 0.63 / 3600)  # same area: cross_region
    far = for_candidate(cat, 100_000, "ap-southeast-1", ("aws", "me-central-1"), True)
    assert far.transfer_hours == pytest.approx(100_000 / 0.18 / 3600)  # cross_continent
    assert link_class(cat, ("aws", "ap-southeast-1"), ("aws", "me-central-1")) == (
        "cross_continent"
    )


def test_data_that_may_not_leave_never_moves(cat) -> None:  # type: ignore[no-untyped-def]
    d = for_candidate(cat, 10, "ap-southeast-1", ("aws", "ap-southeast-3"), may_move=False)
    assert not d.feasible and "may not leave" in d.reason
    home = for_candidate(cat, 10, "ap-southeast-1", ("aws", "ap-southeast-1"), may_move=False)
    assert home.feasible


def test_unknown_inter_region_price_uses_the_highest_known(cat) -> None:  # type: ignore[no-untyped-def]
    d = for_candidate(cat, 1000, "asia-southeast1", ("gcp", "asia-southeast2"), True)
    assert d.egress_usd == pytest.approx(1000 * 0.09)
    assert "highest known" in d.price_source


def test_compare_prefers_regional_shards_for_big_sharded_data(cat) -> None:  # type: ignore[no-untyped-def]
    shards = {"ap-southeast-1": 60_000.0, "ap-southeast-3": 40_000.0}
    plans = compare(cat, shards, ("aws", "ap-southeast-3"), {}, sync_gb=50, sync_rounds=10)
    assert plans[0].strategy == REGIONAL_SHARDS
    by = {p.strategy: p for p in plans}
    assert by[COMPUTE_TO_DATA].egress_usd == pytest.approx(40_000 * 0.09)
    assert by[DATA_TO_COMPUTE].egress_usd == pytest.approx(60_000 * 0.09)
    assert by[REGIONAL_SHARDS].egress_usd == pytest.approx(50 * 10 * 2 * 0.09)


def test_compare_small_data_moves_and_blocked_data_does_not(cat) -> None:  # type: ignore[no-untyped-def]
    shards = {"ap-southeast-1": 10.0, "ap-southeast-3": 5.0}
    plans = compare(cat, shards, ("aws", "ap-southeast-3"), {}, sync_gb=50, sync_rounds=10)
    assert plans[0].strategy in (COMPUTE_TO_DATA, DATA_TO_COMPUTE)
    blocked = compare(
        cat,
        shards,
        ("aws", "ap-southeast-3"),
        {"ap-southeast-1": False},
        sync_gb=50,
        sync_rounds=10,
    )
    by = {p.strategy: p for p in blocked}
    assert not by[DATA_TO_COMPUTE].feasible
    assert blocked[0].feasible and blocked[0].strategy != DATA_TO_COMPUTE
