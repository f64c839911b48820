"""A tiny DeepSpeed run on CPU (gloo), for test_deepspeed.py: run as a separate process.

    python ds_job.py STAGE STORE_DIR WORK_DIR save|resume

save:   train 2 steps, checkpoint at step 2 through DeepSpeedCheckpointer, train 2 more.
resume: fresh engine (other seed), restore, train the same 2 more steps.
Both print the blake3 of the final parameters (gathered under ZeRO-3) as the last line.
"""

from __future__ import annotations

import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0", MASTER_ADDR="127.0.0.1")

import blake3
import deepspeed
import torch

from burst.checkpoint import CheckpointManager
from burst.checkpoint.deepspeed import DeepSpeedCheckpointer
from burst.train.deepspeed_engine import extensions_dir, skip_inference_ops
from burst.train.extension_locks import clear_stale_build_locks


def batch(i: int) -> torch.Tensor:
    return torch.randn(2, 16, generator=torch.Generator().manual_seed(100 + i))


def main() -> None:
    stage, store_dir, work, phase = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4]
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))  # as the train step
    skip_inference_ops()  # as the train step: no shm op build on CPU
    clear_stale_build_locks()  # as the train step does: a killed build's lock hangs the op build
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0 if phase == "save" else 7)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cfg = {
        "train_micro_batch_size_per_gpu": 2,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": stage},
        "steps_per_print": 10_000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    mgr = CheckpointManager(store_dir, chunk_size=4096)
    ckpt = DeepSpeedCheckpointer(engine, mgr, work)

    def train(i: int) -> None:
        loss = engine(batch(i)).pow(2).mean()
        engine.backward(loss)
        engine.step()

    if phase == "save":
        train(0)
        train(1)
        ckpt.save(2, client_state={"data_index": 2})
        mgr.wait()
        start = 2
    else:
        step, client = ckpt.restore()
        assert step == 2 and client["data_index"] == 2, (step, client)
        start = client["data_index"]
    for i in range(start, start + 2):
        train(i)
    params = list(engine.module.parameters())
    with deepspeed.zero.GatheredParameters(params, enabled=stage == 3):
        digest = blake3.blake3(b"".join(p.detach().numpy().tobytes() for p in params))
    mgr.close()
    # Leave the process group before the interpreter exits: a gloo group left to the C++
    # destructors at exit can abort the process ("terminate called without an active
    # exception", SIGABRT) after the run succeeded; the train step does the same (engine close).
    torch.distributed.destroy_process_group()
    print(digest.hexdigest())


if __name__ == "__main__":
    main()
