"""A tier as a Triton model repository: what deploy/inference's InferenceServices load.

Each InferenceService names ``storageUri: <run store>/tiers/<tier>/triton/``. KServe's
storage-initializer (an init container the pod webhook injects) copies every object under that
prefix to ``/mnt/models``, keeping the part of each key after the prefix (KServe v0.20.0
``python/storage/kserve_storage/kserve_storage.py`` ``_download_s3``), and KServe's Triton
runtime starts ``tritonserver --model-store=/mnt/models``. Triton loads each directory there as
a model named after the directory, so the prefix holds exactly one model:

    tiers/<tier>/triton/<model>/config.pbtxt
    tiers/<tier>/triton/<model>/1/model.pt        (TorchScript)

``<model>`` is the name the router asks for (``/v2/models/<model>/infer``): the tier's name
with ``-`` as ``_`` (``distilled_int8``, ``heavy``). ``config.pbtxt`` is required: Triton's
PyTorch backend does not complete a TorchScript model's configuration. It names the input
after the traced ``forward``'s argument (the backend's forward-argument naming, read from the
TorchScript schema: the router sends ``x``), the output by index (``OUTPUT__0``: TorchScript
outputs have no names), the batch dimension (``max_batch_size``, dims without it), where the
model runs (``KIND_GPU`` for the heavy tier, ``KIND_CPU`` for the distilled ones: the int8
kernels of ``quantize_dynamic`` exist only on CPU), one instance (one accelerator answers one
request at a time, as ``burst serve``'s tiers do) and the policy's queue limit as Triton's
``max_queue_size`` (a request past it is refused at once, as ``burst serve``'s tiers answer
503). The model file is written before its configuration: a repository with a configuration
has its model.

The TorchScript is traced by the torch that runs ``burst distill``; KServe's Triton runtime
(``nvcr.io/nvidia/tritonserver:23.05-py3`` in KServe v0.15 to v0.20) runs PyTorch 2.0's
libtorch. A trace of the quickstart's tiers by torch 2.13 (file format version 3) loads and
answers identically in torch 2.0.1, the int8 tier included (docs/reference/walk-kserve.md).
"""

from __future__ import annotations

import io
import warnings
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn

from burst.storage.base import ObjectStore

#: the directory under a tier's store prefix that holds its Triton model repository
REPOSITORY_DIR = "triton"
#: the model version Triton serves (its default version policy: the newest, here the only one)
VERSION = "1"
#: the TorchScript file name Triton's PyTorch backend loads by default
MODEL_FILE = "model.pt"
#: the largest batch a tier's Triton instance runs (the router sends one sample a request)
MAX_BATCH_SIZE = 8
#: requests one tier holds waiting, beyond which it refuses (burst serve's tiers: 503)
DEFAULT_QUEUE_LIMIT = 8

InstanceKind = Literal["KIND_CPU", "KIND_GPU"]
#: where each kind of tier runs (deploy/inference: the heavy tier on a GPU, the others on CPU)
INSTANCE_KIND: dict[str, InstanceKind] = {"heavy": "KIND_GPU", "distilled": "KIND_CPU"}


def model_name(tier: str) -> str:
    """The name the router asks Triton for (``/v2/models/<name>/infer``): Triton's model
    directory, the tier's name with ``-`` as ``_``."""
    return tier.replace("-", "_")


def repository_key(tier: str) -> str:
    """The tier's Triton model repository, relative to the run's store, ending in ``/``: the
    InferenceService's ``storageUri`` is the run's store URL followed by this (the storage
    initializer lists objects by this prefix: without the slash it would also copy
    ``triton-old/`` and the like)."""
    return f"tiers/{tier}/{REPOSITORY_DIR}/"


@dataclass(frozen=True)
class TritonModelConfig:
    """The fields of one model's ``config.pbtxt`` that burst writes."""

    name: str
    input_name: str
    features: int
    outputs: int
    instance_kind: InstanceKind
    queue_limit: int = DEFAULT_QUEUE_LIMIT
    max_batch_size: int = MAX_BATCH_SIZE

    def pbtxt(self) -> str:
        """The configuration in protobuf text format (Triton's ModelConfig)."""
        return (
            f'name: "{self.name}"\n'
            'platform: "pytorch_libtorch"\n'
            f"max_batch_size: {self.max_batch_size}\n"
            "input [\n"
            f'  {{ name: "{self.input_name}", data_type: TYPE_FP32, dims: [ {self.features} ] }}\n'
            "]\n"
            "output [\n"
            f'  {{ name: "OUTPUT__0", data_type: TYPE_FP32, dims: [ {self.outputs} ] }}\n'
            "]\n"
            f"instance_group [ {{ count: 1, kind: {self.instance_kind} }} ]\n"
            "dynamic_batching {\n"
            f"  default_queue_policy {{ max_queue_size: {self.queue_limit} }}\n"
            "}\n"
        )


def forward_inputs(module: torch.jit.ScriptModule) -> list[str]:
    """The names of a TorchScript module's ``forward`` arguments (``self`` left out): what
    Triton's PyTorch backend matches the configuration's input names against."""
    forward = module.forward
    if not isinstance(forward, torch._C.ScriptMethod):
        raise TypeError(f"{type(module).__name__}.forward is not TorchScript")
    return [a.name for a in forward.schema.arguments if a.name != "self"]


def export_tier(
    store: ObjectStore,
    tier: str,
    kind: str,
    model: nn.Module,
    sample: torch.Tensor,
    *,
    queue_limit: int = DEFAULT_QUEUE_LIMIT,
) -> TritonModelConfig:
    """Write ``tier``'s Triton model repository into the run's ``store`` (under
    :func:`repository_key`): ``model`` traced on ``sample`` (a batch of inputs, features
    last), then its configuration."""
    if sample.dim() != 2:
        raise ValueError(f"tier {tier}: a sample batch of shape (n, features), not {sample.shape}")
    with torch.no_grad(), warnings.catch_warnings():
        # torch 2.13 marks TorchScript deprecated in favour of torch.export; the runtime's
        # Triton (23.05) loads only TorchScript (PT2 archives need a far newer Triton)
        warnings.filterwarnings("ignore", message=r".*torch\.jit\.\w+` is deprecated.*")
        traced = torch.jit.trace(model.eval(), sample[:1])
        out = traced(sample[:1])
        buf = io.BytesIO()
        torch.jit.save(traced, buf)
    inputs = forward_inputs(traced)
    if len(inputs) != 1 or not isinstance(out, torch.Tensor) or out.dim() != 2:
        raise ValueError(
            f"tier {tier}: Triton's configuration here is for one input tensor and one output "
            f"tensor of shape (n, k); the model takes {inputs} and returns {type(out).__name__}"
        )
    config = TritonModelConfig(
        name=model_name(tier),
        input_name=inputs[0],
        features=int(sample.shape[1]),
        outputs=int(out.shape[1]),
        instance_kind=INSTANCE_KIND[kind],
        queue_limit=queue_limit,
    )
    prefix = repository_key(tier) + config.name + "/"
    store.put_bytes(f"{prefix}{VERSION}/{MODEL_FILE}", buf.getvalue())
    store.put_bytes(prefix + "config.pbtxt", config.pbtxt().encode())
    return config
