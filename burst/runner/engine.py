"""Execute a compiled Argo WorkflowTemplate on this machine, the way Argo would.

Supported (see :mod:`burst.runner.features`): Steps templates (a step group's steps, and every
item of a ``withItems`` / ``withParam`` step, run at the same time, bounded by ``parallelism``:
:mod:`burst.runner.fanout`), DAG templates (one task at a time, in dependency order),
container templates run as local processes (:mod:`burst.runner.pods`), workflow and input
parameters, output parameters (``valueFrom.path``), raw input artifacts, ``when``,
``continueOn``, ``retryStrategy`` (limit, retryPolicy, expression, backoff),
``activeDeadlineSeconds`` (workflow and template), and the exit handler (``onExit``), which
runs whatever happened.

Each attempt of a container gets its own directory (its "pod"): the container's ``/tmp`` maps
there, volume mounts map to local directories (:class:`EngineOptions.volumes`), ``python``
is this interpreter and the repository is on ``PYTHONPATH``. A process killed by a signal is
reported as Kubernetes reports a container killed in its pod (SIGKILL, OOM): exit code 128+N,
phase Failed. Node loss (exit code -1, phase Error, message "pod deleted", no outputs) happens
only when injected (:class:`burst.faults.NodeLoss`, the ``node_loss`` fault point:
``BURST_NODE_LOSS`` or :attr:`EngineOptions.node_loss`), as on a cluster it comes
from outside the container. Time is the engine's clock: real time plus what injected faults
declare elapsed (a node lost "after 31 minutes" moves the clock 31 minutes), so deadlines and
``backoff.maxDuration`` are tested without waiting. docs/pipelines.md cites the Argo source
each behaviour follows.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import yaml

from burst import checkout, faults
from burst.endings import STOPPED_POD
from burst.errors import BadInputError, BurstError
from burst.runner import expr, fanout
from burst.runner.features import UnsupportedFeature, check_supported, reachable_templates
from burst.runner.lint import lint
from burst.runner.pods import (
    POD_MARK,
    EndPod,
    Launcher,
    Pod,
    PreparePod,
    end_pod,
    launch_process,
)
from burst.runner.tags import UnresolvedTag, substitute, substitute_all

log = logging.getLogger(__name__)

SUCCEEDED, FAILED, ERROR, SKIPPED, OMITTED = "Succeeded", "Failed", "Error", "Skipped", "Omitted"
RETRY_POLICIES = {"Always": {FAILED, ERROR}, "OnFailure": {FAILED}, "OnError": {ERROR}}
KILL_GRACE_S = 10.0
#: Kubernetes objects a ``resource`` template may create in a local run: identities and
#: their bindings only, which one machine has no use for (recorded in the pod directory, not
#: created).
CLUSTER_ONLY_OBJECTS = {("v1", "ServiceAccount"), ("rbac.authorization.k8s.io/v1", "RoleBinding")}
#: The Argo releases whose semantics the engine follows where they changed: a missing
#: variable in a step's ``when`` or arguments requeues the step from these on.
ARGO_REQUEUE_MISSING = "v3.7.11 / v4.0.2"

Event = Callable[[str, str, dict[str, Any]], None]


#: The fault point's value (``burst.faults.NodeLoss``), named here for the engine's callers.
NodeLoss = faults.NodeLoss
#: A process that loses its node at a fault point leaves this file in its pod directory.
NODE_LOST_MARK = faults.NODE_LOST_MARK


class Stopped(BaseException):
    """The runner got SIGTERM or SIGINT: stop like `argo stop` (the exit handler runs)."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class ManifestError(BadInputError):
    """A manifest the runner refuses before running anything (one line per problem)."""


@dataclass
class EngineOptions:
    workflow_name: str
    namespace: str = "local"
    parameters: dict[str, str] = field(default_factory=dict)
    volumes: dict[str, Path] = field(default_factory=dict)  # claim/volume name -> local dir
    env: dict[str, str] = field(default_factory=dict)  # extra environment for every process
    pods_dir: Path = Path("pods")
    log_path: Callable[[str], Path] | None = None  # step name -> log file (default: pod dir)
    backoff_scale: float = 1.0  # 1.0 sleeps what the manifest says
    python: str = sys.executable
    artifacts_dir: Path | None = None  # output artifacts land here (default: beside pods_dir)
    #: Argo needs an artifact repository for output artifacts; without one it fails the pod.
    artifact_repository: bool = False
    node_loss: tuple[NodeLoss, ...] = ()  # fault point (also BURST_NODE_LOSS): nodes lost
    #: what the machine adds to a pod before it starts (burst.runner.pods.PreparePod)
    prepare_pod: PreparePod | None = None
    #: starts a pod's process (burst.runner.pods.Launcher): a local process by default
    launch: Launcher = launch_process
    #: ends what a pod left behind when its main process ended (a container: removes it)
    end_pod: EndPod = end_pod


@dataclass
class Attempt:
    exit_code: int | None
    phase: str
    message: str
    seconds: float
    pod_dir: str
    started_at: float | None = None  # wall-clock time (epoch seconds) the process started
    clock: float = 0.0  # the engine's clock (WorkflowEngine.now) when the attempt started


@dataclass
class PodNode:
    """One container step (all its attempts), as Argo's node tree would show it."""

    step: str
    template: str
    path: str
    command: list[str]
    exit_handler: bool
    key: str = ""  # unique in the run (node_key): logs, pod directories, events
    inputs: dict[str, str] = field(default_factory=dict)  # the template's input parameters
    phase: str = "Pending"
    exit_code: int | None = None
    message: str = ""
    seconds: float = 0.0
    attempts: list[Attempt] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class Outcome:
    phase: str
    exit_code: int | None = None
    message: str = ""
    outputs: dict[str, str] = field(default_factory=dict)


@dataclass
class WorkflowResult:
    phase: str
    message: str
    nodes: list[PodNode]
    exit_handler_phase: str | None


def parse_duration(text: str | int | float) -> float:
    """Argo durations: a number of seconds, or Go-style ``10s``, ``2m``, ``1h30m``."""
    if isinstance(text, int | float):
        return float(text)
    s = str(text).strip()
    if re.fullmatch(r"\d+(\.\d+)?", s):
        return float(s)
    parts = re.findall(r"(\d+(?:\.\d+)?)(ms|s|m|h)", s)
    if not parts or "".join(n + u for n, u in parts) != s:
        raise ManifestError(f"duration {text!r} is not like 30s, 2m or 1h")
    scale = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * scale[u] for n, u in parts)


class WorkflowEngine:
    def __init__(
        self, manifest: dict[str, Any], options: EngineOptions, on_event: Event | None = None
    ) -> None:
        self.manifest = manifest
        self.options = options
        self.on_event = on_event or (lambda *_: None)
        self.spec: dict[str, Any] = manifest.get("spec") or {}
        self.templates = {t["name"]: t for t in self.spec.get("templates") or []}
        self.nodes: list[PodNode] = []
        self._seq = 0
        self._deadline: float | None = None
        self._in_exit_handler = False
        self._stop_event = threading.Event()  # set by a stop: no step or retry starts
        self.workflow_vars: dict[str, str] = {}
        self._skew = 0.0  # virtual seconds added to the real clock by injected faults
        # fault point node_loss: BURST_NODE_LOSS (settings) on top of the option's
        self.node_losses: tuple[NodeLoss, ...] = (*self.options.node_loss, *faults.node_loss())
        # branches of a step group run in threads: what they share is changed under this lock
        self._lock = threading.Lock()
        self._live: set[subprocess.Popen[bytes]] = set()  # running pods (stopped on a stop)
        # a stop signal that came while this (the main) thread started a pod or a step
        # group's branches (``_stop_held``): raised once the pod's process is registered or
        # every branch has started (raised inside Popen, it would orphan the pod)
        self._launching = False
        self._deferred_signal: int | None = None
        self._pod_slots = _slots(self.spec.get("parallelism"), "spec.parallelism")

    @property
    def _stopping(self) -> bool:
        return self._stop_event.is_set()

    def now(self) -> float:
        """The engine's clock: monotonic time plus the virtual time injected faults took."""
        return time.monotonic() + self._skew

    # -- before anything runs ----------------------------------------------------------
    def check(self) -> None:
        """Refuse, before any process starts, what this runner would not execute faithfully."""
        declared = {
            p["name"]: p for p in (self.spec.get("arguments") or {}).get("parameters") or []
        }
        params = {n: str(p.get("value", p.get("default", ""))) for n, p in declared.items()}
        params.update(self.options.parameters)
        reachable = reachable_templates(self.manifest, params)
        check_supported(self.manifest, reachable)
        problems = lint(self.manifest)
        for t in self.templates.values():
            if t["name"] not in reachable:
                continue
            rs = t.get("retryStrategy")
            if rs is not None:
                if "limit" not in rs:
                    problems.append(
                        f"template {t['name']}: retryStrategy without a limit "
                        "(unbounded retries) is not supported locally"
                    )
                if rs.get("retryPolicy", "OnFailure") not in RETRY_POLICIES:
                    problems.append(
                        f"template {t['name']}: retryPolicy "
                        f"{rs.get('retryPolicy')!r} is not supported locally"
                    )
                if "backoff" in rs:
                    for k in ("duration", "maxDuration", "cap"):
                        if k in rs["backoff"]:
                            try:
                                parse_duration(rs["backoff"][k])
                            except ManifestError as exc:
                                problems.append(f"template {t['name']}: backoff.{k}: {exc.message}")
            if "resource" in t:
                kind = _resource_kind(t)
                if kind not in CLUSTER_ONLY_OBJECTS:
                    problems.append(
                        f"template {t['name']}: a resource of kind {kind[1]!r} "
                        f"({kind[0]}) cannot be created locally (only "
                        f"{', '.join(k for _, k in sorted(CLUSTER_ONLY_OBJECTS))})"
                    )
            arts = (t.get("outputs") or {}).get("artifacts") or []
            if arts and not self.options.artifact_repository:
                problems.append(
                    f"template {t['name']}: output artifact {arts[0].get('name')!r} needs an "
                    "artifact repository, and none is configured (Argo fails the pod)"
                )
            for mount in (t.get("container") or {}).get("volumeMounts") or []:
                if mount.get("name") not in self.options.volumes:
                    problems.append(
                        f"template {t['name']}: volume {mount.get('name')!r} has "
                        "no local directory (EngineOptions.volumes)"
                    )
        declared = {
            p["name"]: p for p in (self.spec.get("arguments") or {}).get("parameters") or []
        }
        for name in self.options.parameters:
            if name not in declared:
                problems.append(
                    f"parameter {name!r} is not declared by the workflow "
                    f"(declared: {', '.join(declared)})"
                )
        for name, p in declared.items():
            if name not in self.options.parameters and "value" not in p and "default" not in p:
                problems.append(f"workflow parameter {name!r} has no value: pass it")
            # Argo refuses the submission (workflow/validate validateArgumentsValues): a value
            # outside the parameter's enum, or an empty enum
            if "enum" in p:
                allowed = [str(v) for v in p.get("enum") or []]
                value = str(self.options.parameters.get(name, p.get("value", p.get("default", ""))))
                if not allowed:
                    problems.append(f"workflow parameter {name!r} has an empty enum")
                elif value not in allowed:
                    problems.append(
                        f"workflow parameter {name!r} is {value!r}, not one of its enum "
                        f"({', '.join(allowed)})"
                    )
        if problems:
            raise ManifestError(
                "; ".join(problems),
                where=f"{self.manifest.get('kind')} "
                f"{(self.manifest.get('metadata') or {}).get('name')}",
            )

    # -- the workflow ------------------------------------------------------------------
    def run(self) -> WorkflowResult:
        self.check()
        declared = (self.spec.get("arguments") or {}).get("parameters") or []
        params = {p["name"]: str(p.get("value", p.get("default", ""))) for p in declared}
        params.update(self.options.parameters)
        self.workflow_vars = {
            "workflow.name": self.options.workflow_name,
            "workflow.namespace": self.options.namespace,
            "workflow.uid": str(uuid.uuid4()),
            "workflow.creationTimestamp": dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "workflow.serviceAccountName": str(self.spec.get("serviceAccountName", "")),
            "workflow.mainEntrypoint": str(self.spec["entrypoint"]),
            **{f"workflow.parameters.{k}": v for k, v in params.items()},
        }
        if self.spec.get("activeDeadlineSeconds") is not None:
            self._deadline = self.now() + float(self.spec["activeDeadlineSeconds"])
        outcome = Outcome(ERROR, message="not started")
        restore = self._catch_stop_signals()
        try:
            outcome = self._template(self.spec["entrypoint"], {}, self.spec["entrypoint"], "main")
        except Stopped as exc:
            outcome = Outcome(
                FAILED,
                message=f"stopped by signal {exc.signum} (like `argo stop`): the exit handler ran",
            )
        finally:
            exit_phase = None
            on_exit = self.spec.get("onExit")
            self._in_exit_handler = True  # from here on, signals are ignored
            self._stop_event.clear()  # the exit handler's steps start whatever happened
            if on_exit:
                self._deadline = None  # the exit handler runs even after the deadline
                self.workflow_vars["workflow.status"] = outcome.phase
                self.workflow_vars["workflow.failures"] = json.dumps(
                    [
                        {
                            "displayName": n.step,
                            "templateName": n.template,
                            "phase": n.phase,
                            "message": n.message,
                        }
                        for n in self.nodes
                        if n.phase in (FAILED, ERROR)
                    ]
                )
                exit_phase = self._template(on_exit, {}, on_exit, "onExit").phase
            restore()
        phase = outcome.phase
        if phase == SUCCEEDED and exit_phase not in (None, SUCCEEDED):
            phase = FAILED  # Argo fails a workflow whose exit handler failed
        return WorkflowResult(phase, outcome.message, self.nodes, exit_phase)

    def _catch_stop_signals(self) -> Callable[[], None]:
        """SIGTERM / SIGINT / SIGHUP stop the run as `argo stop` does: the running pod is
        stopped, no further step starts, the exit handler runs (later signals are ignored
        until it is done: SIGKILL abandons it). Returns the function that restores the old
        handlers."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def handler(signum: int, _frame: Any) -> None:
            if self._in_exit_handler or self._stopping:
                log.warning(
                    "signal %d ignored: the exit handler must run (SIGKILL abandons it)", signum
                )
                return
            self._stop_event.set()
            if self._launching:
                self._deferred_signal = signum
                return
            raise Stopped(signum)

        # SIGHUP too: the terminal `burst run` ran in closed (an ssh session dropped); its
        # default action killed the runner, left train running and nothing torn down
        stops = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
        old = {sig: signal.signal(sig, handler) for sig in stops}

        def restore() -> None:
            for sig, h in old.items():
                signal.signal(sig, h)

        return restore

    def _template(self, name: str, inputs: dict[str, str], path: str, step: str) -> Outcome:
        t = self.templates[name]
        values: dict[str, str] = {}
        for p in (t.get("inputs") or {}).get("parameters") or []:
            if p["name"] in inputs:
                values[p["name"]] = inputs[p["name"]]
            elif "value" in p or "default" in p:
                values[p["name"]] = str(p.get("value", p.get("default")))
            else:
                return Outcome(ERROR, message=f"{path}: input {p['name']!r} not supplied")
        if "container" in t:
            return self._container(t, values, path, step)
        if "resource" in t:
            return self._resource(t, values, path, step)
        if "steps" in t:
            return self._steps(t, values, path)
        return self._dag(t, values, path)

    def _scope(self, inputs: dict[str, str]) -> dict[str, str]:
        return {**self.workflow_vars, **{f"inputs.parameters.{k}": v for k, v in inputs.items()}}

    def _call_args(self, call: dict[str, Any], scope: dict[str, str], where: str) -> dict[str, str]:
        return {
            p["name"]: substitute(str(p.get("value", "")), scope, where)
            for p in (call.get("arguments") or {}).get("parameters") or []
        }

    def _when(self, call: dict[str, Any], scope: dict[str, str], where: str) -> bool:
        if "when" not in call:
            return True
        text = substitute(str(call["when"]), scope, where)
        try:
            return bool(expr.evaluate_text(text, {}))
        except expr.ExprError as exc:
            raise ManifestError(f"when {text!r}: {exc.message}", where=where) from None

    def _record(self, scope: dict[str, str], kind: str, name: str, outcome: Outcome) -> None:
        scope[f"{kind}.{name}.status"] = outcome.phase
        if outcome.exit_code is not None:
            scope[f"{kind}.{name}.exitCode"] = str(outcome.exit_code)
        for k, v in outcome.outputs.items():
            scope[f"{kind}.{name}.outputs.parameters.{k}"] = v

    def _invoke(
        self, call: dict[str, Any], scope: dict[str, str], where: str, name: str | None = None
    ) -> Outcome:
        """Run one step or task: its ``when``, its arguments, its template. A tag that cannot
        be resolved at this point (e.g. the output of a step that failed) errors the node,
        as in Argo, instead of stopping the whole run (the exit handler must still run).
        ``name``: the node's name when it is not the call's (an expanded item's)."""
        try:
            if not self._when(call, scope, where):
                return Outcome(SKIPPED, message=f"when {call['when']!r} was false")
            args = self._call_args(call, scope, where)
        except UnresolvedTag as exc:
            return self._requeued_forever(where, exc)
        except BadInputError as exc:
            log.warning("%s: %s", where, exc.one_line())
            return Outcome(ERROR, message=exc.one_line())
        return self._template(call["template"], args, where, name or call["name"])

    def _requeued_forever(self, where: str, exc: UnresolvedTag) -> Outcome:
        """A step whose ``when`` or arguments name a variable that does not exist (e.g.
        ``steps.train.exitCode`` after a lost node): from Argo v3.7.11 / v4.0.2 the controller
        requeues the step until the variable appears (workflow/controller/steps.go,
        resolveReferences: IsMissingVariableErr -> ErrRequeue), which it never does. The
        workflow hangs, holding its semaphore and its nodes, until its deadline: the engine's
        clock jumps there."""
        message = (
            f"{exc.one_line()}: Argo (>= {ARGO_REQUEUE_MISSING}) requeues this step until the "
            "variable exists; it never will, so the workflow hangs until its deadline"
        )
        log.error("%s: %s", where, message)
        if self._deadline is None:  # a cluster would hang forever; the local run stops here
            return Outcome(ERROR, message=message + " (it has none: it would hang forever)")
        self._skew += max(0.0, self._deadline - self.now())
        return Outcome(ERROR, message=f"activeDeadlineSeconds exceeded (workflow): {message}")

    def _deadline_passed(self) -> bool:
        return self._deadline is not None and self.now() >= self._deadline

    def _steps(self, t: dict[str, Any], inputs: dict[str, str], path: str) -> Outcome:
        """Argo's executeSteps / executeStepGroup (workflow/controller/steps.go): the groups
        in order; a group's steps (and each item of a ``withItems`` / ``withParam`` step) all
        at once, at most ``parallelism`` of them running; when every child has ended, the
        first child that failed or errored without ``continueOn`` fails the group and the
        template (siblings are never cancelled: Argo waits for them)."""
        scope = self._scope(inputs)
        slots = _slots(t.get("parallelism"), f"{path}: parallelism")
        for group in t.get("steps") or []:
            if self._deadline_passed():
                return Outcome(FAILED, message="activeDeadlineSeconds exceeded (workflow)")
            if self._stopping:
                return Outcome(FAILED, message=STOPPED_POD)
            children: list[_Child] = []
            expanded: dict[str, list[_Child]] = {}
            early: dict[str, Outcome] = {}
            for step in group:
                where = f"{path}/{step['name']}"
                if not fanout.expands(step):
                    children.append(_Child(step, str(step["name"]), where, {}))
                    continue
                if "when" in step and not fanout.mentions_item(str(step["when"])):
                    # steps.go resolveReferences: a `when` without {{item}} is decided first;
                    # false skips the whole step, its withParam never read
                    try:
                        if not self._when(step, scope, where):
                            early[step["name"]] = Outcome(
                                SKIPPED, message=f"when {step['when']!r} was false"
                            )
                            continue
                    except UnresolvedTag as exc:
                        early[step["name"]] = self._requeued_forever(where, exc)
                        continue
                    except BadInputError as exc:
                        early[step["name"]] = Outcome(ERROR, message=exc.one_line())
                        continue
                try:
                    with_param = (
                        substitute(str(step["withParam"]), scope, where)
                        if "withParam" in step
                        else None
                    )
                    items = fanout.items(step, with_param)
                except UnresolvedTag as exc:
                    early[step["name"]] = self._requeued_forever(where, exc)
                    continue
                except BadInputError as exc:
                    log.warning("%s: %s", where, exc.one_line())
                    early[step["name"]] = Outcome(ERROR, message=exc.one_line())
                    continue
                if not items:
                    early[step["name"]] = Outcome(SKIPPED, message="Skipped, empty params")
                    continue
                expanded[step["name"]] = [
                    _Child(step, it.name, f"{path}/{it.name}", it.variables) for it in items
                ]
                children += expanded[step["name"]]
            outcomes = self._run_children(children, scope, slots)
            results: list[tuple[dict[str, Any], str, Outcome]] = []
            for step in group:
                name = step["name"]
                if name in early:
                    results.append((step, name, early[name]))
                elif name in expanded:
                    results += [(c.step, c.name, outcomes[id(c)]) for c in expanded[name]]
                else:
                    (child,) = [c for c in children if c.step is step]
                    results.append((step, name, outcomes[id(child)]))
            for step in group:
                name = step["name"]
                if name in expanded:
                    kids = [outcomes[id(c)] for c in expanded[name]]
                    self._record_expanded(scope, name, step, kids)
                else:
                    (outcome,) = [o for s, n, o in results if n == name]
                    self._record(scope, "steps", name, outcome)
            for step, name, outcome in results:
                if outcome.phase in (FAILED, ERROR) and not _continues(step, outcome):
                    return Outcome(
                        FAILED,
                        outcome.exit_code,
                        f"child {name!r} {outcome.phase.lower()}: {outcome.message}".strip(),
                    )
        return Outcome(SUCCEEDED)

    def _record_expanded(
        self, scope: dict[str, str], name: str, step: dict[str, Any], kids: list[Outcome]
    ) -> None:
        """An expanded step's variables: its aggregate outputs, and its status (the step
        group's phase as steps.go's buildLocalScope records it)."""
        failed = any(o.phase in (FAILED, ERROR) and not _continues(step, o) for o in kids)
        scope[f"steps.{name}.status"] = FAILED if failed else SUCCEEDED
        scope.update(
            fanout.aggregate_outputs(name, [o.outputs for o in kids if o.phase == SUCCEEDED])
        )

    def _run_children(
        self, children: list[_Child], scope: dict[str, str], slots: threading.Semaphore | None
    ) -> dict[int, Outcome]:
        """Every child of a step group at once (one thread each; a lone child runs in this
        thread). ``slots`` bounds how many run together (the template's ``parallelism``)."""
        outcomes: dict[int, Outcome] = {}
        # Each branch says it is done with an Event, not by its thread ending: a stop raised in
        # this thread while it is in Thread.join() can leave CPython 3.11 taking a live branch
        # for ended (join returns at once), and the exit handler would then start beside it.
        done = {id(c): threading.Event() for c in children}

        def one(child: _Child) -> None:
            try:
                branch(child)
            finally:
                done[id(child)].set()

        def branch(child: _Child) -> None:
            if slots is not None:
                slots.acquire()
            try:
                if self._stopping:
                    outcomes[id(child)] = Outcome(FAILED, message=STOPPED_POD)
                    return
                outcomes[id(child)] = self._invoke(
                    child.step, {**scope, **child.variables}, child.where, child.name
                )
            except Exception as exc:  # a bug in a branch must not hang the others
                log.exception("%s: the engine failed", child.where)
                outcomes[id(child)] = Outcome(ERROR, message=f"engine error: {exc}")
            finally:
                if slots is not None:
                    slots.release()

        if len(children) == 1 and slots is None:
            one(children[0])
            return outcomes
        threads = [
            threading.Thread(target=one, args=(c,), name=c.where, daemon=True) for c in children
        ]
        # A stop signal while the branches start is held until every one has started (raised
        # between two starts, it left the started ones running unwaited for: the exit handler
        # and the report went on beside them, a pod of theirs still "Pending")
        with self._stop_held():
            for th in threads:
                th.start()
        try:
            self._raise_deferred_stop()
            for ev in done.values():
                while not ev.wait(timeout=0.2):
                    pass
        except BaseException:  # stopped (SIGTERM/SIGINT in this thread): stop every branch
            self._stop_event.set()
            self._stop_live_pods()
            for ev in done.values():
                ev.wait()
            raise
        return outcomes

    def _launch(self, spec: Pod, logf: IO[bytes]) -> subprocess.Popen[bytes] | None:
        """Start the pod's process and register it as live, or None when the run is already
        stopping. A stop signal to this (the main) thread meanwhile is held until the process
        is registered, so that no pod outlives a stop unseen."""
        with self._stop_held():
            if self._stopping:
                return None
            proc = self.options.launch(spec, logf)
            with self._lock:
                self._live.add(proc)
            return proc

    @contextlib.contextmanager
    def _stop_held(self) -> Iterator[None]:
        """A stop signal to this thread meanwhile (if it is the main one, which gets them) is
        held in ``_deferred_signal``; the caller raises it with ``_raise_deferred_stop``."""
        main = _in_main_thread()
        if main:
            self._launching = True
        try:
            yield
        finally:
            if main:
                self._launching = False

    def _raise_deferred_stop(self) -> None:
        if self._deferred_signal is not None and _in_main_thread():
            signum, self._deferred_signal = self._deferred_signal, None
            raise Stopped(signum)

    def _stop_live_pods(self) -> None:
        """Stop every running pod at once, as `argo stop` does (SIGTERM, then SIGKILL)."""
        with self._lock:
            procs = list(self._live)
        stoppers = [threading.Thread(target=_stop, args=(p,), daemon=True) for p in procs]
        for th in stoppers:
            th.start()
        for th in stoppers:
            th.join()

    def _dag(self, t: dict[str, Any], inputs: dict[str, str], path: str) -> Outcome:
        scope = self._scope(inputs)
        tasks = list((t.get("dag") or {}).get("tasks") or [])
        done: dict[str, tuple[dict[str, Any], Outcome]] = {}
        failure: Outcome | None = None
        while len(done) < len(tasks):
            ready = [
                task
                for task in tasks
                if task["name"] not in done
                and all(d in done for d in task.get("dependencies") or [])
            ]
            if not ready:
                raise ManifestError(f"{path}: the DAG has a cycle")
            task = ready[0]
            where = f"{path}/{task['name']}"
            deps_ok = all(
                done[d][1].phase in (SUCCEEDED, SKIPPED) or _continues(*done[d])
                for d in task.get("dependencies") or []
            )
            if not deps_ok or self._deadline_passed():
                outcome = Outcome(OMITTED, message="a dependency did not succeed")
            else:
                outcome = self._invoke(task, scope, where)
            done[task["name"]] = (task, outcome)
            self._record(scope, "tasks", task["name"], outcome)
            if outcome.phase in (FAILED, ERROR) and not _continues(task, outcome):
                failure = failure or Outcome(
                    FAILED, outcome.exit_code, f"task {task['name']!r} {outcome.phase.lower()}"
                )
        if self._deadline_passed():
            return Outcome(FAILED, message="activeDeadlineSeconds exceeded (workflow)")
        return failure or Outcome(SUCCEEDED)

    # -- containers --------------------------------------------------------------------
    def _container(
        self, t: dict[str, Any], inputs: dict[str, str], path: str, step: str
    ) -> Outcome:
        node = PodNode(
            step,
            t["name"],
            path,
            list(t["container"].get("command") or []),
            self._in_exit_handler,
            key=node_key(path, step),
            inputs=dict(inputs),
        )
        with self._lock:
            self.nodes.append(node)
        rs = t.get("retryStrategy")
        scope = self._scope(inputs)
        try:
            limit = int(substitute(str(rs["limit"]), scope, path)) if rs else 0
        except (BadInputError, ValueError) as exc:
            msg = exc.one_line() if isinstance(exc, BadInputError) else str(exc)
            node.phase, node.message = ERROR, f"retryStrategy.limit: {msg}"
            return Outcome(ERROR, message=node.message)
        policy = RETRY_POLICIES[rs.get("retryPolicy", "OnFailure")] if rs else set()
        retry_expr = expr.parse(rs["expression"]) if rs and rs.get("expression") else None
        started = self.now()
        self.on_event(node.key, "started", {"template": t["name"], "path": path})
        outcome = Outcome(ERROR, message="not run")
        execution_deadline: float | None = None
        attempt = 0
        while True:
            outcome = self._attempt(
                t, {**scope, "retries": str(attempt)}, node, path, execution_deadline
            )
            if outcome.phase == SUCCEEDED or rs is None or self._stopping:
                break
            verdict = self._retry_verdict(rs, node, outcome, (limit, policy, retry_expr), path)
            if isinstance(verdict, str):
                outcome = Outcome(outcome.phase, outcome.exit_code, verdict, outcome.outputs)
                break
            wait, execution_deadline = verdict
            attempt += 1
            self.on_event(
                node.key,
                "requeued",
                {
                    "attempt": attempt,
                    "template": t["name"],
                    "exit_code": outcome.exit_code,
                    "wait_s": wait,
                },
            )
            if self._stop_event.wait(wait * self.options.backoff_scale):
                break  # stopped while waiting for the next attempt
            if self._deadline_passed():
                outcome = Outcome(
                    outcome.phase, outcome.exit_code, "retry exceeded workflow deadline"
                )
                break
        node.phase, node.exit_code, node.message = outcome.phase, outcome.exit_code, outcome.message
        node.outputs = outcome.outputs
        node.seconds = round(self.now() - started, 3)
        status = "succeeded" if outcome.phase == SUCCEEDED else "failed"
        self.on_event(
            node.key,
            status,
            {
                "exit_code": outcome.exit_code,
                "seconds": node.seconds,
                "template": t["name"],
                "attempts": len(node.attempts),
                "message": outcome.message,
            },
        )
        return outcome

    def _retry_verdict(
        self,
        rs: dict[str, Any],
        node: PodNode,
        outcome: Outcome,
        rules: tuple[int, set[str], expr.Node | None],
        path: str,
    ) -> str | tuple[float, float | None]:
        """Argo's processNodeRetries (workflow/controller/operator.go), in its order: after a
        failed attempt, either the message the retry node ends with, or (seconds to wait, the
        next pod's execution deadline: backoff.maxDuration counted from the first attempt)."""
        limit, policy, retry_expr = rules
        if self._deadline_passed():
            return "retry exceeded workflow deadline"
        if outcome.message.startswith("activeDeadlineSeconds"):
            return outcome.message
        wait, max_deadline = 0.0, None
        backoff = rs.get("backoff")
        if backoff is not None:
            first, last = node.attempts[0], node.attempts[-1]
            if backoff.get("maxDuration"):
                max_deadline = first.clock + parse_duration(backoff["maxDuration"])
                if self.now() > max_deadline:
                    return "Max duration limit exceeded"
            if not backoff.get("duration"):
                return "no base duration specified for retryStrategy"
            wait = parse_duration(backoff["duration"])
            factor = int(backoff.get("factor") or 0)
            if factor > 0:  # duration * factor^(attempts so far - 1)
                wait *= float(factor) ** (len(node.attempts) - 1)
            if backoff.get("cap"):
                wait = min(wait, parse_duration(backoff["cap"]))
            if max_deadline is not None and last.clock + last.seconds + wait > max_deadline:
                return "Backoff would exceed max duration limit"
        if outcome.phase not in policy:
            return outcome.message
        if len(node.attempts) > limit:
            return "No more retries left"
        if retry_expr is not None:
            last_retry = {
                # Argo's buildRetryStrategyLocalScope: "-1" when the pod left no exit code
                "exitCode": "-1" if outcome.exit_code is None else str(outcome.exit_code),
                "status": outcome.phase,
                "message": outcome.message,
                "duration": str(round(node.attempts[-1].seconds)),
            }
            if not _retry_wanted(retry_expr, last_retry, path):
                return "retryStrategy.expression evaluated to false"
        return wait, max_deadline

    def _resource(self, t: dict[str, Any], inputs: dict[str, str], path: str, step: str) -> Outcome:
        """A cluster-only object (check() allowed only those): its manifest, substituted as
        Argo would, is recorded in the pod directory; nothing is created on this machine."""
        try:
            text = substitute(str(t["resource"]["manifest"]), self._scope(inputs), path)
            doc = yaml.safe_load(text)
        except BadInputError as exc:
            return Outcome(ERROR, message=exc.one_line())
        except yaml.YAMLError as exc:
            return Outcome(ERROR, message=f"resource manifest is not YAML: {exc}")
        pod = self._pod_dir(step)
        pod.mkdir(parents=True, exist_ok=True)
        (pod / "manifest.yaml").write_text(text, encoding="utf-8")
        name = ((doc or {}).get("metadata") or {}).get("name")
        log.info("%s: %s %s recorded (cluster-only; not created locally)", path, doc["kind"], name)
        return Outcome(SUCCEEDED, message=f"{doc['kind']} {name}: cluster-only, recorded")

    def _map_path(self, value: str, pod: Path, mounts: list[tuple[str, Path]]) -> str:
        head, sep, tail = value.partition("=")
        if sep and tail.startswith("/") and not head.startswith("/"):
            return head + sep + self._map_path(tail, pod, mounts)
        for prefix, local in mounts:
            if value == prefix or value.startswith(prefix.rstrip("/") + "/"):
                return str(local) + value[len(prefix.rstrip("/")) :]
        if value == "/tmp" or value.startswith("/tmp/"):
            return str(pod / "tmp") + value[len("/tmp") :]
        return value

    def _attempt(
        self,
        t: dict[str, Any],
        scope: dict[str, str],
        node: PodNode,
        path: str,
        execution_deadline: float | None = None,
    ) -> Outcome:
        pod = self._pod_dir(node.key)
        (pod / "tmp").mkdir(parents=True, exist_ok=True)
        try:
            if self._pod_slots is None:
                return self._run_pod(t, scope, node, path, pod, execution_deadline)
            with self._pod_slots:  # spec.parallelism: pods running at once in the workflow
                return self._run_pod(t, scope, node, path, pod, execution_deadline)
        except BadInputError as exc:  # an unresolvable tag: the pod cannot be created
            outcome = Outcome(ERROR, message=exc.one_line())
            node.attempts.append(
                Attempt(None, ERROR, outcome.message, 0.0, str(pod), clock=self.now())
            )
            return outcome
        except Stopped:  # before its process started: the node is stopped, not pending
            if node.phase == "Pending":
                node.phase, node.message = FAILED, STOPPED_POD
            raise

    def _pod_dir(self, name: str) -> Path:
        with self._lock:
            self._seq += 1
            return self.options.pods_dir / f"{self._seq:03d}-{name}"

    def _node_loss(self, node: PodNode) -> NodeLoss | None:
        # the step's pods counted over the whole run (a requeued step starts a new node)
        with self._lock:
            attempt = sum(len(n.attempts) for n in self.nodes if n.key == node.key)
        for fault in self.node_losses:
            if (
                fault.step in (node.step, node.key)
                and fault.attempt == attempt
                and not node.exit_handler
            ):
                return fault
        return None

    def _run_pod(
        self,
        t: dict[str, Any],
        scope: dict[str, str],
        node: PodNode,
        path: str,
        pod: Path,
        execution_deadline: float | None = None,
    ) -> Outcome:
        c = substitute_all(t["container"], scope, path)
        mounts = sorted(
            (
                (m["mountPath"], self.options.volumes[m["name"]])
                for m in c.get("volumeMounts") or []
            ),
            key=lambda x: -len(x[0]),
        )

        def mapped(v: str) -> str:
            return self._map_path(v, pod, mounts)

        for art in (t.get("inputs") or {}).get("artifacts") or []:
            target = Path(mapped(art["path"]))
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(substitute(str(art["raw"]["data"]), scope, path), encoding="utf-8")
        if "podSpecPatch" in t:
            patch = substitute(str(t["podSpecPatch"]), scope, path)
            try:
                json.loads(patch)
            except json.JSONDecodeError as exc:
                return Outcome(ERROR, message=f"podSpecPatch is not valid JSON: {exc.msg}")
        argv = [mapped(str(a)) for a in [*(c.get("command") or []), *(c.get("args") or [])]]
        if not argv:
            return Outcome(ERROR, message="container has no command")
        if argv[0] == "python":
            argv[0] = self.options.python
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(checkout.ROOT), env.get("PYTHONPATH", "")) if p
        )
        for e in c.get("env") or []:
            env[e["name"]] = mapped(str(e.get("value", "")))
        env.update(self.options.env)
        env[POD_MARK] = str(pod)  # where a fault point marks its node lost; end_pod's mark
        timeout = None
        if t.get("activeDeadlineSeconds") is not None:
            timeout = float(substitute(str(t["activeDeadlineSeconds"]), scope, path))
        # Argo gives a retried pod backoff.maxDuration's deadline (executionDeadline), and
        # every pod the workflow's
        for limit_at in (self._deadline, execution_deadline):
            if limit_at is not None:
                left = max(0.0, limit_at - self.now())
                timeout = left if timeout is None else min(timeout, left)
        log_file = self.options.log_path(node.key) if self.options.log_path else pod / "log.txt"
        log_file.parent.mkdir(parents=True, exist_ok=True)
        spec = Pod(
            step=node.step,
            key=node.key,
            template=str(t["name"]),
            path=path,
            argv=argv,
            env=env,
            cwd=mapped(c["workingDir"]) if c.get("workingDir") else os.getcwd(),
            pod_dir=pod,
            log_file=log_file,
            inputs=dict(node.inputs),
            exit_handler=node.exit_handler,
            container=c,
            pod_security={
                **((self.manifest.get("spec") or {}).get("securityContext") or {}),
                **(t.get("securityContext") or {}),
            },
            mounts=tuple(mounts),
            container_env={e["name"]: str(e.get("value", "")) for e in c.get("env") or []},
        )
        if self.options.prepare_pod is not None:
            try:
                spec = self.options.prepare_pod(spec)
            except BurstError as exc:  # the machine could not give the pod what it needs
                message = f"the pod could not be prepared: {exc.one_line()}"
                node.attempts.append(Attempt(None, ERROR, message, 0.0, str(pod), clock=self.now()))
                return Outcome(ERROR, message=message)
        lost = self._node_loss(node)
        if lost is not None and (timeout is None or lost.after_s < timeout):
            return self._lose_node(lost, node, spec)
        started = self.now()
        clock = started
        wall_start = time.time()
        with open(spec.log_file, "ab") as logf:
            proc = self._launch(spec, logf)
            if proc is None:
                self._raise_deferred_stop()
                return Outcome(FAILED, message=STOPPED_POD)
            deadline_hit = False
            try:
                self._raise_deferred_stop()  # it came while the pod started: stop it, go on up
                # a stop in another thread snapshots the live pods after it is set: a pod
                # registered after that snapshot sees it here and stops itself
                code = _stop(proc) if self._stopping else proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                deadline_hit = True
                code = _stop(proc)
            except BaseException:  # the run is stopped: stop this pod, record it, go on up
                code = _stop(proc)
                seconds = round(self.now() - started, 3)
                exit_code = -1 if code < 0 else code
                message = STOPPED_POD
                node.attempts.append(
                    Attempt(exit_code, FAILED, message, seconds, str(pod), wall_start, clock)
                )
                node.phase, node.exit_code, node.message = FAILED, exit_code, message
                node.seconds = round(sum(a.seconds for a in node.attempts), 3)
                self.on_event(
                    node.key,
                    "failed",
                    {"exit_code": exit_code, "seconds": node.seconds, "template": t["name"]},
                )
                raise
            finally:
                with self._lock:
                    self._live.discard(proc)
                self.options.end_pod(pod)  # the container ends: nothing of it outlives it
        seconds = round(self.now() - started, 3)
        if deadline_hit:
            phase, exit_code, message = FAILED, code, "activeDeadlineSeconds exceeded"
        elif self._stopping and code != 0:  # stopped by `argo stop` (another branch's stop)
            phase, exit_code = FAILED, (128 - code if code < 0 else code)
            message = STOPPED_POD
        elif code < 0 and (pod / NODE_LOST_MARK).exists():  # fault point: node lost
            return self._node_lost_at_fault_point(node, pod, wall_start, clock)
        elif code < 0:  # killed inside its pod (SIGKILL, the OOM killer): the kubelet
            # records 128 + the signal, the pod fails; only a lost node is "pod deleted"
            phase, exit_code = FAILED, 128 - code
            name = "OOMKilled or SIGKILL" if -code == signal.SIGKILL else f"signal {-code}"
            message = f"Error (exit code {exit_code}: {name})"
        elif code == 0:
            phase, exit_code, message = SUCCEEDED, 0, ""
        else:
            phase, exit_code, message = FAILED, code, f"Error (exit code {code})"
        outputs: dict[str, str] = {}
        for p in (t.get("outputs") or {}).get("parameters") or []:
            vf = p.get("valueFrom") or {}
            f = Path(mapped(substitute(str(vf.get("path", "")), scope, path)))
            if f.is_file():
                outputs[p["name"]] = f.read_text(encoding="utf-8").strip()
            elif "default" in vf:
                outputs[p["name"]] = str(vf["default"])
            elif phase == SUCCEEDED:
                phase, message = (
                    ERROR,
                    f"output parameter {p['name']!r}: {vf.get('path')} was not written",
                )
        for art in (t.get("outputs") or {}).get("artifacts") or []:
            src = Path(mapped(substitute(str(art["path"]), scope, path)))
            if src.is_file():  # saved whatever the phase, as Argo saves a failed pod's outputs
                root = self.options.artifacts_dir or self.options.pods_dir.parent / "artifacts"
                dest = root / node.step / f"{art['name']}{src.suffix}"
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(src, dest)
            elif not art.get("optional") and phase == SUCCEEDED:
                phase, message = ERROR, f"output artifact {art['name']!r}: {src} was not written"
        node.attempts.append(
            Attempt(exit_code, phase, message, seconds, str(pod), wall_start, clock)
        )
        return Outcome(phase, exit_code, message, outputs)

    def _node_lost_at_fault_point(
        self, node: PodNode, pod: Path, wall_start: float, clock: float
    ) -> Outcome:
        """A process that marked its pod's node lost (``burst.faults.lose_node``: a regional
        fault point) and died with it: Argo's Error, "pod deleted", no exit code, no
        outputs, as for :meth:`_lose_node`."""
        seconds = round(self.now() - clock, 3)
        log.warning("%s: node lost at a fault point", node.path)
        node.attempts.append(
            Attempt(None, ERROR, "pod deleted", seconds, str(pod), wall_start, clock)
        )
        return Outcome(ERROR, None, "pod deleted")

    def _lose_node(self, lost: NodeLoss, node: PodNode, pod: Pod) -> Outcome:
        """Fault point ``node-loss``: the pod starts, then its node goes away ``after_s``
        (virtual) seconds in. Its processes die with it; Argo marks the node Error, "pod
        deleted", with no exit code and no outputs (nothing is collected from a lost node)."""
        clock, wall_start = self.now(), time.time()
        with open(pod.pod_dir / "log.txt", "ab") as logf:
            proc = self._launch(pod, logf)
            if proc is None:
                self._raise_deferred_stop()
                return Outcome(FAILED, message=STOPPED_POD)
            try:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            finally:
                with self._lock:
                    self._live.discard(proc)
                self.options.end_pod(pod.pod_dir)  # every process on the node dies with it
        self._raise_deferred_stop()  # a stop signal that came while the pod started
        with self._lock:
            self._skew += lost.after_s
        message = "pod deleted"
        log.warning(
            "%s: node lost %.0f s into attempt %d (fault point)",
            node.path,
            lost.after_s,
            lost.attempt,
        )
        node.attempts.append(
            Attempt(None, ERROR, message, lost.after_s, str(pod.pod_dir), wall_start, clock)
        )
        return Outcome(ERROR, None, message)


def _retry_wanted(retry_expr: expr.Node, last: dict[str, str], where: str) -> bool:
    try:
        return bool(expr.evaluate(retry_expr, {"lastRetry": last}))
    except expr.ExprError as exc:  # Argo does not retry when the expression fails
        log.warning("%s: retry expression failed (%s): not retried", where, exc.message)
        return False


def _resource_kind(t: dict[str, Any]) -> tuple[str, str]:
    try:
        doc = yaml.safe_load(str(t["resource"].get("manifest", "")))
    except yaml.YAMLError:
        return ("?", "not YAML")
    doc = doc if isinstance(doc, dict) else {}
    return (str(doc.get("apiVersion")), str(doc.get("kind")))


@dataclass
class _Child:
    """One child of a step group: a step, or one item of an expanded step."""

    step: dict[str, Any]
    name: str  # the node's name: the step's, or ``name(i:item)``
    where: str
    variables: dict[str, str]  # the item's variables (``item``, ``item.<key>``)


def _slots(value: Any, where: str) -> threading.Semaphore | None:
    """A ``parallelism`` bound as a semaphore (None: unbounded)."""
    if value is None:
        return None
    try:
        n = int(value)
    except (TypeError, ValueError):
        raise ManifestError(f"{where} {value!r} is not a number") from None
    if n < 1:
        raise ManifestError(f"{where} {value!r} must be at least 1")
    return threading.Semaphore(n)


def node_key(path: str, step: str) -> str:
    """A pod's name, unique in the run: the step's own name, or, under a fan-out, the path
    from the first expanded step down (``regions(0:eu).worker``): its log file, its pod
    directories and its events are named by it."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part.endswith(")") and "(" in part:
            return ".".join(parts[i:])
    return step


def _continues(call: dict[str, Any], outcome: Outcome) -> bool:
    cont = call.get("continueOn") or {}
    return bool(cont.get("failed") if outcome.phase == FAILED else cont.get("error"))


def _in_main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _stop(proc: subprocess.Popen[Any]) -> int:
    """SIGTERM the step's process group, then SIGKILL after a grace period (like a kubelet)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.wait(timeout=KILL_GRACE_S)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait()


__all__ = [
    "EngineOptions",
    "ManifestError",
    "NodeLoss",
    "PodNode",
    "UnsupportedFeature",
    "WorkflowEngine",
    "WorkflowResult",
    "parse_duration",
]
