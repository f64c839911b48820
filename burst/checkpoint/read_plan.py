"""The one restore loop: candidate checkpoints newest first, each read as a read plan says.

Every restore in burst (one rank reading a whole checkpoint; W data-parallel ranks splitting
the verification or the reads; FSDP2 ranks reading only their own shard; DeepSpeed ranks
fetching their own files) is the same loop, ``restore_newest``: it walks the candidates
newest first and, per candidate, asks a ``ReadPlan`` what this rank reads and verifies
(``ReadPlan.read``). A candidate that does not read (a missing or corrupt chunk, no manifest)
is skipped for the previous one; the ranks of a collective restore agree on every candidate
(``Exchange.all_ok``) and fall back together, in the order rank 0 listed them. The first
candidate every rank read becomes the result (``ReadPlan.finish``: broadcast the parts,
build the arrays, hand files to DeepSpeed). The plans are in the modules named for them:
``burst.checkpoint.restore`` (whole), ``burst.checkpoint.split_restore`` (split-verify,
split-share), ``burst.checkpoint.own_restore`` (own shard), ``burst.checkpoint.deepspeed``
(DeepSpeed files). The idea is the one of torch DCP's ``LoadPlanner``, which tells its one
load loop what to read.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from burst.checkpoint.manifest import CheckpointRef
from burst.errors import CheckpointError
from burst.storage.base import StoreError

log = logging.getLogger(__name__)

R = TypeVar("R")
T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)


@dataclass(frozen=True)
class Exchange:
    """The collectives a restore of several ranks needs (``burst.train.ranks.Ranks``
    provides them)."""

    rank: int
    world: int
    #: send ``tensor`` from rank ``src`` to every rank, in place
    broadcast: Callable[[Any, int], None]
    #: True on every rank iff ``flag`` is True on every rank
    all_ok: Callable[[bool], bool]
    #: rank 0's value, the same on every rank
    decide: Callable[[Callable[[], Any]], Any]


class ReadPlan(Protocol[R, T_co]):
    """What this rank reads and verifies of one candidate checkpoint, and what it makes of
    it once every rank read its part."""

    def read(self, ref: CheckpointRef) -> R:
        """This rank's reads of ``ref``, verified. CheckpointError (or, in a restore of
        several ranks, StoreError) if ``ref`` does not restore."""

    def finish(self, ref: CheckpointRef, got: R) -> T_co:
        """The restore's result from what ``read`` returned, once every rank's read
        succeeded (collectives allowed: every rank calls it for the same ``ref``)."""


def restore_newest(
    refs: Sequence[CheckpointRef],
    plan: ReadPlan[Any, T],
    *,
    where: str,
    ex: Exchange | None = None,
    fallback: bool = True,
) -> T | None:
    """The result of the newest of ``refs`` (oldest first) that ``plan`` reads; None if
    ``refs`` is empty.

    ``ex``: the ranks of a collective restore; rank 0's ``refs`` are the candidates of every
    rank, and every rank reaches the agreement on each candidate whatever its own read found
    (a StoreError too, so no rank waits for one that gave up). Without ``ex`` (one rank), a
    StoreError is the store's fault, not the checkpoint's, and is raised as it is.

    ``fallback=False``: the newest candidate only; if it does not read, its error (another
    rank's part, for the ranks whose own part read) is raised. Otherwise, CheckpointError
    naming each candidate's failure once every candidate failed; ``where``: the store."""
    keys: list[tuple[int, str, str]] = [(r.step, r.tier, r.key) for r in refs]
    if ex is not None:
        keys = ex.decide(lambda: keys)
    unusable: tuple[type[Exception], ...] = (
        (CheckpointError,) if ex is None else (CheckpointError, StoreError)
    )
    failures: list[str] = []
    for step, tier, key in reversed(keys):
        ref = CheckpointRef(step=step, tier=tier, key=key)
        error: CheckpointError | StoreError | None = None
        got: Any = None
        try:
            got = plan.read(ref)
        except unusable as exc:
            assert isinstance(exc, CheckpointError | StoreError)
            if ex is None and not fallback:
                raise
            error = exc
        everyone = ex.all_ok(error is None) if ex is not None else error is None
        if not everyone:
            problem = (
                error.one_line()
                if error is not None
                else f"checkpoint step {step} ({tier}): another rank's part"
            )
            if not fallback:
                if error is not None:
                    raise error
                raise CheckpointError(problem, where=where)
            failures.append(problem)
            log.warning("%s; falling back to the previous checkpoint", problem)
            continue
        result = plan.finish(ref, got)
        if failures:
            log.warning(
                "restored step %d (%s) after %d unusable checkpoint(s)", step, tier, len(failures)
            )
        return result
    if not keys:
        return None
    raise CheckpointError(
        f"no usable checkpoint among {len(failures)}: " + " | ".join(failures), where=where
    )


def process_group() -> Exchange:
    """The collectives of the default ``torch.distributed`` process group, when one is
    initialised (an adapter inside the user's own program: DCP's reader), else one rank's:
    every restore of several ranks agrees through them on each candidate."""
    try:
        import torch
        import torch.distributed as dist
    except ImportError:  # pragma: no cover - torch is there wherever several ranks restore
        dist = None  # type: ignore[assignment]
    if dist is None or not dist.is_available() or not dist.is_initialized():
        return Exchange(0, 1, lambda tensor, src: None, lambda flag: flag, lambda choose: choose())

    def all_ok(flag: bool) -> bool:
        t = torch.tensor([1 if flag else 0], dtype=torch.int64)
        dist.all_reduce(t, op=dist.ReduceOp.MIN)
        return bool(t.item())

    def decide(choose: Callable[[], Any]) -> Any:
        box = [choose() if dist.get_rank() == 0 else None]
        dist.broadcast_object_list(box, src=0)
        return box[0]

    return Exchange(
        int(dist.get_rank()),
        int(dist.get_world_size()),
        lambda tensor, src: dist.broadcast(tensor, src=src),
        all_ok,
        decide,
    )
