"""Where a regional-sync run's rounds begin and end: H inner steps a round, or adaptive rounds
(issue 31): short rounds early, longer later.

With ``first_local_steps`` unset every round is H steps (``local_steps``; the last one takes
what is left). With ``first_local_steps = f`` (``f < H``) round r takes ``min(H, f x 2^r)``
steps: f, 2f, 4f, ... up to H, then H until the end. Averaging often while the weights move
fast and rarely once they settle is post-local SGD's schedule (Lin et al., "Don't Use Large
Mini-Batches, Use Local SGD", ICLR 2020) and the quadratic synchronisation rule's direction
(Gu et al., "A Quadratic Synchronization Rule for Distributed Deep Learning", ICLR 2024);
doubling is burst's choice (stated, not from either paper). The extra rounds cost
``bytes_per_round`` each: ``ceil(log2(H / f))`` rounds more than H alone at most.

Pure arithmetic, no torch: the worker, the aggregator, the provision step, the planner and the
benchmark all take their round boundaries from here.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Rounds:
    """The rounds of ``steps`` inner steps with at most ``local_steps`` (H) a round."""

    steps: int
    local_steps: int
    first_local_steps: int | None = None
    starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.steps < 1 or self.local_steps < 1:
            raise ValueError("steps and local steps must be >= 1")
        if self.first_local_steps is not None and self.first_local_steps < 1:
            raise ValueError("the first round's local steps must be >= 1")
        starts, at, r = [], 0, 0
        while at < self.steps:
            starts.append(at)
            at += self.planned_length(r)
            r += 1
        object.__setattr__(self, "starts", tuple(starts))

    def planned_length(self, r: int) -> int:
        """Round r's H before the run's end cuts it."""
        f = self.first_local_steps
        if f is None or f >= self.local_steps:
            return self.local_steps
        return min(self.local_steps, f << min(r, 62))

    @property
    def count(self) -> int:
        return len(self.starts)

    def start(self, r: int) -> int:
        """Inner steps done before round r begins (``steps`` for r past the last round)."""
        return self.starts[r] if r < self.count else self.steps

    def end(self, r: int) -> int:
        return self.start(r + 1)

    def length(self, r: int) -> int:
        return self.end(r) - self.start(r)

    def locate(self, step: int) -> tuple[int, int]:
        """(round, inner step within it) of the step run after ``step`` steps are done;
        ``(count, 0)`` once every step is done."""
        if step >= self.steps:
            return self.count, 0
        r = bisect.bisect_right(self.starts, step) - 1
        return r, step - self.starts[r]

    def ending_at(self, done: int) -> int | None:
        """The round that ``done`` inner steps complete, or None mid-round."""
        if done <= 0 or done > self.steps:
            return None
        r, _ = self.locate(done - 1)
        return r if self.end(r) == done else None

    def lengths(self) -> list[int]:
        return [self.length(r) for r in range(self.count)]

    def describe(self) -> str:
        """The round lengths in words, runs of equal rounds counted: ``"5, 10, 20 x 4, 7"``."""
        runs: list[list[int]] = []
        for n in self.lengths():
            if runs and runs[-1][0] == n:
                runs[-1][1] += 1
            else:
                runs.append([n, 1])
        return ", ".join(f"{n} x {k}" if k > 1 else str(n) for n, k in runs)
