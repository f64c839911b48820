"""One tier served by NVIDIA Triton (``burst serve --engine triton``), a process of its own.

Run by the Python of an environment that has ``nvidia-pytriton`` (it needs numpy < 2, so not
burst's own environment) and torch; it imports nothing of burst:

    PYTHON -m burst.inference.triton_tier --model tier.pt --name NAME --http-port P ...

It loads the tier's TorchScript export (``torch.jit.load``; burst writes it from the tier's
checkpoint), binds it to a Triton server (the binary inside the pytriton wheel, on CPU here)
with input ``x`` (FP32, 32 features) and output ``y``, sleeps ``--compute-ms`` per batch (the
tier's emulated model time, as the loopback tier servers do), prints ``ready`` once Triton
serves, and serves until SIGTERM/SIGINT. Clients speak Triton's KServe v2 protocol
(``POST /v2/models/NAME/infer``, ``GET /v2/health/ready``, metrics on the metrics port).
"""

from __future__ import annotations

import argparse
import time
from typing import Any


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--http-port", type=int, required=True)
    ap.add_argument("--grpc-port", type=int, required=True)
    ap.add_argument("--metrics-port", type=int, required=True)
    ap.add_argument("--compute-ms", type=float, default=0.0)
    ap.add_argument("--features", type=int, default=32)
    args = ap.parse_args()

    import numpy as np
    import torch
    from pytriton.decorators import batch
    from pytriton.model_config import ModelConfig, Tensor
    from pytriton.triton import Triton, TritonConfig

    torch.set_num_threads(1)
    model = torch.jit.load(args.model).eval()

    @batch
    def infer(x: Any) -> dict[str, Any]:
        t0 = time.perf_counter()
        with torch.no_grad():
            y = model(torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))).numpy()
        pause = args.compute_ms / 1000.0 - (time.perf_counter() - t0)
        if pause > 0:
            time.sleep(pause)
        return {"y": y.astype(np.float32)}

    config = TritonConfig(
        http_address="127.0.0.1",
        grpc_address="127.0.0.1",
        http_port=args.http_port,
        grpc_port=args.grpc_port,
        metrics_port=args.metrics_port,
        log_verbose=0,
        exit_timeout_secs=2,
    )
    with Triton(config=config) as triton:
        triton.bind(
            model_name=args.name,
            infer_func=infer,
            inputs=[Tensor(name="x", dtype=np.float32, shape=(args.features,))],
            outputs=[Tensor(name="y", dtype=np.float32, shape=(1,))],
            config=ModelConfig(max_batch_size=8),
        )
        triton.run()
        print("ready", flush=True)
        triton.serve()


if __name__ == "__main__":
    main()
