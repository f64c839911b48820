"""The one restore loop (``burst.checkpoint.read_plan.restore_newest``): written once in the
package, and how it walks the candidates for one rank and for several (the plans here are
tiny read plans over a list of outcomes; the real plans are exercised by the restore tests
of tests/checkpoint and tests/train)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest

import burst
from burst.checkpoint.manifest import CheckpointRef
from burst.checkpoint.read_plan import Exchange, restore_newest
from burst.errors import CheckpointError
from burst.storage.base import StoreError

FALLBACK = "no usable checkpoint among"
PACKAGES = ("burst", "steps", "pipelines")


def test_the_fallback_message_is_written_once() -> None:
    root = Path(burst.__file__).resolve().parent.parent
    hits = [
        f"{path.relative_to(root)}:{n}"
        for pkg in PACKAGES
        if (root / pkg).is_dir()
        for path in sorted((root / pkg).rglob("*.py"))
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if FALLBACK in line
    ]
    assert len(hits) == 1, hits
    assert hits[0].startswith("burst/checkpoint/read_plan.py:"), hits


def _refs(n: int) -> list[CheckpointRef]:
    return [CheckpointRef(step=s, tier="full", key=f"k{s}") for s in range(1, n + 1)]


class Plan:
    """Reads fail for the steps in ``bad`` (a CheckpointError, or the given exception)."""

    def __init__(self, bad: dict[int, Exception] | None = None) -> None:
        self.bad = bad or {}
        self.read_steps: list[int] = []

    def read(self, ref: CheckpointRef) -> int:
        self.read_steps.append(ref.step)
        if ref.step in self.bad:
            raise self.bad[ref.step]
        return ref.step * 10

    def finish(self, ref: CheckpointRef, got: int) -> tuple[int, int]:
        return ref.step, got


def test_one_rank_newest_first_then_falls_back() -> None:
    plan = Plan({3: CheckpointError("checkpoint step 3 (full): chunk ab is corrupt")})
    assert restore_newest(_refs(3), plan, where="s") == (2, 20)
    assert plan.read_steps == [3, 2]


def test_one_rank_none_usable_names_each() -> None:
    plan = Plan({s: CheckpointError(f"bad {s}") for s in (1, 2)})
    with pytest.raises(CheckpointError) as err:
        restore_newest(_refs(2), plan, where="s")
    assert f"{FALLBACK} 2: bad 2 | bad 1" in err.value.one_line()


def test_one_rank_without_fallback_raises_the_newest_error() -> None:
    plan = Plan({2: CheckpointError("bad 2")})
    with pytest.raises(CheckpointError, match=r"^bad 2$"):
        restore_newest(_refs(2), plan, where="s", fallback=False)
    assert plan.read_steps == [2]


def test_one_rank_store_fault_is_not_an_unusable_checkpoint() -> None:
    plan = Plan({2: StoreError("store down")})
    with pytest.raises(StoreError):
        restore_newest(_refs(2), plan, where="s")
    assert restore_newest([], plan, where="s") is None


def _ranks(world: int, bad: dict[int, dict[int, Exception]], refs: list[CheckpointRef]) -> Any:
    """Run the loop on ``world`` threads with collectives over a barrier; rank r's reads
    fail as ``bad[r]`` says. Returns each rank's result or exception."""
    barrier = threading.Barrier(world, timeout=30)
    slot: list[Any] = [None] * world

    def meet(rank: int, value: Any) -> list[Any]:
        slot[rank] = value
        barrier.wait()
        seen = list(slot)
        barrier.wait()
        return seen

    out: list[Any] = [None] * world

    def run(rank: int) -> None:
        ex = Exchange(
            rank,
            world,
            broadcast=lambda t, src: None,
            all_ok=lambda flag: all(meet(rank, flag)),
            decide=lambda choose: meet(rank, choose() if rank == 0 else None)[0],
        )
        try:
            out[rank] = restore_newest(
                refs if rank == 0 else [], Plan(bad.get(rank)), where="s", ex=ex
            )
        except Exception as exc:
            out[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(world)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return out


def test_ranks_fall_back_together_on_one_ranks_failure() -> None:
    # rank 1's part of step 3 is corrupt, its store answers nothing for step 2: every rank
    # restores step 1, rank 0's candidates deciding
    out = _ranks(2, {1: {3: CheckpointError("corrupt"), 2: StoreError("down")}}, _refs(3))
    assert out == [(1, 10), (1, 10)]


def test_ranks_none_usable_every_rank_raises() -> None:
    out = _ranks(2, {0: {1: CheckpointError("corrupt")}}, _refs(1))
    assert all(isinstance(o, CheckpointError) for o in out), out
    assert f"{FALLBACK} 1: corrupt" in out[0].one_line()
    assert f"{FALLBACK} 1: checkpoint step 1 (full): another rank's part" in out[1].one_line()
    assert _ranks(2, {}, []) == [None, None]
