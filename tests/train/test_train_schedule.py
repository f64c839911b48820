"""The checkpoint interval (Young/Daly from measured costs, or the spec's), the MTBF it uses,
and the emergency-save decision: pure functions, worked examples."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from burst.documents import PlanDocument, ProvisionDocument
from burst.preempt.emergency import SaveCosts, SaveMeter, choose_emergency_save
from burst.spec import BurstJob, load_spec
from burst.train.schedule import PROBE_STEPS, CheckpointSchedule, resolve_mtbf

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"


def job(**changes: object) -> BurstJob:
    base = load_spec(QUICKSTART)
    data = base.model_dump(mode="json", by_alias=True)
    for dotted, value in changes.items():
        d = data
        *path, last = dotted.split("__")
        for p in path:
            d = d[p]
        d[last] = value
    return BurstJob.model_validate(data)


def test_explicit_interval_is_honoured_and_says_so() -> None:
    s = CheckpointSchedule.for_job(job(), None)
    assert s.interval_steps == 5
    assert [n for n in range(1, 31) if s.due(n)] == [5, 10, 15, 20, 25, 30]
    s.record_step(1.0)
    s.record_save(blocking_s=0.1, upload_s=9.0)  # 5 steps of 1 s < 9 s upload
    assert s.interval_steps == 5 and "shorter than the measured upload time" in s.why
    assert s.describe()["mode"] == "spec"


def test_auto_interval_is_young_daly_of_the_measured_blocking_cost() -> None:
    # 5 s blocking cost, 1 h MTBF: sqrt(2 x 5 x 3600) = 189.7 s = 190 steps of 1 s
    s = CheckpointSchedule.for_job(
        job(training__checkpoint__interval_steps="auto", compute__mtbf_hours=1.0), None
    )
    assert s.interval_steps == PROBE_STEPS  # nothing measured yet: probe
    s.start_at(0)
    assert not s.due(PROBE_STEPS - 1) and s.due(PROBE_STEPS)
    s.record_step(1.0)
    s.saved_at(PROBE_STEPS)
    s.record_save(blocking_s=5.0, upload_s=20.0)
    assert s.interval_steps == math.ceil(math.sqrt(2 * 5 * 3600))
    d = s.describe()
    assert d["mode"] == "young_daly"
    assert d["young_daly_interval_s"] == pytest.approx(189.737, abs=1e-3)
    assert d["mtbf_s"] == 3600 and d["mtbf_source"] == "spec compute.mtbf_hours (job)"
    assert "Young/Daly" in d["why"]
    assert not s.due(PROBE_STEPS + 189) and s.due(PROBE_STEPS + 190)


def test_auto_interval_is_never_shorter_than_the_upload() -> None:
    s = CheckpointSchedule.for_job(
        job(training__checkpoint__interval_steps="auto", compute__mtbf_hours=1.0), None
    )
    s.record_step(0.5)
    s.record_save(blocking_s=0.01, upload_s=60.0)  # Young/Daly: sqrt(2 x 0.01 x 3600) = 8.5 s
    assert s.interval_steps == 120  # 60 s upload / 0.5 s a step
    assert "upload time" in s.why


def test_measurements_of_an_earlier_attempt_skip_the_probe() -> None:
    s = CheckpointSchedule.for_job(
        job(training__checkpoint__interval_steps="auto", compute__mtbf_hours=2.0),
        None,
        {"step_s": 0.1, "blocking_s": 0.2, "upload_s": 1.0},
    )
    assert s.interval_steps == math.ceil(math.sqrt(2 * 0.2 * 7200) / 0.1)


def test_mtbf_spec_then_plan_then_catalog() -> None:
    plan = PlanDocument.model_validate(
        {
            "candidates": [
                {
                    "provider": "aws",
                    "region": "ap-southeast-1",
                    "mtbf_hours": 4.0,
                    "mtbf_source": "catalog providers.aws.spot_node_mtbf_hours",
                }
            ]
        }
    )
    assert resolve_mtbf(job(compute__mtbf_hours=3.0), plan)[0] == 3 * 3600
    m, src = resolve_mtbf(job(), plan)
    assert m == 4 * 3600 and "plan candidate aws/ap-southeast-1" in src
    # no plan: the catalog's node MTBF for the spec's first provider, divided by the nodes
    m, src = resolve_mtbf(job(), None)
    assert "spot_node_mtbf_hours" in src and "/ 1 node(s)" in src
    m16, src16 = resolve_mtbf(job(compute__gpu_count=16), None)  # 2 nodes of 8
    assert m16 == pytest.approx(m / 2) and "/ 2 node(s)" in src16
    od, src_od = resolve_mtbf(job(compute__capacity="on_demand"), None)
    assert od > m and "on_demand_node_mtbf_hours" in src_od


COSTS = SaveCosts(
    full_bytes=3_000_000_000,
    weights_bytes=1_000_000_000,
    bytes_per_s=100e6,
    blocking_s_per_byte=1 / 20e9,
)


def test_emergency_full_when_it_fits() -> None:
    # full: 3 GB / 100 MB/s = 30 s (+0.15 s copy); x2 = 60.3 s by half of a 150-s window
    c = choose_emergency_save(150.0, COSTS)
    assert c.tier == "full" and c.throughput == "measured"
    assert c.estimate_full_s == pytest.approx(30.15)


def test_emergency_weights_when_only_they_fit() -> None:
    # a 60-s window: full needs 60.3 s with the margin, weights 10.05 x 2 = 20.1 s <= 30 s
    c = choose_emergency_save(60.0, COSTS)
    assert c.tier == "weights" and "weights-only" in c.reason


def test_emergency_none_when_nothing_fits() -> None:
    c = choose_emergency_save(5.0, COSTS)
    assert c.tier == "none" and "last committed checkpoint" in c.reason
    assert choose_emergency_save(-1.0, COSTS).tier == "none"  # deadline already past


def test_emergency_counts_a_save_still_in_flight() -> None:
    busy = SaveCosts(
        COSTS.full_bytes,
        COSTS.weights_bytes,
        COSTS.bytes_per_s,
        COSTS.blocking_s_per_byte,
        pending_s=30.0,
    )
    assert choose_emergency_save(200.0, busy).tier == "weights"  # 40.05 s x2 <= 100 s


def test_emergency_without_measurements_assumes_a_conservative_rate() -> None:
    unknown = SaveCosts(full_bytes=3_000_000_000, weights_bytes=1_000_000_000, bytes_per_s=None)
    # 50 MB/s assumed: full 60 s x 2 does not fit half of 90 s; weights 20 s x 2 does
    c = choose_emergency_save(90.0, unknown)
    assert c.throughput == "assumed" and c.tier == "weights"


def test_save_meter_fits_a_fixed_cost_and_a_throughput() -> None:
    m = SaveMeter()
    m.record(100_000_000, 100_000_000, blocking_s=0.005, upload_s=1.2)  # 0.2 s + 1e8 / 1e8
    m.record(300_000_000, 300_000_000, blocking_s=0.015, upload_s=3.2)
    assert m.fixed_s == pytest.approx(0.2) and m.bytes_per_s == pytest.approx(1e8)
    assert m.blocking_s_per_byte == pytest.approx(5e-11)
    c = m.costs(full_bytes=300_000_000, weights_bytes=100_000_000)
    assert c.estimate_s("weights") == pytest.approx(0.2 + 0.005 + 1.0)
    again = SaveMeter.from_dict(m.as_dict())  # what the next attempt starts from
    assert again.costs(300_000_000, 100_000_000) == c


def test_save_meter_with_one_size_is_proportional_and_takes_the_slowest() -> None:
    m = SaveMeter()
    m.record(1000, 1000, blocking_s=0.0, upload_s=1.0)
    m.record(1000, 1000, blocking_s=0.0, upload_s=2.0)
    assert m.fixed_s == 0 and m.bytes_per_s == pytest.approx(500.0)


def test_after_a_failover_the_interval_and_the_price_follow_the_provisioned_candidate() -> None:
    """Issue 14 bug: the interval was sized from plan.candidates[0] while the price came
    from the candidate provision got; after a failover or a requeue the run planned for a
    region it was not in. Both now follow the provisioned candidate."""
    from burst.train.spending import hourly_rate

    first = {
        "provider": "aws", "region": "ap-southeast-1", "capacity": "spot",
        "mtbf_hours": 2.0, "checkpoint_interval_s": 120.0, "price_per_hour": 10.0,
    }  # fmt: skip
    second = {
        "provider": "aws", "region": "me-central-1", "capacity": "spot",
        "mtbf_hours": 20.0, "checkpoint_interval_s": 600.0, "price_per_hour": 30.0,
    }  # fmt: skip
    plan = PlanDocument.model_validate({"candidates": [first, second]})
    # the first had no capacity: provision failed over
    infra = ProvisionDocument.model_validate({"candidate": second})
    j = job(training__checkpoint__interval_steps="auto")
    s = CheckpointSchedule.for_job(j, plan, None, infra)
    assert s.mtbf_s == 20.0 * 3600 and "me-central-1" in s.mtbf_source
    assert s.planned_interval_s == 600.0
    assert resolve_mtbf(j, plan, infra)[0] == 20.0 * 3600
    assert hourly_rate(infra, plan) == 30.0
    # before provision has run (no infra document), the plan's first is what is planned
    assert CheckpointSchedule.for_job(j, plan).mtbf_s == 2.0 * 3600
    assert hourly_rate(None, plan) == 10.0
