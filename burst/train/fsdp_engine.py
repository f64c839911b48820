"""``training.engine: fsdp2``: torch FSDP2 (``fully_shard``) over W >= 2 ranks.

The entrypoint's model is sharded with ``fully_shard`` (one group: the whole model, each
parameter cut along its first dimension over the ranks, all-gathered for the forward and
backward, gradients reduce-scattered and averaged). Its parameters become DTensors; the
optimizer the entrypoint built is pointed at them (before any step, so it holds no state yet)
and its state is sharded the same way. Data and dropout as the DDP engine: rank ``r`` reads
samples ``[p + r*B, p + (r+1)*B)`` of each global batch and draws its masks from a seed of
(seed, step, rank).

Checkpoints (docs/training.md, "engine: fsdp2"): every rank writes only its own shards, the
model's and the optimizer's, as DCP's ``get_state_dict`` gives them (keyed by parameter name),
through the sharded two-phase commit (``burst.checkpoint.sharded``: a shard manifest per rank,
then one global manifest), asynchronously from its own host buffer and worker like every
engine. Restore (``restore_own``): saved by as many ranks, each rank reads only its own shard,
straight into the live model's and optimizer's tensors; saved by another number, it reads the
whole checkpoint, joins the ranks' shards into global tensors
(``burst.checkpoint.dtensor_parts``) and cuts them for the reader's ranks, so a checkpoint
saved by 4 ranks resumes on 2 or 8; DCP's ``set_state_dict`` loads them.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

from burst.checkpoint.dtensor_parts import (
    PART,
    local_nbytes,
    local_parts,
    own_shards,
    rank_parts,
)
from burst.checkpoint.own_restore import restore_own
from burst.checkpoint.verify import ChunkAudit
from burst.errors import BadInputError, CheckpointError
from burst.spec import BurstJob
from burst.train.checkpoints import RunCheckpoints
from burst.train.ranks import Ranks, step_seed
from burst.train.setup import TrainSetup
from burst.train.weights import state_sha256

log = logging.getLogger(__name__)


def shard_model(setup: TrainSetup) -> None:
    """``fully_shard`` the model in place and point the optimizer at the sharded parameters
    (``fully_shard`` replaces each parameter by a new DTensor parameter)."""
    from torch.distributed.fsdp import fully_shard

    if setup.optimizer.state:
        raise BadInputError(
            "engine fsdp2: the entrypoint's optimizer already holds state (it stepped); "
            "the model is sharded before the first step"
        )
    names = {id(p): n for n, p in setup.model.named_parameters()}
    for group in setup.optimizer.param_groups:
        for p in group["params"]:
            if id(p) not in names:
                raise BadInputError(
                    "engine fsdp2: the entrypoint's optimizer holds a tensor that is not a "
                    "parameter of its model"
                )
    fully_shard(setup.model)
    sharded = dict(setup.model.named_parameters())
    for group in setup.optimizer.param_groups:
        group["params"] = [sharded[names[id(p)]] for p in group["params"]]


def live_part(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """This rank's part of a checkpoint as ``FSDPEngine`` saves it, holding the live local
    shards of the model and (if it has any state) the optimizer: a restore writes into
    them in place (``restore_own``'s ``into``). An optimizer that never stepped gets no
    state here (DCP would create it by a step of zero gradients, which counts as a step)."""
    part: dict[str, Any] = {"model": local_parts(get_model_state_dict(model), "model")}
    if optimizer.state:
        part["optimizer"] = local_parts(get_optimizer_state_dict(model, optimizer), "optimizer")
    return {PART: part}


class FSDPEngine:
    name = "torch-fsdp2"
    tiers: tuple[str, ...] = ("full", "weights")

    def __init__(self, job: BurstJob, setup: TrainSetup, ranks: Ranks) -> None:
        if setup.batch_for_samples is None:
            raise BadInputError(
                f"training.entrypoint {job.training.entrypoint}: engine fsdp2 needs "
                "TrainSetup.batch_for_samples (each rank reads its own slice of the global batch)"
            )
        if not ranks.many:
            raise BadInputError("engine fsdp2 needs at least 2 ranks (it runs under torchrun)")
        self.setup = setup
        self.ranks = ranks
        self.seed = job.training.seed
        self.batch = job.training.batch_size
        self.samples = 0
        try:
            shard_model(setup)
        except RuntimeError as exc:
            raise ranks.lost("FSDP2 start", exc) from None
        log.info(
            "FSDP2: rank %d of %d, %d samples per rank per step, %d parameter bytes here",
            ranks.rank,
            ranks.world,
            self.batch,
            local_nbytes(dict(setup.model.named_parameters())),
        )

    def step(self, step: int) -> float:
        setup, ranks = self.setup, self.ranks
        torch.manual_seed(step_seed(self.seed, step, ranks.rank))
        assert setup.batch_for_samples is not None
        x, y = setup.batch_for_samples(self.samples + ranks.rank * self.batch, self.batch)
        setup.model.train()
        setup.optimizer.zero_grad(set_to_none=True)
        try:  # parameters all-gathered, gradients reduce-scattered: fails if a peer is gone
            out = setup.loss_fn(setup.model(x), y)
            out.backward()
        except RuntimeError as exc:
            raise ranks.lost(f"step {step + 1}", exc) from None
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        self.samples += ranks.world * self.batch
        return float(out.detach())

    def _part(self, step: int, tier: str) -> dict[str, Any]:
        """This rank's part of a checkpoint: its shards of the model (and of the optimizer
        state, tier full), plus, on rank 0, what is the same on every rank."""
        setup = self.setup
        part: dict[str, Any] = {
            "rank": self.ranks.rank,
            "world": self.ranks.world,
            "model": local_parts(get_model_state_dict(setup.model), "model"),
        }
        if tier == "full":
            # an optimizer that never stepped has no state; DCP would create it by a step of
            # zero gradients (which counts as a step): save none, restore none
            part["optimizer"] = (
                local_parts(get_optimizer_state_dict(setup.model, setup.optimizer), "optimizer")
                if setup.optimizer.state
                else None
            )
        if self.ranks.leader:
            part["head"] = {
                "step": step,
                "tier": tier,
                "world": self.ranks.world,
                "scheduler": setup.scheduler.state_dict() if setup.scheduler else None,
                "data_position": step if tier == "full" else None,
                "samples": self.samples if tier == "full" else None,
            }
        return {PART: part}

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        return store.save(step, self._part(step, tier), tier)

    def restore(self, store: RunCheckpoints) -> int | None:
        """The newest full checkpoint that restores (``restore_own``: rank 0's list decides,
        all ranks fall back together; saved by as many ranks, each fetches only its own
        shard, straight into the live model's and optimizer's tensors), its own shards taken
        as they are, or, saved by another number of ranks, all shards joined and cut for
        these ranks."""
        mgr, audit = store.mgr, ChunkAudit()
        try:
            restored = restore_own(
                mgr.store,
                mgr.checkpoints("full") if self.ranks.leader else [],
                self.ranks.exchange(),
                PART,
                into=lambda: live_part(self.setup.model, self.setup.optimizer),
                concurrency=mgr.concurrency,
                audit=audit,
            )
        except CheckpointError as exc:
            raise CheckpointError(
                f"rank {self.ranks.rank}: {exc.message}", where=exc.where
            ) from None
        finally:
            # what the reads found (sound chunks, corrupt ones quarantined) reaches the
            # writer, as CheckpointManager.restore_split does
            mgr._absorb(audit)
        if restored is None:
            return None
        where = f"checkpoint step {restored.step} (full) in {store.mgr.store.url}"
        parts = rank_parts(restored.state)
        if parts is None:
            raise CheckpointError(
                f"{where} was not saved by engine fsdp2 (a run keeps its training.engine)"
            )
        head = parts[0].get("head")
        if not isinstance(head, dict) or head.get("samples") is None:
            raise CheckpointError(f"{where}: rank 0's part has no data position")
        try:
            self._load(parts)
        except CheckpointError as exc:
            raise CheckpointError(f"{where}: {exc.message}") from None
        except (RuntimeError, KeyError, ValueError) as exc:
            text = " ".join(str(exc).split())[:300]
            raise CheckpointError(f"{where} does not fit the model: {text}") from None
        if self.setup.scheduler is not None and head.get("scheduler") is not None:
            self.setup.scheduler.load_state_dict(head["scheduler"])
        self.samples = int(head["samples"])
        saved_by = len(parts)
        if saved_by != self.ranks.world:
            log.warning(
                "checkpoint of step %d was saved by %d rank(s), resumed by %d: from sample %d",
                restored.step,
                saved_by,
                self.ranks.world,
                self.samples,
            )
        return int(head["data_position"])

    def _load(self, parts: list[dict[str, Any]]) -> None:
        setup = self.setup
        rank = self.ranks.rank
        model_like = get_model_state_dict(setup.model)
        set_model_state_dict(setup.model, own_shards([p["model"] for p in parts], model_like, rank))
        if parts[0].get("optimizer") is None:
            return  # saved before the first step: the optimizer starts empty, as then
        optim_like = get_optimizer_state_dict(setup.model, setup.optimizer)
        optim = own_shards([p["optimizer"] for p in parts], optim_like, rank)
        set_optimizer_state_dict(setup.model, setup.optimizer, optim)

    def nbytes(self, tier: str) -> int:
        """This rank's part of a checkpoint of ``tier`` (what it stages and uploads); no
        collective (rank 0 alone calls it for the emergency decision)."""
        n = local_nbytes(dict(self.setup.model.named_parameters()))
        if tier == "full":
            n += local_nbytes(dict(self.setup.optimizer.state))
        return n

    def weights_sha256(self) -> str:
        """The digest of the whole (all-gathered) weights; every rank calls it."""
        try:
            full = get_model_state_dict(
                self.setup.model, options=StateDictOptions(full_state_dict=True)
            )
        except RuntimeError as exc:
            raise self.ranks.lost("gathering the weights", exc) from None
        return state_sha256({k: v for k, v in full.items() if isinstance(v, torch.Tensor)})

    def close(self) -> None:
        return None
