"""``training.engine: torch`` with more than one rank: torch DistributedDataParallel.

Every rank holds the whole model and optimizer (replicated); DDP averages the gradients.
Rank ``r`` of ``W`` trains on samples ``[p + r*B, p + (r+1)*B)`` of each global batch of
``W*B`` (``B`` = ``training.batch_size`` per rank, ``p`` the samples consumed so far), and
draws its dropout masks from a seed of (seed, step, rank): a resumed rank repeats the
uninterrupted one exactly, with no RNG state to carry.

Checkpoints are sharded (``burst.checkpoint.sharded``): the replicated state is cut into W
parts balanced by bytes, and each rank stages and uploads only its part, from its own buffer
and worker; it is written once, not W times. Restore reads the global checkpoint whatever
world size wrote it (rank 0 chooses which one, every rank loads that one), so a run saved by
4 ranks resumes on 2 or 8, from the same sample.
"""

from __future__ import annotations

import gc
import logging
from typing import Any

import torch

from burst.checkpoint.sharded import assemble, partition
from burst.errors import BadInputError, CheckpointError
from burst.spec import BurstJob
from burst.train.checkpoints import RunCheckpoints, state_nbytes
from burst.train.ranks import Ranks, step_seed
from burst.train.setup import TrainSetup
from burst.train.setup_state import apply_setup, capture_setup, restored_samples
from burst.train.weights import weights_sha256

log = logging.getLogger(__name__)


class DDPEngine:
    name = "torch-ddp"
    tiers: tuple[str, ...] = ("full", "weights")

    def __init__(self, job: BurstJob, setup: TrainSetup, ranks: Ranks) -> None:
        if setup.batch_for_samples is None:
            raise BadInputError(
                f"training.entrypoint {job.training.entrypoint}: more than one rank needs "
                "TrainSetup.batch_for_samples (each rank reads its own slice of the global batch)"
            )
        from torch.nn.parallel import DistributedDataParallel

        self.setup = setup
        self.ranks = ranks
        self.seed = job.training.seed
        self.batch = job.training.batch_size
        self.samples = 0
        try:
            self.ddp = DistributedDataParallel(setup.model)
            self._settle_buckets()
        except RuntimeError as exc:
            raise ranks.lost("DDP start", exc) from None
        log.info(
            "DDP: rank %d of %d, %d samples per rank per step",
            ranks.rank,
            ranks.world,
            self.batch,
        )

    def _settle_buckets(self) -> None:
        """One forward and backward that change nothing (eval mode, gradients dropped), so DDP
        rebuilds its gradient buckets now. DDP lays its buckets out once in parameter order,
        then again after the first backward in the order gradients became ready: the layout
        decides which rank adds which element first in the ring all-reduce, so with more than
        two ranks (where the order of a sum matters) a resumed attempt, whose first step
        would use the first layout, would drift from the uninterrupted run by the last bit."""
        setup = self.setup
        assert setup.batch_for_samples is not None
        x, y = setup.batch_for_samples(0, 1)
        self.ddp.eval()
        setup.loss_fn(self.ddp(x), y).backward()
        setup.optimizer.zero_grad(set_to_none=True)

    def step(self, step: int) -> float:
        setup, ranks = self.setup, self.ranks
        torch.manual_seed(step_seed(self.seed, step, ranks.rank))
        assert setup.batch_for_samples is not None
        x, y = setup.batch_for_samples(self.samples + ranks.rank * self.batch, self.batch)
        self.ddp.train()
        setup.optimizer.zero_grad(set_to_none=True)
        try:
            out = setup.loss_fn(self.ddp(x), y)
            out.backward()  # the gradients' all-reduce: fails if a peer is gone
        except RuntimeError as exc:
            raise ranks.lost(f"step {step + 1}", exc) from None
        setup.optimizer.step()
        if setup.scheduler is not None:
            setup.scheduler.step()
        self.samples += ranks.world * self.batch
        return float(out.detach())

    #: every rank holds the whole state: a lost rank's part can be written by a survivor
    #: (``burst.train.survivors``)
    replicated = True

    def part_of(self, step: int, tier: str, rank: int) -> dict[str, Any]:
        """Rank ``rank``'s part of a checkpoint of ``tier`` at ``step`` (any replica's)."""
        whole = capture_setup(self.setup, step, tier, self.samples if tier == "full" else None)
        whole["world"] = self.ranks.world
        return partition(whole, rank, self.ranks.world)

    def save(self, store: RunCheckpoints, step: int, tier: str) -> float:
        return store.save(step, self.part_of(step, tier, self.ranks.rank), tier)

    def restore(self, store: RunCheckpoints) -> int | None:
        """The newest full checkpoint that restores, every rank reading only its part of it
        (burst.checkpoint.split_restore); rank 0's list decides, all ranks fall back together."""
        try:
            # into the model's and optimizer's own tensors, in place (DCP's load semantics):
            # no fresh memory to fault in, no second copy where they fit
            live = capture_setup(self.setup, 0, "full", self.samples)
            restored = store.mgr.restore_split(self.ranks.exchange(), tier="full", into=live)
        except CheckpointError as exc:
            raise CheckpointError(
                f"rank {self.ranks.rank}: {exc.message}", where=exc.where
            ) from None
        if restored is None:
            return None
        store.restored_from = restored.source
        step, state = restored.step, assemble(restored.state)
        position = apply_setup(self.setup, state)
        self.samples = restored_samples(self.setup, state, self.batch) or 0
        saved_by = state.get("world", 1)
        if saved_by != self.ranks.world:
            log.warning(
                "checkpoint of step %d was saved by %s rank(s), resumed by %d: from sample %d",
                step,
                saved_by,
                self.ranks.world,
                self.samples,
            )
        return position

    def nbytes(self, tier: str) -> int:
        """This rank's part of a checkpoint of ``tier`` (what it stages and uploads)."""
        whole = capture_setup(self.setup, 0, tier, self.samples if tier == "full" else None)
        return state_nbytes(partition(whole, self.ranks.rank, self.ranks.world))

    def weights_sha256(self) -> str:
        return weights_sha256(self.setup.model)

    def close(self) -> None:
        """Drop DDP before the loop destroys the process group (``Ranks.close``). DDP's
        reducer holds a reference to the group; were it the last one, freeing the reducer
        later (the engine going out of scope) would run the gloo group's destructor with the
        GIL held, joining gloo's worker threads while one of them waits for the GIL to free a
        finished collective's tensors: a rank hung at exit, its GPU still billed (torch 2.13;
        examples/programs/dcp_two_ranks.py hung so about once in a dozen runs under load)."""
        if getattr(self, "ddp", None) is not None:
            del self.ddp
            gc.collect()
