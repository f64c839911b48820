"""Money that adds up (issue 46): a job smaller than a node is priced the way the provider
bills it. Before: ``gpu_count: 1`` on a Rubin spec was charged for a whole 8-GPU node ($3,867
against the seed's $480) and ``--explain`` did not name it.

* No instance in the catalog (Rubin: a reference price per GPU-hour): billed per GPU.
* An offer sold only as 8-GPU instances: the whole instance is rented and billed, said in the
  plan (``billing``, ``gpus`` against ``gpus_used``, the table, the ``node rounding`` term)
  with the nearest GPU counts that pay for no idle GPU.
* A smaller shape in the catalog (Nebius's 1-GPU preset): the smallest that holds the job.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from burst.errors import BadInputError
from burst.plan.catalog import load_catalog
from burst.plan.placement import PlanOptions, plan

from .conftest import make_spec, write_spec

Cli = Callable[..., subprocess.CompletedProcess[str]]
DAY = {"training.steps": 24, "training.step_seconds": 3600.0, "budget.max_hours": 100}


def _plan(**changes: Any) -> dict[str, Any]:
    return plan(make_spec(**changes), load_catalog(use_env=False), opts=PlanOptions(replicas=2))


def _by(doc: dict[str, Any]) -> dict[tuple[str, str], dict[str, Any]]:
    return {(c["provider"], c["capacity"]): c for c in doc["candidates"]}


def _term(cand: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in cand["cost_terms"] if t["term"] == name)


def test_one_rubin_gpu_is_billed_per_gpu(burst_cli: Cli, tmp_path: Path) -> None:
    """The spec of the issue: gpu_count 1, gpus_per_node left at its default (8)."""
    spec = write_spec(
        tmp_path / "rubin.yaml",
        **DAY,
        **{
            "compute.gpu_type": "rubin",
            "compute.gpu_count": 1,
            "compute.regions": ["ap-southeast-3"],
            "data.region": "ap-southeast-3",
        },
    )
    proc = burst_cli(["plan", str(spec), "--explain", "--json", "--replicas", "2"])
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    od = _by(out["plan"])[("aws", "on_demand")]
    assert (od["gpus"], od["gpus_used"], od["billed_per"]) == (1, 1, "gpu")
    # 24 h + the 600 s start-up on one GPU at the seeds' $20/GPU-h, not 8 GPUs' $3,866.67
    assert od["expected_cost_usd"] == pytest.approx((24 + 600 / 3600) * 20, abs=0.01)
    assert "billed per GPU-hour" in od["billing"]
    seed = next(c for c in out["explain"] if c["what"] == "on demand")
    assert seed["seed_usd"] == 480.0 and seed["formula"].startswith("24 GPU-h x $20")


def test_a_whole_node_is_billed_and_named(burst_cli: Cli, tmp_path: Path) -> None:
    """aws sells h100 in ap-southeast-3 only as p5.48xlarge (8 GPUs): one GPU rents it all."""
    spec = write_spec(
        tmp_path / "one.yaml",
        **DAY,
        **{"compute.gpu_count": 1, "compute.regions": ["ap-southeast-3"]},
    )
    proc = burst_cli(["plan", str(spec), "--json", "--replicas", "2"])
    assert proc.returncode == 0, proc.stderr
    od = _by(json.loads(proc.stdout))[("aws", "on_demand")]
    assert (od["instance"], od["nodes"], od["gpus"], od["gpus_used"]) == ("p5.48xlarge", 1, 8, 1)
    assert od["price_per_hour"] == 75.9552  # the instance's price: every GPU of it is billed
    assert od["billing"].startswith("partial node: 1 of 8 GPUs used: aws sells h100")
    assert "only as p5.48xlarge (8 GPUs)" in od["billing"]
    assert od["billing"].endswith("nearest shape: compute.gpu_count 8")
    paid_h = od["expected_hours"] - od["data_transfer_hours"]
    rounding = _term(od, "node rounding")
    assert rounding["usd"] == pytest.approx(7 * paid_h * 75.9552 / 8, rel=1e-5)
    assert rounding["detail"].startswith("7 idle GPU(s) of 8 rented")
    # the table says it, not only the JSON
    text = burst_cli(["plan", str(spec), "--replicas", "2"])
    assert text.returncode == 0, text.stderr
    assert "aws/ap-southeast-3: partial node: 1 of 8 GPUs used" in " ".join(text.stdout.split())


def test_nearest_shapes_below_and_above() -> None:
    od = _by(_plan(**{"compute.gpu_count": 12, "compute.regions": ["ap-southeast-3"]}))[
        ("aws", "on_demand")
    ]
    assert (od["nodes"], od["gpus"], od["gpus_used"]) == (2, 16, 12)
    assert od["billing"].endswith("nearest shape: compute.gpu_count 8 or 16")


@pytest.mark.parametrize(
    ("count", "instance", "gpus", "per_hour", "near"),
    [
        (1, "gpu-h100-sxm/1gpu-16vcpu-200gb", 1, 2.95, None),
        (3, "gpu-h100-sxm/8gpu-128vcpu-1600gb", 8, 23.6, "compute.gpu_count 1 or 8"),
    ],
)
def test_the_smallest_shape_that_holds_the_job(
    count: int, instance: str, gpus: int, per_hour: float, near: str | None
) -> None:
    """Nebius sells h100 in eu-north1 as a 1-GPU preset beside the 8-GPU one."""
    doc = _plan(
        **{
            "compute.gpu_count": count,
            "compute.providers": ["nebius"],
            "compute.regions": ["eu-north1"],
            "budget.max_usd": 1e6,
        }
    )
    od = _by(doc)[("nebius", "on_demand")]
    assert (od["instance"], od["gpus"], od["price_per_hour"]) == (instance, gpus, per_hour)
    assert "skypilot-nebius-0082b04" in od["price_source"] or gpus == 8
    if near is None:
        assert "every GPU billed is used" in od["billing"]
    else:
        assert od["billing"].endswith(near)
        assert "as gpu-h100-sxm/1gpu-16vcpu-200gb (1 GPU) or" in od["billing"]


@pytest.mark.parametrize(
    ("shape", "problem"),
    [
        (
            "provider: nebius\n    region: eu-north1\n    gpu_type: b200\n",
            "no offer nebius/eu-north1/b200 to be a smaller shape of",
        ),
        (
            "provider: nebius\n    region: eu-north1\n    gpu_type: h100\n",
            "gpus_per_instance must be fewer than the offer's 8",
        ),
    ],
)
def test_a_shape_without_its_offer_is_one_line(tmp_path: Path, shape: str, problem: str) -> None:
    gpus = 1 if "b200" in shape else 8
    mine = tmp_path / "shapes.yaml"
    mine.write_text(
        f"shapes:\n  - {shape}    instance: x/{gpus}gpu\n    gpus_per_instance: {gpus}\n"
        "    on_demand_usd_per_hour: {value: 1, source: q, date: 2026-11}\n"
        "    spot_usd_per_hour: {value: null, source: q, date: 2026-11}\n"
    )
    with pytest.raises(BadInputError) as err:
        load_catalog([mine], use_env=False)
    assert problem in err.value.message and "shapes[0]" in err.value.message
    assert str(mine) in (err.value.where or "")


def test_a_users_shape_is_rented_and_merges_per_field(burst_cli: Cli, tmp_path: Path) -> None:
    """A smaller instance given with --catalog is used; a later file changes one price of a
    shape without repeating the rest."""
    spec = write_spec(
        tmp_path / "one.yaml",
        **DAY,
        **{"compute.gpu_count": 1, "compute.regions": ["ap-southeast-3"]},
    )
    mine = tmp_path / "mine.yaml"
    mine.write_text(
        "shapes:\n  - provider: aws\n    region: ap-southeast-3\n    gpu_type: h100\n"
        "    instance: p5.4xlarge\n    gpus_per_instance: 1\n"
        "    on_demand_usd_per_hour: {value: 12.0, source: 'our quote', date: 2026-11}\n"
        "    spot_usd_per_hour: {value: null, source: 'not quoted', date: 2026-11}\n"
    )
    later = tmp_path / "later.yaml"
    later.write_text(
        "shapes:\n  - provider: aws\n    region: ap-southeast-3\n    gpu_type: h100\n"
        "    instance: p5.4xlarge\n"
        "    on_demand_usd_per_hour: {value: 11.0, source: 'new quote', date: 2026-12}\n"
    )
    args = ["plan", str(spec), "--json", "--replicas", "2", "--catalog", str(mine)]
    proc = burst_cli([*args, "--catalog", str(later)])
    assert proc.returncode == 0, proc.stderr
    od = _by(json.loads(proc.stdout))[("aws", "on_demand")]
    assert (od["instance"], od["gpus"], od["price_per_hour"]) == ("p5.4xlarge", 1, 11.0)
    assert od["price_source"] == "new quote" and "partial" not in od["billing"]
