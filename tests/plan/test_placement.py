"""Placement: ranking, preflight verdicts, budget and deadline refusal, the plan document."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.errors import BadInputError, PolicyRefusal
from burst.plan.catalog import load_catalog
from burst.plan.placement import PlanOptions, plan

from .conftest import QUICKSTART, make_spec, write_spec

REQUIRED = (
    "region",
    "provider",
    "capacity",
    "gpu_type",
    "price_per_hour",
    "expected_cost_usd",
    "expected_hours",
    "egress_usd",
    "checkpoint_interval_s",
    "verdict",
)
REGIONS = ["ap-southeast-1", "ap-southeast-3", "me-central-1"]


@pytest.fixture(scope="module")
def cat():  # type: ignore[no-untyped-def]
    return load_catalog(use_env=False)


def _decisions(verdicts: dict[str, str], **extra: object) -> dict:  # type: ignore[type-arg]
    """A decision record for the quickstart (made_for=its spec hash) with these verdicts."""
    return {
        "spec_sha256": make_spec().sha256(),
        "policy_sha256": "0" * 64,  # built by hand: policies not checked here
        "decisions": [
            {"region": r, "provider": "aws", "verdict": v, "reasons": [], **extra}
            for r, v in verdicts.items()
        ],
    }


def _where(doc: dict) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return [(c["region"], c["capacity"]) for c in doc["candidates"]]


def test_quickstart_ranked_candidates(cat) -> None:  # type: ignore[no-untyped-def]
    doc = plan(make_spec(), cat)
    cands = doc["candidates"]
    assert len(cands) == 6  # 3 regions x (spot, on-demand fallback)
    for c in cands:
        for key in REQUIRED:
            assert key in c, key
        parts = (
            c["compute_usd"]
            + c["egress_usd"]
            + c["storage_usd"]
            + c["orchestration_usd"]
            + c["labour_usd"]
        )
        assert c["expected_cost_usd"] == pytest.approx(parts, abs=1e-3)
        assert c["verdict"] == "unchecked"
    assert [c["rank"] for c in cands] == list(range(1, 7))
    # the only region with a known h100 price is tried first; unknown prices come last
    assert cands[0]["region"] == "ap-southeast-3" and cands[0]["price_basis"] != "unknown"
    assert all(c["price_basis"] == "unknown" for c in cands[2:])
    # ap-southeast-1 holds the data (no egress) but its price is unknown: it still ranks after
    sg = [c for c in cands if c["region"] == "ap-southeast-1"]
    assert sg[0]["egress_usd"] == 0 and sg[0]["data_strategy"] == "compute_to_data"
    assert cands[0]["egress_usd"] > 0 and cands[0]["data_strategy"] == "data_to_compute"
    # the conservative price is the highest known h100 price in the catalog
    assert sg[0]["price_per_gpu_hour"] == pytest.approx(10.0)
    assert doc["data"]["region"] == "ap-southeast-1"


def test_denied_candidates_are_never_ranked(cat) -> None:  # type: ignore[no-untyped-def]
    record = _decisions(
        {"ap-southeast-1": "allow", "ap-southeast-3": "deny", "me-central-1": "review"}
    )
    doc = plan(make_spec(), cat, record)
    assert all(c["region"] != "ap-southeast-3" for c in doc["candidates"])
    denied = [e for e in doc["excluded"] if e["region"] == "ap-southeast-3"]
    assert denied and denied[0]["verdict"] == "deny"
    # allow ranks before review whatever the price
    assert [c["verdict"] for c in doc["candidates"]] == ["allow", "allow", "review", "review"]


def test_candidate_without_a_decision_is_excluded_fail_closed(cat) -> None:  # type: ignore[no-untyped-def]
    doc = plan(make_spec(), cat, _decisions({"ap-southeast-3": "allow"}))
    assert {c["region"] for c in doc["candidates"]} == {"ap-southeast-3"}
    assert sum("no preflight decision" in e["reason"] for e in doc["excluded"]) == 2


def test_all_denied_is_refused(cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PolicyRefusal, match="denied by the preflight"):
        plan(make_spec(), cat, _decisions(dict.fromkeys(REGIONS, "deny")))


def test_data_that_may_not_leave_keeps_compute_with_the_data(cat) -> None:  # type: ignore[no-untyped-def]
    record = _decisions(dict.fromkeys(REGIONS, "allow"))
    record["data_may_leave"] = False
    doc = plan(make_spec(), cat, record)
    assert {c["region"] for c in doc["candidates"]} == {"ap-southeast-1"}
    assert all(c["egress_usd"] == 0 for c in doc["candidates"])
    per = _decisions({"ap-southeast-1": "allow", "me-central-1": "allow"})
    per["decisions"].append(
        {
            "region": "ap-southeast-3",
            "provider": "aws",
            "verdict": "allow",
            "reasons": [],
            "data_may_move": False,
        }
    )
    doc = plan(make_spec(), cat, per)
    assert "ap-southeast-3" not in {c["region"] for c in doc["candidates"]}


def test_over_budget_is_refused_with_the_numbers(cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(PolicyRefusal) as exc:
        plan(make_spec(**{"budget.max_usd": 5}), cat)
    msg = exc.value.one_line()
    assert "best expected cost $12.66" in msg and "exceeds the budget $5.00" in msg
    assert "aws/ap-southeast-3" in msg


def test_past_the_deadline_is_refused(cat) -> None:  # type: ignore[no-untyped-def]
    spec = make_spec(**{"training.step_seconds": 7200.0, "budget.max_usd": 1e6})
    with pytest.raises(PolicyRefusal, match="exceeds the deadline 24 h"):
        plan(spec, cat)


def _spot_catalog(tmp_path: Path, price: float) -> Path:
    user = tmp_path / "spot.yaml"
    user.write_text(
        "offers:\n  - provider: aws\n    region: ap-southeast-3\n    gpu_type: h100\n"
        f"    spot_usd_per_hour: {{value: {price}, source: 'test quote', date: 2026-11}}\n"
    )
    return user


def test_known_spot_price_ranks_spot_first_and_charges_preemptions(tmp_path: Path) -> None:
    cat = load_catalog([_spot_catalog(tmp_path, 30.0)], use_env=False)
    # 40 useful hours on one node: several pre-emptions at an 8 h MTBF
    spec = make_spec(
        **{
            "training.step_seconds": 3600.0,
            "training.steps": 40,
            "budget.max_hours": 100,
            "budget.max_usd": 20000,
            "training.checkpoint.interval_steps": "auto",
            "model.parameters": 7e9,
        }
    )
    doc = plan(spec, cat, opts=PlanOptions(replicas=16))
    first, second = doc["candidates"][:2]
    assert (first["region"], first["capacity"]) == ("ap-southeast-3", "spot")
    assert (second["region"], second["capacity"]) == ("ap-southeast-3", "on_demand")
    assert first["expected_preemptions"] > 1
    assert first["goodput"] < second["goodput"] <= 1
    assert first["expected_hours"] > second["expected_hours"]
    # paid hours x price: more than the useful 40 h at the spot price
    assert first["compute_usd"] > 40 * 30.0
    assert first["compute_usd"] == pytest.approx(
        first["price_per_hour"] * (first["expected_hours"] - first["data_transfer_hours"]), rel=1e-4
    )
    # auto interval: Young/Daly from the job MTBF, never shorter than the upload
    # (young_daly_interval_s is the raw sqrt(2 C M); the interval used is it clamped)
    w = doc["workload"]
    assert first["checkpoint_interval_s"] == max(
        first["young_daly_interval_s"], w["upload_s"], w["step_s"]
    )
    assert first["checkpoint_interval_s"] >= 7e9 * 16 / 1e9 / 0.5
    # ranking by time puts the on-demand capacity first
    fast = plan(spec, cat, opts=PlanOptions(objective="time", replicas=16))
    assert fast["candidates"][0]["capacity"] == "on_demand"


def test_over_budget_candidates_drop_out_of_the_failover_list(tmp_path: Path) -> None:
    cat = load_catalog([_spot_catalog(tmp_path, 30.0)], use_env=False)
    spec = make_spec(
        **{
            "training.step_seconds": 3600.0,
            "training.steps": 40,
            "budget.max_hours": 100,
            "budget.max_usd": 2500,
            "compute.regions": ["ap-southeast-3"],
        }
    )
    doc = plan(spec, cat, opts=PlanOptions(replicas=16))
    assert _where(doc) == [("ap-southeast-3", "spot")]
    assert any("exceeds the budget" in e["reason"] for e in doc["excluded"])


def test_a_gpu_with_no_price_anywhere_fails_closed(tmp_path: Path) -> None:
    """Issue 29 made Rubin plannable out of the box (tests/plan/test_rubin_catalog.py); a GPU
    with no price at all still refuses, once per reason, saying how to give one."""
    unknown = tmp_path / "unknown.yaml"
    unknown.write_text(
        "gpus:\n  rubin:\n"
        "    peak_tflops: {value: null, source: 'not known', date: 2026-11}\n"
        "    reference_spot_usd_per_gpu_hour: {value: null, source: 'not known', date: 2026-11}\n"
        "    reference_on_demand_usd_per_gpu_hour: {value: null, source: 'x', date: 2026-11}\n"
    )
    cat = load_catalog([unknown], use_env=False)
    with pytest.raises(BadInputError, match=r"training\.step_seconds"):
        plan(make_spec(**{"compute.gpu_type": "rubin"}), cat)
    spec = make_spec(**{"compute.gpu_type": "rubin", "training.step_seconds": 1.0})
    with pytest.raises(PolicyRefusal, match="no price known for rubin") as exc:
        plan(spec, cat)
    assert str(exc.value).count("no price known") == 1
    assert "--catalog FILE" in str(exc.value) and "docs/planning.md#the-catalog" in str(exc.value)


def test_region_of_another_provider_is_excluded(cat) -> None:  # type: ignore[no-untyped-def]
    doc = plan(make_spec(**{"compute.regions": ["ap-southeast-3", "asia-southeast1"]}), cat)
    assert {c["region"] for c in doc["candidates"]} == {"ap-southeast-3"}
    assert any("not in the catalog for provider aws" in e["reason"] for e in doc["excluded"])


def test_bad_decision_record(cat) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(BadInputError, match=r"decisions\[0\]\.verdict"):
        plan(
            make_spec(),
            cat,
            {
                "spec_sha256": make_spec().sha256(),
                "policy_sha256": "0" * 64,  # built by hand: policies not checked here
                "decisions": [{"region": "x", "provider": "aws", "verdict": "maybe"}],
            },
        )


def test_deterministic(cat) -> None:  # type: ignore[no-untyped-def]
    assert plan(make_spec(), cat) == plan(make_spec(), cat)


# ----------------------------------------------------------------------------- CLI and step


def test_cli_plan_json_done_when(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]],
) -> None:
    proc = burst_cli(["plan", "examples/quickstart.yaml", "--json"])
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    assert len(doc["candidates"]) >= 2
    for c in doc["candidates"]:
        for key in REQUIRED:
            assert key in c
    costs = [c["expected_cost_usd"] for c in doc["candidates"]]
    assert costs[0] == min(costs)


def test_cli_plan_table_and_chart(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    png = tmp_path / "plan.png"
    proc = burst_cli(["plan", str(QUICKSTART), "--chart", str(png)])
    assert proc.returncode == 0, proc.stderr
    for col in (
        "region",
        "provider",
        "capacity",
        "$/h",
        "exp. hours",
        "exp. cost",
        "egress",
        "ckpt interval",
        "verdict",
    ):
        assert col in proc.stdout
    assert "ap-southeast-3" in proc.stdout
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000


def test_cli_plan_over_budget_exit_3(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    spec = write_spec(tmp_path / "poor.yaml", **{"budget.max_usd": 5})
    proc = burst_cli(["plan", str(spec)])
    assert proc.returncode == 3
    assert "exceeds the budget $5.00" in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def test_cli_plan_with_decision_file(
    burst_cli: Callable[..., subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    rec = tmp_path / "decision.json"
    rec.write_text(
        json.dumps(
            _decisions(
                {"ap-southeast-1": "allow", "ap-southeast-3": "deny", "me-central-1": "allow"}
            )
        )
    )
    proc = burst_cli(["plan", str(QUICKSTART), "--decision", str(rec), "--json"])
    assert proc.returncode == 0, proc.stderr
    regions = {c["region"] for c in json.loads(proc.stdout)["candidates"]}
    assert regions == {"ap-southeast-1", "me-central-1"}


@pytest.mark.e2e
def test_step_plan_reads_the_decision_record(tmp_path: Path, runs_root: Path) -> None:
    out = tmp_path / "plan.json"
    record = json.dumps(
        _decisions({"ap-southeast-1": "review", "ap-southeast-3": "allow", "me-central-1": "deny"})
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.plan",
            "--spec",
            str(QUICKSTART),
            "--run-id",
            "plan-t1",
            "--runs-root",
            str(runs_root),
            "--input",
            f"decision={record}",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert doc["candidates"][0]["region"] == "ap-southeast-3"
    assert doc["candidates"][0]["verdict"] == "allow"
    assert "me-central-1" not in {c["region"] for c in doc["candidates"]}
    assert (runs_root / "plan-t1" / "docs" / "plan.json").exists()


@pytest.mark.e2e
def test_step_plan_refuses_over_budget_exit_3(tmp_path: Path, runs_root: Path) -> None:
    spec = write_spec(tmp_path / "poor.yaml", **{"budget.max_usd": 1})
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.plan",
            "--spec",
            str(spec),
            "--run-id",
            "plan-t2",
            "--runs-root",
            str(runs_root),
            "--out",
            str(tmp_path / "out.json"),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3
    assert "exceeds the budget $1.00" in proc.stderr
    assert not (tmp_path / "out.json").exists()


def test_many_checkpoints_are_simulated_coarser_with_the_same_goodput(cat) -> None:  # type: ignore[no-untyped-def]
    # 2 million steps with a checkpoint every step: too many events to simulate one by one
    spec = make_spec(
        **{
            "training.step_seconds": 0.05,
            "training.steps": 2_000_000,
            "training.checkpoint.interval_steps": 1,
            "budget.max_hours": 1000,
            "budget.max_usd": 1e6,
            "compute.regions": ["ap-southeast-3"],
            "compute.capacity": "on_demand",
        }
    )
    doc = plan(spec, cat, opts=PlanOptions(replicas=4))
    c = doc["candidates"][0]
    blocking = doc["workload"]["checkpoint_cost_s"]
    # on-demand fails about once in 6,300 node-hours: the overhead is the blocking copy
    assert c["goodput"] == pytest.approx(1 / (1 + blocking / 0.05), rel=2e-3)


@pytest.mark.e2e
def test_step_plan_reads_burst_catalog(tmp_path: Path, runs_root: Path) -> None:
    user = _spot_catalog(tmp_path, 20.0)
    out = tmp_path / "plan.json"
    env = {**os.environ, "BURST_CATALOG": str(user)}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "burst.steps.plan",
            "--spec",
            str(QUICKSTART),
            "--run-id",
            "plan-t3",
            "--runs-root",
            str(runs_root),
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        check=False,
        env=env,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    first = doc["candidates"][0]
    assert (first["region"], first["capacity"], first["price_basis"]) == (
        "ap-southeast-3",
        "spot",
        "catalog",
    )
    assert first["price_per_hour"] == 20.0
    assert doc["catalog"]["files"][-1] == str(user)
    assert doc["catalog"]["assumptions"]["mfu"]["source"] == "assumption"


def test_spot_with_an_on_demand_floor(tmp_path: Path) -> None:
    cat = load_catalog([_spot_catalog(tmp_path, 30.0)], use_env=False)
    spec = make_spec(
        **{
            "training.step_seconds": 3600.0,
            "training.steps": 40,
            "budget.max_hours": 100,
            "budget.max_usd": 50000,
            "training.checkpoint.interval_steps": "auto",
            "model.parameters": 7e9,
            "compute.gpu_count": 32,
            "compute.regions": ["ap-southeast-3"],
        }
    )
    plain = plan(spec, cat, opts=PlanOptions(replicas=16))
    assert {c["capacity"] for c in plain["candidates"]} == {"spot", "on_demand"}
    doc = plan(spec, cat, opts=PlanOptions(replicas=16, floor_nodes=1))
    by = {c["capacity"]: c for c in doc["candidates"]}
    floor, spot, od = by["spot_with_floor"], by["spot"], by["on_demand"]
    assert floor["nodes"] == 4 and floor["floor_nodes"] == 1 and spot["floor_nodes"] == 0
    assert floor["price_per_hour"] == pytest.approx(75.9552 + 3 * 30.0)
    # only the three spot nodes are pre-empted
    assert floor["mtbf_hours"] == pytest.approx(8 / 3)
    assert spot["mtbf_hours"] == pytest.approx(8 / 4)
    assert spot["goodput"] < floor["goodput"] < od["goodput"]
    assert spot["expected_cost_usd"] < floor["expected_cost_usd"] < od["expected_cost_usd"]


def _supply_catalog(tmp_path: Path) -> Path:
    user = tmp_path / "supply.yaml"
    fact = "source: 'capacity reservation', date: 2026-11"
    user.write_text(
        "offers:\n"
        "  - {provider: aws, region: ap-southeast-3, gpu_type: h100,\n"
        f"     max_gpus: {{value: 16, {fact}}}, max_gpus_per_zone: {{value: 8, {fact}}}}}\n"
        "  - {provider: aws, region: ap-southeast-1, gpu_type: h100,\n"
        f"     max_gpus: {{value: 16, {fact}}}}}\n"
        "  - {provider: aws, region: me-central-1, gpu_type: h100,\n"
        f"     max_gpus: {{value: 64, {fact}}}}}\n"
    )
    return user


def test_topology_follows_what_regions_can_supply(tmp_path: Path) -> None:
    cat = load_catalog([_supply_catalog(tmp_path)], use_env=False)
    one_zone = plan(make_spec(**{"compute.gpu_count": 8}), cat)
    assert one_zone["topology"]["span"] == "same_az"
    zones = plan(make_spec(**{"compute.gpu_count": 16}), cat)
    assert zones["candidates"][0]["region"] == "ap-southeast-3"
    assert zones["topology"]["span"] == "cross_az"
    # 32 GPUs: neither SEA region alone; me-central-1 can, the SEA ones are excluded
    big = plan(make_spec(**{"compute.gpu_count": 32, "budget.max_usd": 1e5}), cat)
    assert {c["region"] for c in big["candidates"]} == {"me-central-1"}
    sea = [e for e in big["excluded"] if e["region"] != "me-central-1"]
    assert len(sea) == 2
    assert all("supplies at most 16" in e["reason"] for e in sea)
    # the two SEA regions together could: pipeline across them, all-reduce inside each
    assert all("pipeline parallelism tolerates crossing regions" in e["reason"] for e in sea)


def test_no_region_supplies_enough_is_refused_with_the_advice(tmp_path: Path) -> None:
    cat = load_catalog([_supply_catalog(tmp_path)], use_env=False)
    spec = make_spec(
        **{"compute.gpu_count": 32, "compute.regions": ["ap-southeast-1", "ap-southeast-3"]}
    )
    with pytest.raises(PolicyRefusal, match="supplies at most 16") as exc:
        plan(spec, cat)
    assert "keep the all-reduce inside one region" in exc.value.one_line()
