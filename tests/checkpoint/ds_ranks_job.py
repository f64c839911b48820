"""DeepSpeed ZeRO-3 ranks on CPU (gloo) for test_deepspeed_ranks.py, run by torchrun (or alone
as a world of one):

    ds_ranks_job.py STORE_DIR WORK_DIR save|resume

The global batch of a step is GLOBAL samples, cut into W slices of MICRO (W = world size);
with fewer ranks than SLICES each rank accumulates SLICES/W micro batches, so every world
size computes the same averaged gradient (up to the order of float sums).

save (W ranks): engine A trains 2 steps and saves step 2 (each rank into its OWN local
directory, uploaded through its own sharded CheckpointManager: no shared filesystem), trains
2 more; engine B (another init, fresh local directories) restores step 2 from the store and
trains the same 2 steps. Prints one JSON line per rank: both engines' parameter digests,
the files rank fetched, and the final parameters (rank 0).
resume (any W): a fresh engine restores step 2 (a universal checkpoint if W differs from the
saver's), trains the same 2 steps, prints the same JSON (rank 0: the final parameters).
"""

from __future__ import annotations

import json
import os
import sys

os.environ.setdefault("DS_ACCELERATOR", "cpu")
os.environ.setdefault("RANK", "0")
os.environ.setdefault("WORLD_SIZE", "1")
os.environ.setdefault("LOCAL_RANK", "0")
os.environ.setdefault("MASTER_ADDR", "127.0.0.1")

import blake3
import deepspeed
import torch

from burst.checkpoint import CheckpointManager
from burst.checkpoint.deepspeed import DeepSpeedCheckpointer
from burst.checkpoint.sharded import ShardInfo
from burst.train.deepspeed_engine import extensions_dir, skip_inference_ops
from burst.train.extension_locks import clear_stale_build_locks

SLICES = 4  # micro batches in a global batch: any world size dividing 4
MICRO = 2


def batch(step: int, part: int) -> torch.Tensor:
    return torch.randn(MICRO, 16, generator=torch.Generator().manual_seed(1000 * step + part))


def build(seed: int, world: int) -> object:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(16, 33), torch.nn.ReLU(), torch.nn.Linear(33, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    cfg = {
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": SLICES // world,
        "train_batch_size": MICRO * SLICES,
        "zero_optimization": {"stage": 3, "overlap_comm": False},
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 10_000,
    }
    engine, _, _, _ = deepspeed.initialize(model=model, optimizer=opt, config=cfg)
    return engine


def train(engine: object, step: int, rank: int, world: int) -> None:
    e: object = engine
    per = SLICES // world
    for k in range(per):
        loss = e(batch(step, rank * per + k)).pow(2).mean()  # type: ignore[operator]
        e.backward(loss)  # type: ignore[attr-defined]
        e.step()  # type: ignore[attr-defined]


def params(engine: object) -> list[torch.Tensor]:
    ps = list(engine.module.parameters())  # type: ignore[attr-defined]
    with deepspeed.zero.GatheredParameters(ps):
        return [p.detach().clone() for p in ps]


def digest(ps: list[torch.Tensor]) -> str:
    return blake3.blake3(b"".join(p.numpy().tobytes() for p in ps)).hexdigest()


def main() -> None:
    store_dir, work, phase = sys.argv[1], sys.argv[2], sys.argv[3]
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))  # as the train step
    skip_inference_ops()  # as the train step: no shm op build on CPU
    clear_stale_build_locks()
    deepspeed.init_distributed(dist_backend="gloo", verbose=False)
    rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
    out: dict[str, object] = {"rank": rank, "world": world}
    if phase == "save":
        a = build(0, world)
        mgr = CheckpointManager(
            store_dir, chunk_size=4096, shard=ShardInfo(rank, world, "t", commit_timeout_s=120)
        )
        ckpt = DeepSpeedCheckpointer(a, mgr, f"{work}/a-rank{rank}")
        for s in range(2):
            train(a, s, rank, world)
        ckpt.save(2, client_state={"samples": 2 * MICRO * SLICES})
        mgr.wait(120)
        mgr.close()
        torch.distributed.barrier()  # every rank's wait returned: the global manifest is there
        for s in range(2, 4):
            train(a, s, rank, world)
        out["a"] = digest(params(a))
    b = build(7, world)
    reader = CheckpointManager(store_dir, chunk_size=4096)
    ckpt_b = DeepSpeedCheckpointer(b, reader, f"{work}/{phase}-b-rank{rank}")
    step, client = ckpt_b.restore(2)
    assert step == 2 and client["samples"] == 2 * MICRO * SLICES, client
    for s in range(2, 4):
        train(b, s, rank, world)
    final = params(b)
    out.update(b=digest(final), restored=ckpt_b.last_restore)
    if rank == 0:
        out["params"] = [p.reshape(-1).tolist() for p in final]
    reader.close()
    torch.distributed.destroy_process_group()  # a gloo group left to exit can SIGABRT
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
