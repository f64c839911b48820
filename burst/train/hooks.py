"""What a training strategy adds to the one train loop (``burst.train.loop``).

The loop owns the steps, the notice watchers and the emergency save, SIGTERM and exit 75,
the budget guard, the attempt records, metrics and the ranks. A strategy that synchronises
with something outside the attempt (regional sync: a pseudo-gradient to the aggregator every
``H`` inner steps, then the next global weights; ``burst.train.regional``) is a ``LoopHook``:
it wraps the engine (its data, its own state in checkpoints, its resume), and at the end of
each of its stretches the loop commits a full checkpoint between ``boundary`` and ``advance``.
This is how torchtitan's semi-sync training wraps its one trainer rather than running a
second loop.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol

from burst.errors import EXIT_PREEMPTED, BurstError
from burst.train.engine import TrainEngine


class Interrupted(BurstError):
    """A stop notice arrived while the hook waited for something outside the attempt: the
    loop stops at the step reached (its state is saved: nothing to add)."""

    exit_code = EXIT_PREEMPTED


class LoopHook(Protocol):
    def wrap(self, engine: TrainEngine, stopping: Callable[[], bool]) -> TrainEngine:
        """The engine the loop trains with. ``stopping()`` says a stop notice is on the
        board: a wait of the hook's ends then with ``Interrupted``."""

    def boundary(self, done: int) -> bool:
        """After step ``done``: whether it ends one of the hook's stretches (a round). If so
        the hook has done its part before the checkpoint (a delta committed); the loop then
        saves a full checkpoint at ``done`` and calls ``advance``. Between boundaries the
        loop takes no scheduled checkpoints (notices and advisories still save)."""

    def advance(self, done: int) -> int:
        """After the boundary's checkpoint: the step to go on from (a round may be skipped;
        at or past the last step the run is done)."""

    def result(self) -> dict[str, Any]:
        """What the hook reports about this attempt (its own document)."""
