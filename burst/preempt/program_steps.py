"""The program half of ``burst run --preempt-at-step N`` (``BURST_PREEMPT_AT_STEPS``) in the
``training.command`` mode: the program's own step N, not the first checkpoint burst commits
after it.

burst does not count a program's steps; the program's optimizer does. When the demo is armed
(``burst.faults.DemoPreemptions.program_env``) this file is the program's ``sitecustomize``
(its directory first on ``PYTHONPATH``), so every Python process of the program runs it at
start, unchanged scripts included. Once ``torch.optim.optimizer`` is imported it registers
torch's global optimizer step hook, which counts the steps of the first optimizer that steps
(one per training step for a plain loop, the Hugging Face ``Trainer`` and Lightning alike;
not the step torch's state-dict helpers take to create an optimizer's state),
from the step the program resumed at. In the process of the demo's rank (``RANK``; the last
rank, or ``BURST_PREEMPT_RANK``), after step N it records N in the run's demo record (the
train loop's, so no later attempt fires N again), sends SIGTERM to the train step (a
preemption notice, as the built-in loop's demo does to itself), and waits, at most
``WAIT_S``, until burst has sent the notice signal to the program: the program then goes on
from step N with the notice delivered.

Standard library only, and it never raises: it may run in any Python the program uses. A
``sitecustomize`` it hides (one later on the path) is run after it.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from types import ModuleType
from typing import Any

#: the environment burst arms it with (``burst.faults``)
STEPS = "BURST_PREEMPT_AT_STEPS"
RANK = "BURST_PREEMPT_RANK"
RECORD = "BURST_DEMO_RECORD"
TARGET = "BURST_DEMO_TARGET_PID"
FROM_STEP = "BURST_DEMO_FROM_STEP"
ACK = "BURST_DEMO_NOTIFIED"
MODULE = "torch.optim.optimizer"
WAIT_S = 30.0
#: callers whose optimizer step is no training step: torch's state-dict helpers step once with
#: zero gradients and a zero learning rate to create the optimizer's state (DCP's
#: ``get_state_dict``, FSDP's optimizer state dicts)
NOT_TRAINING = frozenset({"_init_optim_state"})
CALLERS = 12


class StepCounter:
    """torch's global optimizer step post-hook: counts, and fires at the steps wanted."""

    def __init__(self, wanted: set[int], start: int, record: str, target: int, ack: str) -> None:
        self.wanted = wanted
        self.step = start
        self.record = record
        self.target = target
        self.ack = ack
        self.first: int | None = None

    def __call__(self, optimizer: Any, _args: Any = None, _kwargs: Any = None) -> None:
        if _called_from(NOT_TRAINING):
            return
        if self.first is None:
            self.first = id(optimizer)
        if id(optimizer) != self.first:  # a second optimizer (a GAN's): one count per step
            return
        self.step += 1
        if self.step in self.wanted:
            self.fire(self.step)

    def fire(self, step: int) -> None:
        fired = self.fired()
        if step in fired:
            return
        tmp = f"{self.record}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump({"fired": sorted(fired | {step})}, f)
        os.replace(tmp, self.record)
        sys.stderr.write(
            f"burst demo preemption: step {step} of the program (pid {os.getpid()}): "
            f"SIGTERM to the train step (pid {self.target})\n"
        )
        sys.stderr.flush()
        try:
            os.kill(self.target, signal.SIGTERM)
        except OSError:
            return
        end = time.monotonic() + WAIT_S
        while not os.path.exists(self.ack) and time.monotonic() < end:
            time.sleep(0.01)
        time.sleep(0.01)  # the notice signal, sent before the acknowledgement, is handled here

    def fired(self) -> set[int]:
        try:
            with open(self.record, encoding="utf-8") as f:
                return {int(s) for s in json.load(f)["fired"]}
        except (OSError, ValueError, KeyError, TypeError):
            return set()


def _called_from(names: frozenset[str]) -> bool:
    frame = sys._getframe(1)
    for _ in range(CALLERS):
        if frame is None:
            return False
        if frame.f_code.co_name in names:
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class _Loader(importlib.abc.Loader):
    """The loader of ``torch.optim.optimizer``, then the hook registered in it."""

    def __init__(self, inner: Any, counter: StepCounter) -> None:
        self.inner = inner
        self.counter = counter

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        register = getattr(module, "register_optimizer_step_post_hook", None)
        if callable(register):
            register(self.counter)


class _Finder(importlib.abc.MetaPathFinder):
    """Finds ``torch.optim.optimizer`` through the other finders and wraps its loader."""

    def __init__(self, counter: StepCounter) -> None:
        self.counter = counter

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != MODULE:
            return None
        with contextlib.suppress(ValueError):
            sys.meta_path.remove(self)  # once
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader, self.counter)
        return spec


def counter_from_env(environ: Mapping[str, str]) -> StepCounter | None:
    """The counter the environment arms in this process (None: not this rank, not armed)."""
    try:
        wanted = {int(s) for s in environ.get(STEPS, "").split(",") if s.strip()}
        world = int(environ.get("WORLD_SIZE", "1"))
        rank = int(environ.get("RANK", "0"))
        chosen = int(environ[RANK]) if environ.get(RANK, "").strip() else world - 1
        start = int(environ.get(FROM_STEP, "0"))
        record, target, ack = environ[RECORD], int(environ[TARGET]), environ[ACK]
    except (KeyError, ValueError):
        return None
    if rank != chosen or not {n for n in wanted if n > start}:
        return None
    return StepCounter(wanted, start, record, target, ack)


def _next_sitecustomize() -> None:
    """Run the ``sitecustomize`` this one hides (the first later on the path), if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    for entry in sys.path:
        folder = os.path.abspath(entry or ".")
        candidate = os.path.join(folder, "sitecustomize.py")
        if folder == here or not os.path.isfile(candidate):
            continue
        spec = importlib.util.spec_from_file_location("_sitecustomize_after_burst", candidate)
        if spec is not None and spec.loader is not None:
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
        return


def install() -> None:
    counter = counter_from_env(os.environ)
    if counter is not None and MODULE not in sys.modules:
        sys.meta_path.insert(0, _Finder(counter))


if __name__ == "sitecustomize":
    with contextlib.suppress(Exception):
        install()
    with contextlib.suppress(Exception):
        _next_sitecustomize()
