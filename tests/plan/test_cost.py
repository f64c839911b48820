"""The seeds' worked examples, reproduced exactly by the cost model."""

from __future__ import annotations

import pytest

from burst.plan.cost import (
    egress_cost,
    expected_spot_cost,
    on_demand_cost,
    savings_fraction,
    spot_cost_with_rerun,
    storage_gb_months,
    tb_to_gb,
    total_cost,
)


def test_seed_001_spot_versus_on_demand_24_hours() -> None:
    on_demand = on_demand_cost(24, 20.0)
    spot = spot_cost_with_rerun(24, 6.0, rerun_hours=2, rerun_price_per_hour=20.0)
    assert on_demand == 480.0
    assert spot == 184.0
    saved = savings_fraction(on_demand, spot)
    assert round(saved * 100) == 62  # "Savings ~ 62 %"
    assert saved == pytest.approx(1 - 184 / 480)


def test_seed_003_burst_cost_1245() -> None:
    cost = total_cost(
        gpu_hours=200,
        gpu_price_per_hour=6.0,
        egress_gb=500,
        egress_price_per_gb=0.05,
        storage_gb_month=tb_to_gb(1),
        storage_price_per_gb_month=0.02,
    )
    assert cost.gpu_usd == 1200.0
    assert cost.egress_usd == pytest.approx(25.0)
    assert cost.storage_usd == pytest.approx(20.0)
    assert cost.total_usd == pytest.approx(1245.0)
    with_orchestration = total_cost(200, 6.0, 500, 0.05, 1000, 0.02, orchestration_usd=30)
    assert with_orchestration.total_usd == pytest.approx(1275.0)


def test_seed_000_data_gravity_100_tb_decimal_gb() -> None:
    assert tb_to_gb(100) == 100_000
    assert egress_cost(tb_to_gb(100), 0.09) == pytest.approx(9000.0)
    # the binary convention (TiB) would not give the seed's number
    assert egress_cost(100 * 1024, 0.09) == pytest.approx(9216.0)


def test_expected_spot_cost_pays_for_lost_time() -> None:
    # 24 useful hours at goodput 0.8 are 30 paid hours
    assert expected_spot_cost(24, 0.8, 6.0) == pytest.approx(180.0)
    assert expected_spot_cost(24, 1.0, 6.0) == pytest.approx(144.0)
    with pytest.raises(ValueError):
        expected_spot_cost(24, 0.0, 6.0)


def test_storage_gb_months_and_negative_inputs() -> None:
    assert storage_gb_months(1000, 730) == pytest.approx(1000)
    with pytest.raises(ValueError):
        total_cost(-1, 6.0)
    with pytest.raises(ValueError):
        egress_cost(10, -0.1)
