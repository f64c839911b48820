"""How much compute a spec needs: expected training hours and the checkpoint's size and cost.

Expected training hours (useful GPU time, before pre-emptions and start-up):

* ``training.step_seconds`` given (a measurement on the target GPUs): steps x step_seconds.
* else ``model.training_ops`` given: ops / (GPUs x peak FLOP/s x MFU).
* else the usual transformer estimate, 6 x trainable parameters x tokens, with tokens =
  steps x batch_size x training.tokens_per_sample, over GPUs x peak FLOP/s x MFU.

Peak FLOP/s is the catalog's dense BF16 figure for the GPU type; MFU (model FLOP utilisation)
is a catalog assumption (0.4 by default). A GPU type without a known peak cannot be estimated
from FLOPs: the spec must then give ``training.step_seconds``.

The checkpoint holds ``checkpoint_bytes_per_param`` bytes per parameter (16 by default:
mixed-precision Adam); its blocking cost is size / host-copy bandwidth, its upload time size /
upload bandwidth (catalog assumptions).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from burst.errors import BadInputError
from burst.plan.catalog import Catalog
from burst.plan.cost import BYTES_PER_GB
from burst.spec import BurstJob


@dataclass(frozen=True)
class Workload:
    compute_s: float  # useful training seconds on the job's GPUs
    step_s: float
    basis: str
    checkpoint_gb: float
    checkpoint_cost_s: float
    upload_s: float

    @property
    def compute_hours(self) -> float:
        return self.compute_s / 3600.0

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "compute_hours": self.compute_hours}


def estimate(job: BurstJob, cat: Catalog) -> Workload:
    t = job.training
    gpus = job.compute.gpu_count
    if t.step_seconds is not None:
        compute_s = t.steps * t.step_seconds
        basis = f"training.step_seconds {t.step_seconds:g} s x {t.steps} steps"
    else:
        gpu = cat.gpus.get(job.compute.gpu_type)
        peak = gpu["peak_tflops"].value if gpu else None
        if peak is None:
            raise BadInputError(
                f"no peak throughput known for gpu_type {job.compute.gpu_type!r}: give "
                "training.step_seconds in the spec or peak_tflops in a --catalog file",
                where="compute.gpu_type",
            )
        mfu = cat.assumption("mfu")
        rate = gpus * float(peak) * 1e12 * mfu
        if job.model.training_ops:
            ops = job.model.training_ops
            basis = f"model.training_ops {ops:.3g} / ({gpus} x {peak:g} TFLOP/s x MFU {mfu:g})"
        else:
            tokens = t.steps * t.batch_size * t.tokens_per_sample
            ops = 6.0 * job.model.parameters * job.model.trainable_fraction * tokens
            basis = (
                f"6 x {job.model.parameters:.3g} params x {tokens:.3g} tokens = {ops:.3g}"
                f" FLOP / ({gpus} x {peak:g} TFLOP/s x MFU {mfu:g})"
            )
        compute_s = ops / rate
    step_s = compute_s / t.steps
    size_gb = job.model.parameters * cat.assumption("checkpoint_bytes_per_param") / BYTES_PER_GB
    return Workload(
        compute_s=compute_s,
        step_s=step_s,
        basis=basis,
        checkpoint_gb=size_gb,
        checkpoint_cost_s=size_gb / cat.assumption("host_copy_gb_per_s"),
        upload_s=size_gb / cat.assumption("upload_gb_per_s"),
    )
