"""How a run ends: one vocabulary for every command (issue 46).

A run ends in exactly one of seven ways. Each has one exit code (what ``burst run`` and
``burst resume`` exit with), one wording (what ``burst run``'s summary, ``burst status``,
``burst runs`` and ``burst report`` say, text and ``--json``) and one hint (the command that
carries on). The table below is the only place they are written; docs/reference/endings.md
shows it and tests/obs/test_endings.py checks the two against each other, both ways.

Which ending a run had is decided from facts only (:func:`decide`): the workflow's message
(a stop on request), the failing step's exit code and pod message, and the train step's last
attempt record (a budget stop). A run without a report is ``running`` only while its
driver's heartbeat is renewed; once that has lapsed it is ``lost`` (or ``reaped`` after
``burst reap`` / ``burst down`` destroyed what it left).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

from burst.errors import (
    EXIT_CANCELLED,
    EXIT_FAILURE,
    EXIT_LOST,
    EXIT_MOVED,
    EXIT_OK,
    EXIT_PREEMPTED,
    EXIT_REFUSED,
)


class Ending(StrEnum):
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PREEMPTED = "preempted"
    CANCELLED = "cancelled"
    BUDGET_STOPPED = "budget-stopped"
    LOST = "lost"
    REAPED = "reaped"


#: What a run that has not ended shows instead: its driver is live (``running``), or nothing
#: can tell (``unknown``: no report, no step ran, no heartbeat).
RUNNING, UNKNOWN = "running", "unknown"


@dataclass(frozen=True)
class Meaning:
    exit_code: int
    wording: str
    hint: str | None  # ``{run}``: the run id (and ``--runs-root ROOT`` where one is needed)
    at: str  # how its failure line starts: "failed at train (exit 1): ..."

    @property
    def exit_text(self) -> str:
        """The exit code as the table shows it (a failed run exits with its step's code)."""
        if self.exit_code == EXIT_FAILURE:
            return "the failing step's code (1 when it has none): 1, 2, 3, 4, ..."
        return str(self.exit_code)


RESUME = "`burst resume {run}` carries on from the newest committed checkpoint"

ENDINGS: dict[Ending, Meaning] = {
    Ending.SUCCEEDED: Meaning(
        EXIT_OK,
        "every step succeeded and teardown left nothing",
        None,
        "ended at",
    ),
    Ending.FAILED: Meaning(
        EXIT_FAILURE,
        "a step failed (its exit code and last error line say why); teardown ran",
        "`burst logs {run}` shows why; once fixed, " + RESUME,
        "failed at",
    ),
    Ending.PREEMPTED: Meaning(
        EXIT_PREEMPTED,
        "train was preempted more often than its requeues allow; its emergency save is "
        "kept; teardown ran",
        RESUME + " (exit 75 asks a CI job to retry)",
        "preempted at",
    ),
    Ending.CANCELLED: Meaning(
        EXIT_CANCELLED,
        "stopped on request (burst cancel, Ctrl-C, a signal to the runner, argo stop); the "
        "running step saved what it could; teardown ran",
        RESUME,
        "stopped at",
    ),
    Ending.BUDGET_STOPPED: Meaning(
        EXIT_REFUSED,
        "stopped at budget.max_usd or budget.max_hours after a last save of its work (what "
        "committed is kept); teardown ran",
        "raise the budget in the run's spec.yaml, then " + RESUME,
        "stopped at",
    ),
    Ending.LOST: Meaning(
        EXIT_LOST,
        "killed or lost: the runner, a step or its node was killed (SIGKILL, the OOM "
        "killer) or lost; what was committed is kept",
        "`burst down {run}` destroys what a dead runner left; " + RESUME,
        "lost at",
    ),
    Ending.REAPED: Meaning(
        EXIT_LOST,
        "its runner was lost, and burst reap or burst down destroyed what it left",
        RESUME,
        "lost at",
    ),
}


def ending_of(status: str | None) -> Ending | None:
    """The ending a status word names; None for running, unknown or anything else."""
    try:
        return Ending(str(status))
    except ValueError:
        return None


def exit_code_of(ending: Ending, step_code: int | None = None) -> int:
    """The exit code of a run that ended so: a failed run's is its failing step's (1 when it
    has none, or one outside 1-255)."""
    if ending is Ending.FAILED and step_code is not None and 0 < step_code <= 255:
        return step_code
    return ENDINGS[ending].exit_code


def run_ref(run_id: str, runs_root: Path | None = None) -> str:
    return run_id if runs_root is None else f"{run_id} --runs-root {runs_root}"


def hint(ending: Ending, run_id: str, runs_root: Path | None = None) -> str | None:
    """The ending's next command for a local run (``burst resume RUN``, ...)."""
    text = ENDINGS[ending].hint
    return None if text is None else text.format(run=run_ref(run_id, runs_root))


def describe(ending: Ending, code: int | None = None) -> str:
    """One line: ``cancelled (exit 130): stopped on request ...``."""
    code = exit_code_of(ending) if code is None else code
    return f"{ending.value} (exit {code}): {ENDINGS[ending].wording}"


def as_json(
    ending: Ending | None,
    code: int | None,
    run_id: str,
    runs_root: Path | None = None,
    *,
    local: bool = True,
) -> dict[str, Any] | None:
    """The ending as every ``--json`` shows it; None for a run that has not ended. The hint
    names local commands: an Argo run (``local=False``) has none."""
    if ending is None:
        return None
    return {
        "name": ending.value,
        "exit_code": exit_code_of(ending) if code is None else code,
        "wording": ENDINGS[ending].wording,
        "hint": hint(ending, run_id, runs_root) if local else None,
    }


# -- deciding, from facts --------------------------------------------------------------------

#: A workflow stopped on request: the local runner's message for SIGTERM / SIGINT, Argo's for
#: `argo stop` / `argo terminate` (the message burst cancel and burst finish pass starts with
#: "cancelled").
STOP_MESSAGE = re.compile(
    r"^(stopped by signal \d+|Stopped with strategy|workflow shutdown with strategy|cancelled\b)"
)
#: Argo's message of a node that was lost with its pod (no exit code: docs/pipelines.md).
NODE_LOST = "pod deleted"
#: The local engine's message of a pod it stopped because the run was stopped.
STOPPED_POD = "stopped: the run was stopped"
BUDGET_OUTCOME = "budget-exceeded"  # a train attempt's outcome (burst.documents.train)


def stopped(message: str | None) -> bool:
    """The workflow was stopped on request (its message says so)."""
    return bool(message) and STOP_MESSAGE.match(str(message).strip()) is not None


def cancel_message(who: str) -> str:
    """The message burst passes to Argo's stop: it names the ending and who asked."""
    return f"cancelled with {who}: {ENDINGS[Ending.CANCELLED].wording}"


def decide(
    *,
    failed: bool,
    stop: bool = False,
    step_code: int | None = None,
    step_message: str | None = None,
    budget: bool = False,
) -> Ending:
    """The ending of a run whose driver ended it. ``failed``: it did not succeed (a step
    failed, something was left, or the workflow failed); ``stop``: it was stopped on
    request; ``step_code`` / ``step_message``: the failing step's exit code and pod message;
    ``budget``: train's last attempt stopped at the budget."""
    if not failed:
        return Ending.SUCCEEDED
    if stop:
        return Ending.CANCELLED
    if budget:
        return Ending.BUDGET_STOPPED
    if step_code in (EXIT_PREEMPTED, EXIT_MOVED):  # (a move with no requeue left)
        return Ending.PREEMPTED
    if step_code == EXIT_LOST or (step_code is None and step_message == NODE_LOST):
        return Ending.LOST
    return Ending.FAILED


def undriven(*, reaped: bool) -> Ending:
    """A run with no report whose driver's heartbeat has lapsed."""
    return Ending.REAPED if reaped else Ending.LOST


#: Argo's workflow phases that have not ended.
ARGO_LIVE = ("Pending", "Running", "")


def argo_ending(
    phase: str | None, message: str | None, nodes: Iterable[Mapping[str, Any]]
) -> Ending | None:
    """An Argo workflow's ending from its phase, message and pod nodes (name, phase,
    exit_code, message, in the order they started); None while it runs. The step that decides
    is the last one that failed, other than the give-up helper (which only passes train's
    code on). Train's exit 3 is a budget stop (train refuses with 3 for nothing else once it
    has started)."""
    if phase is None or phase in ARGO_LIVE:
        return None
    if phase == "Succeeded":
        return Ending.SUCCEEDED
    pods = [
        n
        for n in nodes
        if n.get("phase") in ("Failed", "Error") and str(n.get("name") or "") != GIVE_UP
    ]
    last = pods[-1] if pods else {}
    code = _int(last.get("exit_code"))
    return decide(
        failed=True,
        stop=stopped(message),
        step_code=code,
        step_message=str(last.get("message") or ""),
        budget=code == EXIT_REFUSED and _is_train(str(last.get("name") or "")),
    )


#: The pipeline's helper that fails the run with train's code (burst/pipelines/burst_train.py).
GIVE_UP = "give-up"


def _is_train(name: str) -> bool:
    return name == "train" or name.endswith(".train") or name.startswith("train(")


def _int(v: Any) -> int | None:
    try:
        return None if v is None or v == "" else int(v)
    except (TypeError, ValueError):
        return None
