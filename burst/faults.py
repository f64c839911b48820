"""Named fault points: every test and demo hook of burst, in one place.

Production code calls a named point (a function of this module listed in ``POINTS``) and
contains no fault or demo logic of its own; each point is inert unless its setting (declared
in ``burst.settings``) asks for it. A test greps that production modules use this module only
through these names.

Points and what arms them:

* ``fail_at(step, point)``: ``BURST_FAIL_AT`` (``burst run --fail-at``) names a step
  (``provision``) or a finer point of one (``provision:before``, ``provision:midway``,
  ``train:before``); the step fails on purpose with ``InjectedFailure`` (exit 1).
* ``provision_faults()``: what the local Terraform module emulates for the provisioner:
  ``BURST_SIMULATE_NO_CAPACITY`` regions report no capacity, and ``provision:midway`` fails
  an apply after the VPN and node group exist (its partial state is left for teardown).
* ``checkpoint(name)``: ``BURST_CHECKPOINT_FAULT=<point>[:<n>]`` SIGKILLs this process at the
  n-th call whose name starts with ``<point>``, as a preemption or an OOM kill would;
  ``BURST_CHECKPOINT_FAULT_RANK=<r>`` limits it to rank r (its checkpoint worker, and the
  ``emergency-*`` points of the rank's own process: burst.train.survivors).
* ``demo_preemptions(record)``: ``BURST_PREEMPT_AT_STEPS`` (``burst run --preempt-at-step``)
  makes the train process SIGTERM itself after those steps, once per step and run. A
  ``training.command`` program's steps are its optimizer's: the program half
  (``burst.preempt.program_steps``, the program's ``sitecustomize``) counts them and sends the
  SIGTERM at step N; a program without a torch optimizer is preempted once a checkpoint of
  step N or later has committed.
* ``budget_time_scale()``: ``BURST_BUDGET_TIME_SCALE`` counts one real second as N budget
  seconds, so a demo can exhaust a budget in seconds.
* ``regional(armed, point)``: a regional run's process (``burst.regional``) at a named point
  (``worker-mid-round@<region>@<round>``, ``aggregator-after-commit@<round>``, ...) does what
  its role config's ``faults`` says: ``kill`` (its node is lost there, once: a marker file
  in the config's state directory; ``lose_node`` marks the pod so that the local runner
  reports Argo's "pod deleted"), ``preempt`` (a preemption notice there, once: SIGTERM to
  itself, the one train loop saves and exits 75) or ``sleep:<s>`` (a late worker). Armed only
  by the site the local runner gives a region's pods for a test (``burst.runner.regions``).
* ``kill_runner(step, wanted)``: ``burst run --kill-runner-at STEP`` SIGKILLs the runner.
* ``node_loss()``: ``BURST_NODE_LOSS=STEP[@N][+SECONDS],...`` makes the local runner lose
  the node under STEP's N-th pod SECONDS (virtual) in (``NodeLoss``): Argo's "pod deleted".
  Tests may also pass ``NodeLoss`` values as an engine option; both are honoured.
* ``spot_capacity(run_dir)``: what the local spot probe sees (a run directory's
  ``spot-capacity.json``, else the regions ``BURST_SIMULATE_NO_CAPACITY`` names have none).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import re
import shutil
import signal
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from burst.errors import BadInputError, InfraError, InjectedFailure
from burst.settings import Settings, current, resolve

log = logging.getLogger(__name__)

#: The names production code may use (the test greps for anything else).
POINTS = (
    "arm",
    "fail_at",
    "wanted",
    "provision_faults",
    "ProvisionFaults",
    "checkpoint",
    "demo_preemptions",
    "DemoPreemptions",
    "budget_time_scale",
    "pace_step",
    "kill_runner",
    "node_loss",
    "lose_node",
    "NODE_LOST_MARK",
    "NodeLoss",
    "regional",
    "spot_capacity",
    "SPOT_CAPACITY_FILE",
)


def arm(*, fail_at: Iterable[str] = (), preempt_at_steps: Iterable[int] = ()) -> dict[str, str]:
    """The environment that arms these points in a run's steps (``burst run`` options)."""
    env: dict[str, str] = {}
    if fail_at:
        env["BURST_FAIL_AT"] = ",".join(fail_at)
    steps = sorted(set(preempt_at_steps))
    if steps:
        env[PREEMPT_ENV] = ",".join(str(n) for n in steps)
    return env


# -- BURST_FAIL_AT ------------------------------------------------------------------------------


def wanted(point: str, settings: Settings | None = None) -> bool:
    """Whether ``BURST_FAIL_AT`` names ``point`` (``step`` or ``step:point``)."""
    return point in resolve(settings).fail_at


def fail_at(step: str, point: str | None = None, settings: Settings | None = None) -> None:
    """Raise ``InjectedFailure`` when ``BURST_FAIL_AT`` names this step (or ``step:point``)."""
    key = step if point is None else f"{step}:{point}"
    if wanted(key, settings):
        raise InjectedFailure(f"failure injected at {key} (BURST_FAIL_AT)")


# -- the provisioner's emulated failures --------------------------------------------------------

#: The local module's injected failure (terraform/modules/local-nodegroup, fail_midway).
MIDWAY_MARKER = "Injected failure midway"


@dataclass(frozen=True)
class ProvisionFaults:
    """What the local node group emulates: regions without capacity, a failure midway."""

    no_capacity: tuple[str, ...] = ()
    fail_midway: bool = False

    def terraform_variables(self) -> dict[str, Any]:
        """The local module's fault variables for one attempt."""
        return {"simulate_no_capacity": list(self.no_capacity), "fail_midway": self.fail_midway}

    def before_apply(self, stack_kind: str) -> None:
        """On a real stack nothing emulates the midway failure: fail before applying."""
        if self.fail_midway and stack_kind != "local":
            raise InjectedFailure("failure injected at provision:midway (BURST_FAIL_AT)")

    def injected(self, region: str, exc: InfraError) -> InjectedFailure | None:
        """The failure an apply raised, when it is the injected one (else None)."""
        if self.fail_midway and MIDWAY_MARKER in exc.message:
            return InjectedFailure(
                f"failure injected at provision:midway in {region}; the partial "
                "state is left for teardown"
            )
        return None


def provision_faults(
    settings: Settings | None = None, *, fail_midway: bool | None = None
) -> ProvisionFaults:
    """The provisioner's faults (``fail_midway``, when given, overrides ``provision:midway``)."""
    s = resolve(settings)
    midway = wanted("provision:midway", s) if fail_midway is None else fail_midway
    return ProvisionFaults(tuple(s.simulate_no_capacity), midway)


#: The local spot probe's file in the run directory: {"<region>": score 0..10, ...}.
SPOT_CAPACITY_FILE = "spot-capacity.json"


def spot_capacity(run_dir: Path, settings: Settings | None = None) -> dict[str, float]:
    """Fault point ``spot-capacity``: the spot placement score (0..10) of each region, as the
    local spot probe (``burst.train.spot_probe.LocalProbe``) reads it: the run directory's
    ``spot-capacity.json`` when there is one (a test or a demo says when spot comes back),
    else 10 in every region but the ones ``BURST_SIMULATE_NO_CAPACITY`` names (what the
    local node group emulates); a region not named has score 10 either way."""
    path = run_dir / SPOT_CAPACITY_FILE
    if not path.is_file():
        return {r: 0.0 for r in resolve(settings).simulate_no_capacity}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        why = f"not a JSON object of region: score ({exc})"
        raise BadInputError(why, where=str(path)) from None
    if not isinstance(raw, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) for v in raw.values()
    ):
        raise BadInputError("must be a JSON object of region: score (0..10)", where=str(path))
    return {str(k): float(v) for k, v in raw.items()}


# -- BURST_CHECKPOINT_FAULT ---------------------------------------------------------------------

_lock = threading.Lock()
_hits = 0
ONCE_ENV = "BURST_CHECKPOINT_FAULT_ONCE"
ACTION_ENV = "BURST_CHECKPOINT_FAULT_ACTION"
PAUSE_LIMIT_S = 600.0


def checkpoint(name: str) -> None:
    """Checkpoint crash point ``name``: SIGKILL here at the armed hit. Unset: one lookup."""
    settings = current()
    spec = settings.checkpoint_fault
    if not spec:
        return
    only = settings.checkpoint_fault_rank  # several ranks: only this rank's worker
    if only and os.environ.get("RANK", "0") != only:
        return
    target, _, nth = spec.partition(":")
    if not name.startswith(target):
        return
    global _hits
    with _lock:
        _hits += 1
        if _hits < int(nth or "1"):
            return
        # BURST_CHECKPOINT_FAULT_ONCE=<file>: fire once across processes (a restarted
        # worker counts its hits afresh), creating the file when it fires
        once = settings.checkpoint_fault_once
        if once:
            try:
                fd = os.open(once, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
            except FileExistsError:
                return
            os.close(fd)
        # BURST_CHECKPOINT_FAULT_ACTION=pause:<dir>: hold here (``<dir>/paused``) until
        # ``<dir>/resume`` exists, at most 10 minutes, instead of dying
        action = settings.checkpoint_fault_action
        if action.startswith("pause:"):
            where = Path(action.removeprefix("pause:"))
            (where / "paused").write_text(str(os.getpid()))
            end = time.monotonic() + PAUSE_LIMIT_S
            while not (where / "resume").exists() and time.monotonic() < end:
                time.sleep(0.05)
            return
        os.kill(os.getpid(), signal.SIGKILL)


# -- BURST_PREEMPT_AT_STEPS ---------------------------------------------------------------------

PREEMPT_ENV = "BURST_PREEMPT_AT_STEPS"


@dataclass(frozen=True)
class DemoEvent:
    """One demo fault of ``BURST_PREEMPT_AT_STEPS``, after training step ``step``: ``notice``
    (the process SIGTERMs itself: a preemption notice whose window is ``window_s``, else
    BURST_SIGTERM_GRACE_S), ``node`` (the node is lost without a notice: ``lose_node``) or
    ``rank`` (the rank dies, SIGKILL, its node stays: the pod fails with 137)."""

    step: int
    kind: str = "notice"
    window_s: float | None = None


def parse_steps(raw: str) -> dict[int, DemoEvent]:
    """The demo events ``raw`` names (``burst.settings.DEMO_EVENT_RE``), by step."""
    from burst.settings import DEMO_EVENT_RE

    events: dict[int, DemoEvent] = {}
    for item in raw.split(","):
        item = item.strip()
        if not item:
            continue
        m = DEMO_EVENT_RE.match(item)
        if m is None or int(m.group(1)) < 1:
            raise BadInputError(
                f"{PREEMPT_ENV}={raw!r}: {item!r} is not STEP[:notice[=SECONDS]|:node|:rank]"
            )
        step, kind, window = int(m.group(1)), (m.group(2) or "notice"), m.group(3)
        events[step] = DemoEvent(step, kind.split("=")[0], float(window) if window else None)
    return events


@dataclass
class DemoPreemptions:
    """The local demonstration of preemption: the train process SIGTERMs itself after the
    steps asked for. The steps already preempted are recorded in ``record`` before the signal
    is sent, so the resumed attempt passes step N again without being preempted twice."""

    record: Path
    events: dict[int, DemoEvent] = field(default_factory=dict)
    fired: set[int] = field(default_factory=set)
    #: the program half's acknowledgement file (``program_env``), None when not armed
    ack: Path | None = None

    @property
    def wanted(self) -> set[int]:
        """The steps with a demo event."""
        return set(self.events)

    def load(self) -> DemoPreemptions:
        if self.events and self.record.exists():
            try:
                self.fired = {int(s) for s in json.loads(self.record.read_text())["fired"]}
            except (ValueError, KeyError, TypeError):
                raise BadInputError(
                    f"{self.record}: not a preemption record "
                    '({"fired": [steps]}); delete it to start over'
                ) from None
        return self

    def maybe_fire(self, step: int) -> bool:
        """After step ``step``: the demo event asked for there (a notice: SIGTERM to this
        process; a node loss; a rank death), if not done before."""
        event = self.events.get(step)
        if event is None or step in self.load().fired:
            return False
        from burst.runs import write_json_atomic

        self.fired.add(step)
        write_json_atomic(self.record, {"fired": sorted(self.fired)})
        if event.kind == "node":
            log.warning("demo fault: the node is lost after step %d (%s)", step, PREEMPT_ENV)
            lose_node()
        if event.kind == "rank":
            log.warning("demo fault: this rank dies after step %d (%s)", step, PREEMPT_ENV)
            os.kill(os.getpid(), signal.SIGKILL)
        if event.window_s is not None:
            from burst.preempt.signals import expect_own_notice

            expect_own_notice(event.window_s)
        log.info("demo preemption: sending SIGTERM to myself after step %d (%s)", step, PREEMPT_ENV)
        os.kill(os.getpid(), signal.SIGTERM)
        return True

    def program_env(
        self, env: dict[str, str], workdir: Path, target: int, start: int
    ) -> dict[str, str]:
        """The environment that arms the program half (``burst.preempt.program_steps``) in a
        ``training.command`` program that starts at step ``start``: at step N it sends
        SIGTERM to ``target`` (the train step) and waits for ``notified``. Nothing when no
        step after ``start`` is wanted."""
        from burst.preempt import program_steps

        other = [e for e in self.events.values() if e.kind != "notice" or e.window_s is not None]
        if other:
            raise BadInputError(
                f"{PREEMPT_ENV}: step {other[0].step} asks for a {other[0].kind} event with "
                "its own kind or window; a training.command program takes plain notices only"
            )
        if not {n for n in self.wanted - self.load().fired if n > start}:
            return {}
        hook = workdir / "demo-hook"
        hook.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(program_steps.__file__, hook / "sitecustomize.py")
        self.ack = workdir / "demo-notified"
        self.ack.unlink(missing_ok=True)
        self.record.parent.mkdir(parents=True, exist_ok=True)
        path = [str(hook), *filter(None, [env.get("PYTHONPATH")])]
        return {
            "PYTHONPATH": os.pathsep.join(path),
            program_steps.STEPS: ",".join(str(n) for n in sorted(self.wanted)),
            program_steps.RECORD: str(self.record),
            program_steps.TARGET: str(target),
            program_steps.FROM_STEP: str(start),
            program_steps.ACK: str(self.ack),
        }

    def notified(self) -> None:
        """The program has been sent the notice: its half, waiting at step N, goes on."""
        if self.ack is not None:
            self.ack.touch()


def demo_preemptions(record: Path, raw: str | None = None) -> DemoPreemptions:
    """The demo preemptions ``BURST_PREEMPT_AT_STEPS`` (or ``raw``) asks for."""
    text = current().preempt_at_steps if raw is None else raw
    return DemoPreemptions(record, parse_steps(text)).load()


# -- BURST_BUDGET_TIME_SCALE --------------------------------------------------------------------


def budget_time_scale() -> float:
    """How many budget seconds one real second counts for (1 outside demos)."""
    return current().budget_time_scale


# -- BURST_STEP_PACE_S -------------------------------------------------------------------------


def pace_step(started: float) -> None:
    """Hold a training step that began at ``started`` (monotonic) for BURST_STEP_PACE_S."""
    pace = current().step_pace_s
    if pace > 0:
        left = started + pace - time.monotonic()
        if left > 0:
            time.sleep(left)


# -- BURST_NODE_LOSS: the local runner's emulated cluster loses a node --------------------------


@dataclass(frozen=True)
class NodeLoss:
    """Fault point ``node-loss``: the node under the ``attempt``-th pod of ``step`` (0 = its
    first pod in the run, counting retries and requeues) is lost ``after_s`` (virtual)
    seconds in. The pod is deleted: its processes are killed, its outputs are never
    collected; Argo records no exit code (a retry expression reads lastRetry.exitCode "-1")
    and the message "pod deleted"."""

    step: str
    attempt: int = 0
    after_s: float = 0.0


_NODE_LOSS = re.compile(r"^([a-z0-9][a-z0-9-]*)(?:@(\d+))?(?:\+(\d+(?:\.\d+)?))?$")


def node_loss(settings: Settings | None = None) -> tuple[NodeLoss, ...]:
    """The node losses ``BURST_NODE_LOSS`` asks for (``STEP[@N][+SECONDS]``, comma-separated)."""
    losses = []
    for word in resolve(settings).node_loss:
        m = _NODE_LOSS.match(word)
        if m is None:
            raise BadInputError(
                f"BURST_NODE_LOSS: {word!r} is not STEP[@N][+SECONDS] (e.g. train@0+1860)"
            )
        step, nth, after = m.groups()
        losses.append(NodeLoss(step, int(nth or 0), float(after or 0)))
    return tuple(losses)


# -- burst run --kill-runner-at -----------------------------------------------------------------


def kill_runner(step: str, wanted_step: str | None) -> None:
    """SIGKILL this process (the local runner) when ``step`` is the one asked for."""
    if wanted_step is not None and step == wanted_step:
        os.kill(os.getpid(), signal.SIGKILL)


# -- regional runs ----------------------------------------------------------------------------


def regional(armed: dict[str, str], point: str, once_dir: Path) -> None:
    """Regional fault point ``point``: ``kill`` SIGKILLs this process and ``preempt`` SIGTERMs
    it (each once per run: the marker ``<once_dir>/fault-<point>``), ``sleep:<s>`` waits s
    seconds (each time). Unarmed: no-op."""
    action = armed.get(point)
    if not action:
        return
    if action.startswith("sleep:"):
        delay = float(action.removeprefix("sleep:"))
        log.warning("fault point %s: sleeping %.2fs", point, delay)
        time.sleep(delay)
        return
    if action not in ("kill", "preempt"):
        raise BadInputError(
            f"regional fault {point}: unknown action {action!r} (kill, preempt, sleep:S)"
        )
    marker = once_dir / f"fault-{point.replace('/', '_')}"
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except FileExistsError:
        return
    os.close(fd)
    if action == "preempt":
        log.warning("fault point %s: preemption notice (SIGTERM to myself)", point)
        os.kill(os.getpid(), signal.SIGTERM)
        return
    log.warning("fault point %s: node lost (SIGKILL)", point)
    lose_node()


#: The file a process leaves in its pod directory (``BURST_POD_DIR``, set by the local runner)
#: when it loses its node at a fault point: the runner then reports the pod as Argo reports a
#: lost node (Error, "pod deleted", no exit code), not as a SIGKILL inside the pod (137).
NODE_LOST_MARK = "node-lost"


def lose_node() -> None:
    """This process's node goes away now: mark the pod (when the local runner runs it) and die
    by SIGKILL, as every process on a lost node does."""
    pod = current().pod_dir
    if pod is not None:
        with contextlib.suppress(OSError):
            (pod / NODE_LOST_MARK).touch()
    os.kill(os.getpid(), signal.SIGKILL)
