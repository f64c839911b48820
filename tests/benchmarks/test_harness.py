"""benchmarks/harness.py: the mechanics every benchmark shares (A/B alternation, medians,
goals, JSON results, loopback S3, torchrun ranks). The benchmarks' own smoke runs are
tests/checkpoint/test_layout_and_bench.py and tests/regional/test_benchmark_smoke.py."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]


def _harness() -> ModuleType:
    spec = importlib.util.spec_from_file_location("harness", REPO / "benchmarks" / "harness.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


harness = _harness()


def test_alternation_drops_the_warmup_and_swaps_the_order() -> None:
    calls: list[str] = []
    counter = iter(range(100))

    def side(name: str) -> int:
        calls.append(name)
        return next(counter)

    logged: list[tuple[int, int, int]] = []
    a, b = harness.alternate(
        3,
        lambda: side("A"),
        lambda: side("B"),
        warmup=1,
        after_rep=lambda rep, a, b: logged.append((rep, len(a), len(b))),
    )
    assert "".join(calls) == "AB" + "BA" + "AB" + "BA"  # rep 0 is the warm-up
    assert a == [3, 4, 7] and b == [2, 5, 6]
    assert logged == [(0, 1, 1), (1, 2, 2), (2, 3, 3)]
    assert [harness.ab_order(r) for r in range(3)] == ["AB", "BA", "AB"]


def test_medians_goals_and_results(tmp_path: Path) -> None:
    assert harness.median([3.0, 1.0, 2.0]) == 2.0 and harness.median([1, 2]) == 1.5
    goals = {"stall_ratio": ("<=", 0.5), "upload_ratio": (">=", 0.95)}
    assert harness.goals_text(goals) == {"stall_ratio": "<= 0.5", "upload_ratio": ">= 0.95"}
    assert harness.meets_goals({"stall_ratio": 0.5, "upload_ratio": 0.9}, goals) == {
        "stall_ratio": True,
        "upload_ratio": False,
    }
    with pytest.raises(ValueError, match="op"):
        harness.meets_goals({"x": 1}, {"x": ("<", 2)})
    out = tmp_path / "deep" / "r.json"
    harness.write_results(out, {"a": 1})
    assert out.read_text() == '{\n  "a": 1\n}\n'
    assert "CPUs, load average" in harness.machine_note()


def test_loopback_s3_environment_is_restored(tmp_path: Path) -> None:
    before = {k: os.environ.get(k) for k in ("AWS_ENDPOINT_URL_S3", "AWS_ACCESS_KEY_ID")}
    with harness.loopback_s3(tmp_path / "s3") as server:
        assert os.environ["AWS_ENDPOINT_URL_S3"] == server.client_env()["AWS_ENDPOINT_URL_S3"]
        server.create_bucket("bench")
    assert {k: os.environ.get(k) for k in before} == before


RANK_SCRIPT = """
import argparse, json, sys
import torch, torch.distributed as dist
p = argparse.ArgumentParser()
for a in ("--work", "--result", "--value"):
    p.add_argument(a)
p.add_argument("--rank-run", action="store_true")
args = p.parse_args()
dist.init_process_group("gloo")
t = torch.tensor([float(args.value) + dist.get_rank()])
dist.all_reduce(t)
if dist.get_rank() == 0:
    open(args.result, "w").write(json.dumps({"sum": t.item(), "world": dist.get_world_size()}))
dist.destroy_process_group()
"""


@pytest.mark.e2e
def test_torchrun_ranks_return_rank_zeros_result(tmp_path: Path) -> None:
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    row = harness.torchrun_ranks(script, 2, ["--value", "10"], prefix="harness-test-")
    assert row == {"sum": 21.0, "world": 2}
