"""``training.engine: deepspeed``: the entrypoint's model trained through a DeepSpeed engine.

The entrypoint builds the model, the torch optimizer and the scheduler as for plain torch;
they are handed to ``deepspeed.initialize`` (the torch optimizer, so DeepSpeed compiles no
fused Adam) with ZeRO stage ``training.zero_stage``. Without a GPU it runs on DeepSpeed's CPU
accelerator with gloo. Alone (no torchrun), it is a world of one: RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR (127.0.0.1) and MASTER_PORT (a free port) default when unset.

Checkpoints go through ``burst.checkpoint.deepspeed.DeepSpeedCheckpointer`` into the run's
store (the same ``CheckpointManager`` the torch path uses). They are one tier, full; the
client state carries the data position (step and samples) and the torch, numpy and python RNG
states, so a resumed run repeats the uninterrupted one exactly. Each rank writes into its own
local directory (no shared filesystem: ranks may be on different nodes) and uploads its own
files as its shard of a sharded checkpoint; a ZeRO-3 checkpoint saved by another number of
ranks is loaded through DeepSpeed's universal checkpoint (converted on restore).
"""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import torch

from burst.checkpoint.read_plan import restore_newest
from burst.checkpoint.state import rng_state, set_rng_state
from burst.errors import BadInputError, CheckpointError
from burst.spec import BurstJob
from burst.train.checkpoints import RunCheckpoints
from burst.train.extension_locks import clear_stale_build_locks
from burst.train.ranks import Ranks, step_seed
from burst.train.setup import TrainSetup
from burst.train.setup_state import restored_samples
from burst.train.weights import weights_sha256

log = logging.getLogger(__name__)
T = TypeVar("T")


def default_environment() -> None:
    """The environment DeepSpeed needs, where the launcher (torchrun) did not set it."""
    from burst.storage.loopback import free_port

    if not torch.cuda.is_available():
        os.environ.setdefault("DS_ACCELERATOR", "cpu")
        skip_inference_ops()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(extensions_dir()))
    for name, value in (("RANK", "0"), ("WORLD_SIZE", "1"), ("LOCAL_RANK", "0")):
        os.environ.setdefault(name, value)
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    if "MASTER_PORT" not in os.environ:
        os.environ["MASTER_PORT"] = str(free_port())


def skip_inference_ops() -> None:
    """On CPU, DeepSpeed's comm backend compiles its shared-memory all-reduce op
    (``deepspeed_shm_comm``) as it starts: about 70 CPU-seconds, a minute here, at the first
    start of every installation. The op serves only ``inference_all_reduce`` (inference and
    AutoTP layers, ``deepspeed.module_inject``); training all-reduces through torch.distributed
    with or without it (``deepspeed.comm.torch`` falls back where the op is absent). DeepSpeed
    probes the ops it may build once a process into ``deepspeed.ops.__compatible_ops__``, a
    dict it keeps so that edits persist: marked incompatible there, the op is not built."""
    import deepspeed.ops

    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def extensions_dir() -> Path:
    """Where the ops DeepSpeed compiles on first use (on CPU: its shm op) are kept for the next
    run: one folder per DeepSpeed installation. Two installations (two virtualenvs) sharing
    one folder compile the same op from different source paths, so ninja sees another command
    and rebuilds it at every start that alternates between them (1-4 min a start here)."""
    import hashlib

    import deepspeed

    home = str(Path(deepspeed.__file__).resolve().parent)
    key = hashlib.sha256(f"{home}|{torch.__version__}".encode()).hexdigest()[:12]
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "torch_extensions" / f"deepspeed-{deepspeed.__version__}-{key}"


#: DeepSpeed's default ZeRO bucket (elements); ZeRO-1/2 allocate it afresh at every step
DEFAULT_BUCKET = 500_000_000


def ds_config(job: BurstJob, world_size: int, n_params: int) -> dict[str, Any]:
    batch = job.training.batch_size
    # a bucket larger than the model is memory allocated (and faulted in) for nothing: 2 GB
    # per step for a small model on CPU, which made each step ~25x slower here
    bucket = min(DEFAULT_BUCKET, max(n_params, 1_000_000))
    return {
        "train_micro_batch_size_per_gpu": batch,
        "gradient_accumulation_steps": 1,
        "train_batch_size": batch * world_size,
        "zero_optimization": {
            "stage": job.training.zero_stage,
            "reduce_bucket_size": bucket,
            "allgather_bucket_size": bucket,
            # exact resume needs the same arithmetic in the same order every run: no
            # reductions racing with the backward pass, no round-robin gradient placement
            "overlap_comm": False,
            "round_robin_gradients": False,
        },
        # the entrypoint's optimizer is any torch optimizer
        "zero_allow_untested_optimizer": True,
        # DeepSpeed clips gradients at a global norm of 1.0 unless told (its default,
        # GRADIENT_CLIPPING_DEFAULT, in 0.19.8); the torch engine does not clip, and the same
        # spec must train the same model on either: measured before this, Adam's moments
        # after the first step were 1.198x smaller than plain torch's (that step's gradient
        # norm) and the losses ~1% apart from the second update on
        "gradient_clipping": 0.0,
        "steps_per_print": 2**31 - 1,
        "wall_clock_breakdown": False,
    }


class DeepSpeedEngine:
    name = "deepspeed"
    tiers: tuple[str, ...] = ("full",)

    def __init__(
        self, job: BurstJob, setup: TrainSetup, work_dir: Path, ranks: Ranks | None = None
    ) -> None:
        default_environment()
        import deepspeed
        import torch.distributed as dist

        self.setup = setup
        self.stage = job.training.zero_stage
        self.ranks = ranks or Ranks()
        self.seed = job.training.seed
        self.batch = job.training.batch_size
        # several ranks: each reads its own slice of every global batch (burst.train.ranks)
        self.samples: int | None = 0 if self.ranks.many else None
        if self.ranks.many and setup.batch_for_samples is None:
            raise BadInputError(
                f"training.entrypoint {job.training.entrypoint}: more than one rank needs "
                "TrainSetup.batch_for_samples (each rank reads its own slice of the global batch)"
            )
        self._own_group = not dist.is_initialized()
        clear_stale_build_locks()  # DeepSpeed's JIT op builds wait on a killed build's lock
        if self._own_group:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            deepspeed.init_distributed(dist_backend=backend, verbose=False)
        world = int(dist.get_world_size())
        self.engine, _, _, _ = deepspeed.initialize(
            model=setup.model,
            optimizer=setup.optimizer,
            lr_scheduler=setup.scheduler,
            config=ds_config(job, world, sum(p.numel() for p in setup.model.parameters())),
        )
        log.info(
            "DeepSpeed engine: ZeRO stage %d, world size %d, device %s",
            self.stage,
            world,
            self.engine.device,
        )
        work_dir.mkdir(parents=True, exist_ok=True)
        # DeepSpeed writes and reads this rank's files here; the store holds the checkpoint.
        # One directory per rank, never shared: the ranks behave as if on separate nodes
        self.local_dir = Path(
            tempfile.mkdtemp(prefix=f"deepspeed-rank{self.ranks.rank}-", dir=work_dir)
        )
        self._ckpt: Any = None
        self._last_bytes = 0

    def _checkpointer(self, store: RunCheckpoints) -> Any:
        from burst.checkpoint.deepspeed import DeepSpeedCheckpointer

        if self._ckpt is None or self._ckpt.manager is not store.mgr:
            self._ckpt = DeepSpeedCheckpointer(self.engine, store.mgr, self.local_dir)
        return self._ckpt

    def step(self, step: int) -> float:
        engine = self.engine
        engine.train()
        if self.samples is None:
            x, y = self.setup.batch_for_step(step)
        else:
            assert self.setup.batch_for_samples is not None
            torch.manual_seed(step_seed(self.seed, step, self.ranks.rank))
            start = self.samples + self.ranks.rank * self.batch
            x, y = self.setup.batch_for_samples(start, self.batch)
            self.samples += self.ranks.world * self.batch

        def train() -> Any:
            out = self.setup.loss_fn(engine(x.to(engine.device)), y.to(engine.device))
            engine.backward(out)  # ZeRO's gradient collectives: fail if a peer is gone
            engine.step()
            return out

        return float(self._collective(f"step {step + 1}", train).detach())

    def _collective(self, what: str, fn: Callable[[], T]) -> T:
        """``fn``, whose DeepSpeed collectives raise RuntimeError (gloo: "Connection reset by
        peer") when another rank died: with several ranks that is ``RankLost`` (exit 75,
        requeue, the message names it), as in the DDP engine; one rank: raised as it is."""
        if not self.ranks.many:
            return fn()
        try:
            return fn()
        except RuntimeError as exc:
            raise self.ranks.lost(what, exc) from None

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        if tier != "full":
            raise CheckpointError(f"a DeepSpeed checkpoint is full, not {tier!r}")
        client = {"data_position": step, "rng": rng_state(), "zero_stage": self.stage}
        if self.samples is not None:
            client.update(samples=self.samples, world=self.ranks.world)
        ckpt = self._checkpointer(store)
        written: list[int] = []
        blocked = self._collective(
            f"checkpoint of step {step}",
            lambda: store.save_via(lambda: written.append(ckpt.save(step, client_state=client))),
        )
        self._last_bytes = written[0] if written else 0
        return blocked

    def restore(self, store: RunCheckpoints) -> int | None:
        """The newest full checkpoint that loads on every rank; older ones if it does not (rank
        0's list decides, the ranks fall back together). Saved by another number of ranks: a
        ZeRO-3 checkpoint is re-partitioned (universal checkpoint), from the same sample."""
        fulls = [r for r in store.refs() if r.tier == "full"] if self.ranks.leader else []
        plan = self._checkpointer(store).plan(guard=self._collective)
        where = store.mgr.store.url
        found = restore_newest(fulls, plan, where=where, ex=self.ranks.exchange())
        if found is None:
            return None
        step, client = found
        if "rng" not in client or "data_position" not in client:
            raise CheckpointError(
                f"DeepSpeed checkpoint at step {step} has no data position or RNG states "
                "(not written by burst's train step)",
                where=store.location,
            )
        saved_by = int(client.get("world") or 1)
        if saved_by != self.ranks.world:
            log.warning(
                "DeepSpeed checkpoint of step %d was saved by %d rank(s), resumed by %d "
                "(universal checkpoint)",
                step,
                saved_by,
                self.ranks.world,
            )
        set_rng_state(client["rng"])
        if self.setup.batch_for_samples is not None and (
            self.samples is not None or client.get("samples") is not None
        ):
            # the data position in samples (as saved; a run of one rank saved none: it
            # read one batch per step); one rank resuming a run of several reads by samples
            self.samples = restored_samples(self.setup, client, self.batch)
        return int(client["data_position"])

    def nbytes(self, tier: str) -> int:
        """This rank's part of a checkpoint (every tier is full): the size of the last one this
        attempt wrote, else an estimate: fp32 weights, a master copy and two optimizer moments
        (Adam's), split over the ranks. Not the torch optimizer's ``state_dict()``: once ZeRO
        has replaced its parameter groups with partitions it raises KeyError (seen: a 2-rank
        ZeRO-3 run preempted before its first save failed with exit 1)."""
        if self._last_bytes:
            return self._last_bytes
        numel = sum(int(getattr(p, "ds_numel", p.numel())) for p in self.engine.module.parameters())
        return numel * 4 * 4 // self.ranks.world

    def weights_sha256(self) -> str:
        import deepspeed

        params = list(self.engine.module.parameters())
        with deepspeed.zero.GatheredParameters(params, enabled=self.stage == 3):
            return weights_sha256(self.engine.module)

    def close(self) -> None:
        shutil.rmtree(self.local_dir, ignore_errors=True)  # this rank's own
        if self._own_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()
