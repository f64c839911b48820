"""The checkpoint store the training loop talks to, and what each save cost.

``CheckpointBackend`` is the small surface the loop needs: save a state (full or weights-only)
and say how long training was blocked and how long the write took, find the latest committed
checkpoint of a tier, load one, count them, and wait for a save still under way.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from burst.errors import BadInputError
from burst.spec import BurstJob
from burst.train.localckpt import LocalCheckpoints


@dataclass(frozen=True)
class SaveResult:
    step: int
    tier: str
    bytes: int
    blocking_s: float  # training stopped this long
    upload_s: float  # the write after that (background in an asynchronous store)
    committed_at: float  # time.time() when the manifest was committed


@dataclass(frozen=True)
class CheckpointRef:
    step: int
    tier: str


class CheckpointBackend(ABC):
    location: str

    @abstractmethod
    def save(self, step: int, state: dict[str, Any], tier: str) -> SaveResult:
        """Save and commit ``state`` as checkpoint ``step`` of ``tier`` (full | weights)."""

    @abstractmethod
    def latest(self, tier: str | None = None) -> CheckpointRef | None:
        """The latest committed checkpoint (of ``tier``, if given)."""

    @abstractmethod
    def load(self, ref: CheckpointRef) -> dict[str, Any]:
        """The state saved in ``ref``; CheckpointError if it is corrupt."""

    @abstractmethod
    def refs(self) -> list[CheckpointRef]:
        """The committed checkpoints of the run, oldest first."""

    def committed(self) -> int:
        """How many committed checkpoints the run has in the store."""
        return len(self.refs())

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (background workers)."""


class LocalDirBackend(CheckpointBackend):
    """Whole-state files in a local directory (burst.train.localckpt), synchronous."""

    def __init__(self, root: Path) -> None:
        self.store = LocalCheckpoints(root)
        self.location = f"file://{self.store.root}"

    def save(self, step: int, state: dict[str, Any], tier: str) -> SaveResult:
        started = time.monotonic()
        m = self.store.save(step, state, tier)
        total = time.monotonic() - started
        blocking = float(m["blocking_s"])
        return SaveResult(
            step,
            tier,
            int(m["bytes"]),
            blocking,
            max(total - blocking, 0.0),
            float(m["committed_at"]),
        )

    def latest(self, tier: str | None = None) -> CheckpointRef | None:
        m = self.store.latest(tier)
        return None if m is None else CheckpointRef(int(m["step"]), str(m["tier"]))

    def load(self, ref: CheckpointRef) -> dict[str, Any]:
        for m in self.store.committed():
            if m["step"] == ref.step and m["tier"] == ref.tier:
                return self.store.load(m)
        from burst.errors import CheckpointError

        raise CheckpointError(
            f"no committed checkpoint {ref.tier} at step {ref.step}", where=self.location
        )

    def refs(self) -> list[CheckpointRef]:
        return [CheckpointRef(int(m["step"]), str(m["tier"])) for m in self.store.committed()]


def open_backend(job: BurstJob, run_id: str) -> CheckpointBackend:
    uri = job.storage.checkpoint_uri
    if not uri.startswith("file://"):
        raise BadInputError(f"storage.checkpoint_uri {uri!r}: the local train step needs file://")
    return LocalDirBackend(Path(uri.removeprefix("file://")).resolve() / run_id)


def state_nbytes(state: Any) -> int:
    """Bytes of the tensors (and numpy arrays) in a nested state."""
    if isinstance(state, torch.Tensor):
        return state.numel() * state.element_size()
    if isinstance(state, dict):
        return sum(state_nbytes(v) for v in state.values())
    if isinstance(state, list | tuple):
        return sum(state_nbytes(v) for v in state)
    nbytes = getattr(state, "nbytes", None)
    return int(nbytes) if isinstance(nbytes, int) else 0
