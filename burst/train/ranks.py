"""The ranks of a train step started by torchrun, and what they agree on.

Under torchrun (``LOCAL_RANK`` set) with more than one rank, ``Ranks.from_env`` joins the
process group (gloo on CPU, NCCL on GPUs; every collective bounded by
``BURST_DIST_TIMEOUT_S``, default 120 s) and agrees on a session token (rank 0's, for the
sharded checkpoints of this attempt). Alone it is a world of one and every method is free.

At each step boundary the ranks agree, in one all-reduce, on what any of them has seen: a
stop notice (the earliest deadline wins), an advisory, an exceeded budget. Rank 0 decides
what depends on measurements that differ between ranks (the emergency save's tier) and
tells the others. A collective that fails because a peer is gone (killed, node lost) raises
``RankLost``: the rank stops at once, without saving, exit 75 to be requeued from the last
committed checkpoint; it never waits longer than the timeout.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import math
import os
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

from burst.checkpoint.split_restore import Exchange
from burst.errors import Preempted
from burst.preempt.notice import Notice
from burst.settings import current

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


T = TypeVar("T")

#: the longest a claim (``Ranks.claim``) waits for the rendezvous store
CLAIM_TIMEOUT_S = 10.0


class RankLost(Preempted):
    """A peer rank is gone: this rank stopped without saving (exit 75, requeue)."""


def under_torchrun() -> bool:
    return "LOCAL_RANK" in os.environ and "WORLD_SIZE" in os.environ


def timeout_s() -> float:
    return float(current().dist_timeout_s)


def step_seed(seed: int, step: int, rank: int) -> int:
    """The RNG seed of one rank at one step (dropout masks): a pure function, so a resumed
    rank draws exactly what the uninterrupted one drew, with no RNG state to restore."""
    digest = hashlib.blake2b(f"{seed}:{step}:{rank}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & (2**63 - 1)


@dataclass(frozen=True)
class Agreement:
    stop: Notice | None
    advisory: bool
    over_budget: bool


@dataclass
class Ranks:
    rank: int = 0
    world: int = 1
    local_rank: int = 0
    session: str = ""
    own_group: bool = False

    @property
    def many(self) -> bool:
        return self.world > 1

    @property
    def leader(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls) -> Ranks:
        if not under_torchrun() or int(os.environ["WORLD_SIZE"]) <= 1:
            return cls(session=secrets.token_hex(4))
        import torch
        import torch.distributed as dist

        own = not dist.is_initialized()
        if own:
            backend = "nccl" if torch.cuda.is_available() else "gloo"
            dist.init_process_group(backend, timeout=dt.timedelta(seconds=timeout_s()))
        ranks = cls(
            rank=int(dist.get_rank()),
            world=int(dist.get_world_size()),
            local_rank=int(os.environ.get("LOCAL_RANK", "0")),
            own_group=own,
        )
        ranks.session = ranks.decide(lambda: secrets.token_hex(4))
        log.info("rank %d of %d (session %s)", ranks.rank, ranks.world, ranks.session)
        return ranks

    # -- collectives, each turning a lost peer into RankLost ----------------------------------

    def _collective(self, what: str, fn: Callable[[], T]) -> T:
        try:
            return fn()
        except RankLost:
            raise
        except (RuntimeError, ValueError) as exc:
            raise self.lost(what, exc) from None

    def lost(self, what: str, exc: BaseException) -> RankLost:
        text = " ".join(str(exc).split())[:300]
        return RankLost(
            f"rank {self.rank} of {self.world}: a peer rank is gone ({what} failed: {text}); "
            "stopped without saving, the last committed checkpoint stands; exit 75 to requeue"
        )

    def decide(self, choose: Callable[[], T]) -> T:
        """Rank 0's ``choose()``, the same on every rank."""
        if not self.many:
            return choose()
        import torch.distributed as dist

        box = [choose() if self.leader else None]
        self._collective("broadcast", lambda: dist.broadcast_object_list(box, src=0))
        return box[0]  # type: ignore[return-value]

    def gather(self, obj: Any) -> list[Any]:
        if not self.many:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        self._collective("all_gather", lambda: dist.all_gather_object(out, obj))
        return out

    def all_of(self, flag: bool) -> bool:
        if not self.many:
            return flag
        import torch
        import torch.distributed as dist

        t = torch.tensor([1.0 if flag else 0.0], dtype=torch.float64)
        self._collective("all_reduce", lambda: dist.all_reduce(t, op=dist.ReduceOp.MIN))
        return bool(t.item() > 0.5)

    def agree(self, stop: Notice | None, advisory: bool, over_budget: bool) -> Agreement:
        """What any rank saw at this step boundary, the same on every rank."""
        if not self.many:
            return Agreement(stop, advisory, over_budget)
        import torch
        import torch.distributed as dist

        # MAX of: stop, the notice's -deadline (the earliest wins; none: -inf), the highest
        # rank that has one, advisory, over budget
        deadline = None if stop is None else stop.deadline
        t = torch.tensor(
            [
                1.0 if stop else 0.0,
                -deadline if deadline is not None else -math.inf,
                float(self.rank) if stop else -1.0,
                1.0 if advisory else 0.0,
                1.0 if over_budget else 0.0,
            ],
            dtype=torch.float64,
        )
        self._collective("all_reduce", lambda: dist.all_reduce(t, op=dist.ReduceOp.MAX))
        agreed: Notice | None = None
        if t[0] > 0.5:
            src = int(t[2].item())
            box: list[Any] = [stop if self.rank == src else None]
            self._collective("broadcast", lambda: dist.broadcast_object_list(box, src=src))
            theirs: Notice = box[0]
            earliest = None if math.isinf(t[1].item()) else -float(t[1].item())
            agreed = Notice(
                source=f"{theirs.source} (rank {src})",
                received_at=theirs.received_at,
                deadline=earliest,
                advisory=False,
                detail=theirs.detail,
            )
        return Agreement(agreed, bool(t[3] > 0.5), bool(t[4] > 0.5))

    def broadcast(self, tensor: torch.Tensor, src: int) -> None:
        """``tensor`` of rank ``src`` into ``tensor`` on every rank, in place."""
        if self.many:
            import torch.distributed as dist

            self._collective("broadcast", lambda: dist.broadcast(tensor, src=src))

    def exchange(self) -> Exchange:
        """These ranks' collectives for a checkpoint restore split across them."""
        return Exchange(self.rank, self.world, self.broadcast, self.all_of, self.decide)

    def claim(self, key: str, timeout: float = CLAIM_TIMEOUT_S) -> bool:
        """True for the first rank of this session to claim ``key``; False when another did,
        or the rendezvous store cannot be reached within ``timeout``. Usable after a peer is
        lost: it is the rendezvous store's atomic counter (torchrun's agent holds the store,
        so it outlives any rank), not a collective of the broken process group."""
        if not self.many:
            return True
        try:
            from torch.distributed import distributed_c10d

            kv = distributed_c10d._get_default_store()
            kv.set_timeout(dt.timedelta(seconds=timeout))
            return int(kv.add(f"burst/{self.session}/{key}", 1)) == 1
        except (RuntimeError, ValueError, AttributeError) as exc:
            log.warning("rank %d: cannot claim %s (%s)", self.rank, key, exc)
            return False

    def barrier(self) -> None:
        if self.many:
            import torch.distributed as dist

            self._collective("barrier", dist.barrier)

    def close(self) -> None:
        if self.own_group:
            import torch.distributed as dist

            if dist.is_initialized():
                dist.destroy_process_group()


def preempt_rank(world: int) -> int:
    """The rank the local preemption demo signals (``BURST_PREEMPT_RANK``; default the last:
    a notice to a rank other than the one that commits checkpoints)."""
    wanted = current().preempt_rank
    if wanted is not None and int(wanted) < world:
        return int(wanted)
    return world - 1
