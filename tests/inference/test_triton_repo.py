"""A tier as a Triton model repository (burst.inference.triton_repo): the layout KServe's
storage-initializer copies to /mnt/models and Triton's PyTorch backend loads, named as the
router and deploy/inference name it.

Checked beyond these tests (docs/reference/walk-kserve.md): the configurations written here
are parsed and completed by a real tritonserver (nvidia-pytriton 0.7.0's, which stops only at
its missing PyTorch backend), and the TorchScript of the quickstart's tiers traced by torch
2.13 loads and answers identically in torch 2.0.1, the libtorch of KServe's Triton runtime.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from torch import nn

from burst.inference.distill import quantize
from burst.inference.serve import DEFAULT_PLACEMENT
from burst.inference.triton_repo import (
    export_tier,
    forward_inputs,
    model_name,
    repository_key,
)
from burst.spec import load_spec
from burst.storage import open_store
from burst.storage.local import LocalStore
from burst.train.example import SmallMLP, build_student

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"
#: the input the router sends a Triton tier (serve.TritonTier.ask)
ROUTER_INPUT = "x"


def field(text: str, name: str) -> list[str]:
    """Every value of a scalar field in protobuf text format (enough for burst's configs)."""
    return re.findall(rf"\b{name}: *\"?([\w.]+)\"?", text)


def models() -> dict[str, tuple[str, nn.Module]]:
    job = load_spec(QUICKSTART)
    torch.manual_seed(0)
    return {
        "heavy": ("heavy", SmallMLP()),
        "distilled": ("distilled", build_student(job)),
        "distilled-int8": ("distilled", quantize(build_student(job))),
    }


@pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated")
@pytest.mark.parametrize("tier", ["heavy", "distilled", "distilled-int8"])
def test_a_tier_is_one_model_triton_loads_as_the_router_names_it(tier: str, tmp_path: Path) -> None:
    kind, model = models()[tier]
    store = open_store(f"file://{tmp_path}")
    x = torch.randn(4, 32, generator=torch.Generator().manual_seed(1))
    config = export_tier(store, tier, kind, model, x)
    name = model_name(tier)
    prefix = repository_key(tier)
    assert prefix == f"tiers/{tier}/triton/"
    # the storage-initializer copies the prefix to /mnt/models: one model directory there
    assert sorted(i.key for i in store.list(prefix)) == [
        f"{prefix}{name}/1/model.pt",
        f"{prefix}{name}/config.pbtxt",
    ]
    text = store.get_bytes(f"{prefix}{name}/config.pbtxt").decode()
    # the model's name (its directory's), its input's, its output's
    assert field(text, "name") == [name, ROUTER_INPUT, "OUTPUT__0"]
    assert field(text, "platform") == ["pytorch_libtorch"]
    assert re.findall(r"dims: \[ (\d+) \]", text) == ["32", "1"]
    placement = next(p for p in DEFAULT_PLACEMENT if p.kind == kind)
    assert field(text, "max_queue_size") == [str(placement.queue_limit)]
    # the int8 kernels are CPU kernels; the heavy tier is the GPU one (deploy/inference)
    assert field(text, "kind") == ["KIND_GPU" if kind == "heavy" else "KIND_CPU"]
    assert config.name == name and config.input_name == ROUTER_INPUT
    # what Triton's backend loads answers as the tier does
    loaded = torch.jit.load(str(tmp_path / prefix / name / "1" / "model.pt"))
    assert forward_inputs(loaded) == [ROUTER_INPUT]
    with torch.no_grad():
        assert torch.allclose(loaded(x), model(x))


def test_the_model_is_written_before_its_configuration(tmp_path: Path) -> None:
    order: list[str] = []

    class Recording(LocalStore):
        def put_bytes(self, key: str, data: bytes | memoryview) -> None:
            order.append(key.rsplit("/", 1)[-1])
            super().put_bytes(key, data)

    export_tier(Recording(tmp_path), "heavy", "heavy", SmallMLP(), torch.zeros(2, 32))
    assert order == ["model.pt", "config.pbtxt"]


def test_a_model_the_configuration_cannot_describe_is_refused(tmp_path: Path) -> None:
    class TwoInputs(nn.Module):
        def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + b

    class Wrapped(nn.Module):
        def forward(self, a: torch.Tensor) -> torch.Tensor:
            return TwoInputs()(a, a).sum()

    store = open_store(f"file://{tmp_path}")
    with pytest.raises(ValueError, match="one input tensor and one output tensor"):
        export_tier(store, "heavy", "heavy", Wrapped(), torch.zeros(2, 32))
    with pytest.raises(ValueError, match="sample batch"):
        export_tier(store, "heavy", "heavy", SmallMLP(), torch.zeros(32))
    assert list(store.list("")) == []


def test_serve_asks_triton_for_the_repositorys_model() -> None:
    from burst.inference import serve

    # TritonTier names its model with the same function; the router's URL is built from it
    assert serve.model_name is model_name
    assert [model_name(p.name) for p in DEFAULT_PLACEMENT] == ["distilled_int8", "heavy"]
