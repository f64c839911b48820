"""The local engine on small WorkflowTemplates whose containers are real Python processes."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest
import yaml

from burst.errors import BadInputError
from burst.runner.engine import (
    EngineOptions,
    ManifestError,
    NodeLoss,
    UnsupportedFeature,
    WorkflowEngine,
)
from burst.runner.pods import Pod, launch_process

RECORD = "W, T = os.environ['WORK'], os.environ['TMPD']\nopen(W + '/order.txt', 'a').write(sys.argv[1] + '\\n')"


def container(name: str, code: str, *args: str, **extra: Any) -> dict[str, Any]:
    """A template running ``python -c CODE ARGS``; /work is the test's directory. The code
    finds /work and /tmp through $WORK and $TMPD (the runner maps paths in args and env)."""
    return {
        "name": name,
        **extra,
        "container": {
            "image": "python:3.11",
            "command": ["python", "-c", code],
            "args": list(args),
            "env": [{"name": "WORK", "value": "/work"}, {"name": "TMPD", "value": "/tmp"}],
            "volumeMounts": [{"name": "work", "mountPath": "/work"}],
        },
    }


def step_code(body: str) -> str:
    """Code that records its name (argv[1]) in /work/order.txt, then runs ``body``."""
    return f"import os, pathlib, sys, json, time, signal\n{RECORD}\n{body}"


def workflow(
    templates: list[dict[str, Any]],
    *,
    entry: str = "main",
    on_exit: str | None = "bye",
    params: list[dict[str, Any]] | None = None,
    **spec: Any,
) -> dict[str, Any]:
    bye = container(
        "bye",
        step_code("pathlib.Path(W + '/status.txt').write_text(sys.argv[2])"),
        "bye",
        "{{workflow.status}}",
    )
    s: dict[str, Any] = {
        "entrypoint": entry,
        "templates": [*templates, bye],
        "arguments": {"parameters": params or []},
        **spec,
    }
    if on_exit:
        s["onExit"] = "exit-handler"
        s["templates"].append(
            {"name": "exit-handler", "steps": [[{"name": "bye", "template": "bye"}]]}
        )
    return {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "WorkflowTemplate",
        "metadata": {"name": "t"},
        "spec": s,
    }


def steps(name: str, *groups: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    return {"name": name, "steps": list(groups), **extra}


def run(
    manifest: dict[str, Any],
    tmp_path: Path,
    events: list[tuple[str, str]] | None = None,
    **params: str,
) -> Any:
    opts = EngineOptions(
        workflow_name="wf-1",
        parameters=params,
        volumes={"work": tmp_path},
        pods_dir=tmp_path / "pods",
        backoff_scale=0.01,
    )
    cb = (lambda step, status, info: events.append((step, status))) if events is not None else None
    return WorkflowEngine(manifest, opts, cb).run()


def order(tmp_path: Path) -> list[str]:
    f = tmp_path / "order.txt"
    return f.read_text().split() if f.exists() else []


RETRY_75 = {
    "limit": "3",
    "retryPolicy": "Always",
    "backoff": {"duration": "1s", "factor": 2},
    "expression": "lastRetry.exitCode == '75' || (lastRetry.exitCode == '-1' && "
    "lastRetry.message contains 'pod deleted')",
}


def counter_code(then: str) -> str:
    """Counts attempts in /work/n.txt; ``then`` decides the exit from ``n``."""
    return step_code(
        "f = pathlib.Path(W + '/n.txt'); n = int(f.read_text()) + 1 if f.exists() "
        f"else 1; f.write_text(str(n))\n{then}"
    )


def test_steps_parameters_outputs_and_raw_artifacts(tmp_path: Path) -> None:
    produce = container(
        "produce",
        step_code(
            "note = pathlib.Path(T + '/inputs/note.txt').read_text()\n"
            "os.makedirs(T + '/outputs', exist_ok=True)\n"
            "pathlib.Path(sys.argv[2]).write_text(json.dumps({'note': note, "
            "'run': sys.argv[3]}))"
        ),
        "produce",
        "/tmp/outputs/doc.json",
        "{{workflow.name}}",
        inputs={
            "artifacts": [
                {
                    "name": "note",
                    "path": "/tmp/inputs/note.txt",
                    "raw": {"data": "{{workflow.parameters.greeting}}"},
                }
            ]
        },
        outputs={"parameters": [{"name": "doc", "valueFrom": {"path": "/tmp/outputs/doc.json"}}]},
    )
    consume = container(
        "consume",
        step_code(
            "pathlib.Path(W + '/got.json').write_text(sys.argv[2].split('=', 1)[1])\n"
            "assert not pathlib.Path(T + '/outputs/doc.json').exists()"
        ),
        "consume",
        "doc={{inputs.parameters.doc}}",
        inputs={"parameters": [{"name": "doc"}]},
    )
    main = steps(
        "main",
        [{"name": "produce", "template": "produce"}],
        [
            {
                "name": "consume",
                "template": "consume",
                "arguments": {
                    "parameters": [
                        {"name": "doc", "value": "{{steps.produce.outputs.parameters.doc}}"}
                    ]
                },
            }
        ],
    )
    m = workflow([produce, consume, main], params=[{"name": "greeting", "value": "hello"}])
    result = run(m, tmp_path, greeting="hi there")
    assert result.phase == "Succeeded"
    assert order(tmp_path) == ["produce", "consume", "bye"]
    assert json.loads((tmp_path / "got.json").read_text()) == {"note": "hi there", "run": "wf-1"}
    assert (tmp_path / "status.txt").read_text() == "Succeeded"
    produce_node = result.nodes[0]
    assert produce_node.outputs["doc"].startswith("{")
    assert Path(produce_node.attempts[0].pod_dir, "tmp", "outputs", "doc.json").exists()


def test_exit_75_is_retried_with_backoff_until_success(tmp_path: Path) -> None:
    flaky = container(
        "flaky", counter_code("sys.exit(75 if n < 3 else 0)"), "flaky", retryStrategy=RETRY_75
    )
    events: list[tuple[str, str]] = []
    result = run(
        workflow([flaky, steps("main", [{"name": "flaky", "template": "flaky"}])]), tmp_path, events
    )
    assert result.phase == "Succeeded"
    node = result.nodes[0]
    assert [a.exit_code for a in node.attempts] == [75, 75, 0]
    assert events.count(("flaky", "requeued")) == 2
    assert len({a.pod_dir for a in node.attempts}) == 3  # each attempt its own pod


def test_other_exit_codes_are_not_retried_and_exit_handler_sees_failure(tmp_path: Path) -> None:
    bad = container("bad", counter_code("sys.exit(1)"), "bad", retryStrategy=RETRY_75)
    after = container("after", step_code(""), "after")
    main = steps(
        "main", [{"name": "bad", "template": "bad"}], [{"name": "after", "template": "after"}]
    )
    result = run(workflow([bad, after, main]), tmp_path)
    assert result.phase == "Failed"
    assert [a.exit_code for a in result.nodes[0].attempts] == [1]
    assert order(tmp_path) == ["bad", "bye"]  # the step after the failure never ran
    assert (tmp_path / "status.txt").read_text() == "Failed"


def test_retry_limit_caps_attempts(tmp_path: Path) -> None:
    rs = {**RETRY_75, "limit": "{{workflow.parameters.retries}}"}
    always = container("always", counter_code("sys.exit(75)"), "always", retryStrategy=rs)
    m = workflow(
        [always, steps("main", [{"name": "always", "template": "always"}])],
        params=[{"name": "retries", "value": "2"}],
    )
    result = run(m, tmp_path)
    assert result.phase == "Failed"
    assert [a.exit_code for a in result.nodes[0].attempts] == [75, 75, 75]


def run_with(manifest: dict[str, Any], tmp_path: Path, **options: Any) -> Any:
    opts = EngineOptions(
        workflow_name="wf-1",
        volumes={"work": tmp_path},
        pods_dir=tmp_path / "pods",
        backoff_scale=0.01,
        **options,
    )
    engine = WorkflowEngine(manifest, opts)
    return engine, engine.run()


def test_sigkill_inside_the_pod_is_exit_137_not_node_loss(tmp_path: Path) -> None:
    """Argo sees a container killed in its pod (SIGKILL, the OOM killer) as exit 137, phase
    Failed: the preemption retry expression must not retry it (the old runner called it
    node loss and retried)."""
    code = counter_code("if n == 1: os.kill(os.getpid(), signal.SIGKILL)\nsys.exit(0)")
    lost = container("lost", code, "lost", retryStrategy=RETRY_75)
    result = run(workflow([lost, steps("main", [{"name": "lost", "template": "lost"}])]), tmp_path)
    assert result.phase == "Failed"
    (first,) = result.nodes[0].attempts
    assert (first.exit_code, first.phase) == (137, "Failed")
    assert "retryStrategy.expression evaluated to false" in result.nodes[0].message


def test_node_loss_fault_point_is_error_pod_deleted_without_outputs(tmp_path: Path) -> None:
    code = counter_code(
        "os.makedirs(T + '/outputs', exist_ok=True)\n"
        "pathlib.Path(T + '/outputs/o.txt').write_text(str(n))"
    )
    lost = container(
        "lost",
        code,
        "lost",
        retryStrategy=RETRY_75,
        outputs={"parameters": [{"name": "o", "valueFrom": {"path": "/tmp/outputs/o.txt"}}]},
    )
    m = workflow([lost, steps("main", [{"name": "lost", "template": "lost"}])])
    _, result = run_with(m, tmp_path, node_loss=(NodeLoss("lost", attempt=0, after_s=60),))
    assert result.phase == "Succeeded"
    first, second = result.nodes[0].attempts
    assert (first.exit_code, first.phase, first.message) == (None, "Error", "pod deleted")
    assert second.exit_code == 0
    assert result.nodes[0].outputs == {"o": "1"}  # the lost pod's run never counted


def test_retry_policy_on_failure_does_not_retry_node_loss(tmp_path: Path) -> None:
    rs = {"limit": "2", "retryPolicy": "OnFailure"}
    lost = container("lost", counter_code("sys.exit(0)"), "lost", retryStrategy=rs)
    m = workflow([lost, steps("main", [{"name": "lost", "template": "lost"}])])
    _, result = run_with(m, tmp_path, node_loss=(NodeLoss("lost"),))
    assert result.phase == "Failed"
    assert len(result.nodes[0].attempts) == 1


def test_max_duration_counts_from_the_first_attempt(tmp_path: Path) -> None:
    """operator.go processNodeRetries: maxDuration's deadline is the first attempt's start
    plus maxDuration; a node lost after (virtual) 31 minutes under maxDuration 30m is never
    retried."""
    rs = {**RETRY_75, "backoff": {"duration": "1s", "factor": 2, "maxDuration": "30m"}}
    t = container("t", counter_code("sys.exit(0)"), "t", retryStrategy=rs)
    m = workflow([t, steps("main", [{"name": "t", "template": "t"}])])
    _, result = run_with(m, tmp_path, node_loss=(NodeLoss("t", 0, after_s=31 * 60),))
    assert result.phase == "Failed"
    assert len(result.nodes[0].attempts) == 1
    assert result.nodes[0].message == "Max duration limit exceeded"


def test_backoff_cap_bounds_the_wait_not_the_retries(tmp_path: Path) -> None:
    rs = {**RETRY_75, "backoff": {"duration": "1s", "factor": 2, "cap": "2s"}}
    t = container("t", counter_code("sys.exit(0)"), "t", retryStrategy=rs)
    m = workflow([t, steps("main", [{"name": "t", "template": "t"}])])
    waits: list[float] = []
    losses = tuple(NodeLoss("t", i, after_s=31 * 60) for i in range(3))
    opts = EngineOptions(
        workflow_name="wf-1",
        volumes={"work": tmp_path},
        pods_dir=tmp_path / "pods",
        backoff_scale=0.01,
        node_loss=losses,
    )
    result = WorkflowEngine(
        m, opts, lambda _s, st, info: waits.append(info["wait_s"]) if st == "requeued" else None
    ).run()
    assert result.phase == "Succeeded"
    assert [a.phase for a in result.nodes[0].attempts] == ["Error"] * 3 + ["Succeeded"]
    assert waits == [1.0, 2.0, 2.0]  # 1s * 2^n, capped at 2s


def test_missing_variable_in_when_hangs_until_the_workflow_deadline(tmp_path: Path) -> None:
    """From Argo v3.7.11 / v4.0.2 a step whose `when` names a variable that does not exist
    (the output of a step that failed before writing it) is requeued until it appears: the
    workflow hangs until its deadline; the exit handler still runs. (The lint refuses the
    same read after a step that continues on Error: there it is certain.)"""
    t = container(
        "t",
        step_code("sys.exit(1)"),
        "t",
        outputs={"parameters": [{"name": "o", "valueFrom": {"path": "/tmp/o.txt"}}]},
    )
    after = container("after", step_code(""), "after")
    main = steps(
        "main",
        [{"name": "t", "template": "t", "continueOn": {"failed": True}}],
        [{"name": "after", "template": "after", "when": "'{{steps.t.outputs.parameters.o}}' == 'x'"}],
    )  # fmt: skip
    m = workflow([t, after, main], activeDeadlineSeconds=3600)
    engine, result = run_with(m, tmp_path)
    assert result.phase == "Failed"
    assert "activeDeadlineSeconds exceeded" in result.message
    assert "requeues this step" in result.message
    assert engine.now() - time.monotonic() >= 3600 - 5  # the clock went to the deadline
    assert order(tmp_path) == ["t", "bye"]  # `after` never ran; the exit handler did


def test_lint_refuses_exit_code_after_a_step_that_continues_on_error(tmp_path: Path) -> None:
    t = container("t", step_code(""), "t")
    after = container("after", step_code(""), "after")
    main = steps(
        "main",
        [{"name": "t", "template": "t", "continueOn": {"error": True}}],
        [{"name": "after", "template": "after", "when": "{{steps.t.exitCode}} == 75"}],
    )
    with pytest.raises(ManifestError, match="requeues this step forever"):
        run(workflow([t, after, main]), tmp_path)
    assert order(tmp_path) == []  # refused before anything ran


def test_output_artifacts_need_an_artifact_repository(tmp_path: Path) -> None:
    t = container(
        "t",
        step_code("pathlib.Path(T + '/rec.json').write_text('{}')"),
        "t",
        outputs={"artifacts": [{"name": "rec", "path": "/tmp/rec.json"}]},
    )
    m = workflow([t, steps("main", [{"name": "t", "template": "t"}])])
    with pytest.raises(ManifestError, match="needs an artifact repository"):
        run(m, tmp_path)
    _, result = run_with(m, tmp_path, artifact_repository=True)
    assert result.phase == "Succeeded"


def test_template_deadline_stops_a_step_and_teardown_still_runs(tmp_path: Path) -> None:
    slow = container(
        "slow",
        step_code("time.sleep(120)"),
        "slow",
        activeDeadlineSeconds="1",
        retryStrategy=RETRY_75,
    )
    result = run(workflow([slow, steps("main", [{"name": "slow", "template": "slow"}])]), tmp_path)
    assert result.phase == "Failed"
    node = result.nodes[0]
    assert len(node.attempts) == 1 and "activeDeadlineSeconds" in node.message
    assert order(tmp_path) == ["slow", "bye"]


def test_workflow_deadline_fails_the_run_but_not_the_exit_handler(tmp_path: Path) -> None:
    slow = container("slow", step_code("time.sleep(120)"), "slow")
    never = container("never", step_code(""), "never")
    main = steps(
        "main", [{"name": "slow", "template": "slow"}], [{"name": "never", "template": "never"}]
    )
    result = run(workflow([slow, never, main], activeDeadlineSeconds=1), tmp_path)
    assert result.phase == "Failed"
    assert result.exit_handler_phase == "Succeeded"
    assert order(tmp_path) == ["slow", "bye"]


def test_when_and_continue_on(tmp_path: Path) -> None:
    fails = container("fails", step_code("sys.exit(3)"), "fails")
    on_fail = container("on-fail", step_code(""), "on-fail")
    skipped = container("skipped", step_code(""), "skipped")
    main = steps(
        "main",
        [{"name": "fails", "template": "fails", "continueOn": {"failed": True}}],
        [
            {
                "name": "on-fail",
                "template": "on-fail",
                "when": "'{{steps.fails.status}}' == 'Failed' && {{steps.fails.exitCode}} == 3",
            },
            {"name": "skipped", "template": "skipped", "when": "{{steps.fails.exitCode}} == 0"},
        ],
    )
    result = run(workflow([fails, on_fail, skipped, main]), tmp_path)
    assert result.phase == "Succeeded"
    assert order(tmp_path) == ["fails", "on-fail", "bye"]


def test_dag_runs_in_dependency_order(tmp_path: Path) -> None:
    a, b, c = (container(n, step_code(""), n) for n in "abc")
    dag = {
        "name": "main",
        "dag": {
            "tasks": [
                {"name": "c", "template": "c", "dependencies": ["a", "b"]},
                {"name": "b", "template": "b", "dependencies": ["a"]},
                {"name": "a", "template": "a"},
            ]
        },
    }
    result = run(workflow([a, b, c, dag]), tmp_path)
    assert result.phase == "Succeeded"
    assert order(tmp_path) == ["a", "b", "c", "bye"]


def _call(m: dict[str, Any], template: dict[str, Any]) -> None:
    """Add ``template`` and call it from main's second step."""
    m["spec"]["templates"].append(template)
    main = next(t for t in m["spec"]["templates"] if t["name"] == "main")
    main["steps"].append([{"name": "then", "template": template["name"]}])


@pytest.mark.parametrize(
    ("mutate", "feature"),
    [
        # withItems and withParam run (test_fanout.py); withSequence is refused
        (
            lambda m: m["spec"]["templates"][1]["steps"][0][0].update(withSequence={"count": "2"}),
            "withSequence",
        ),
        (
            lambda m: _call(m, {"name": "s", "script": {"image": "x", "source": "print(1)"}}),
            "script",
        ),
        (
            lambda m: m["spec"]["templates"][0]["container"].update(
                envFrom=[{"secretRef": {"name": "creds"}}]
            ),
            "envFrom",
        ),
        (
            lambda m: _call(
                m, {"name": "r", "resource": {"action": "patch", "mergeStrategy": "json"}}
            ),
            "mergeStrategy",
        ),
    ],
)
def test_unsupported_feature_is_refused_before_anything_runs(
    tmp_path: Path, mutate: Any, feature: str
) -> None:
    first = container("first", step_code(""), "first")
    m = workflow([first, steps("main", [{"name": "first", "template": "first"}])])
    mutate(m)
    with pytest.raises(UnsupportedFeature, match=f"Argo feature '{feature}'"):
        run(m, tmp_path)
    assert order(tmp_path) == []  # nothing ran, not even the exit handler
    assert not (tmp_path / "pods").exists()


def test_lint_problems_and_missing_parameters_are_refused(tmp_path: Path) -> None:
    first = container("first", step_code(""), "first", "{{workflow.parameters.nope}}")
    m = workflow([first, steps("main", [{"name": "first", "template": "first"}])])
    with pytest.raises(ManifestError, match="'nope' is not declared"):
        run(m, tmp_path)
    m = workflow(
        [
            container("first", step_code(""), "first"),
            steps("main", [{"name": "first", "template": "first"}]),
        ],
        params=[{"name": "needed"}],
    )
    with pytest.raises(ManifestError, match="'needed' has no value"):
        run(m, tmp_path)
    assert order(tmp_path) == []


def test_a_parameter_outside_its_enum_is_refused_as_argo_refuses_it(tmp_path: Path) -> None:
    """Argo refuses the submission (workflow/validate validateArgumentsValues) when a
    parameter's value is not in its enum (burst-train's `priority`): the runner too, before
    anything runs; a value in the enum runs."""
    m = workflow(
        [
            container("first", step_code(""), "first"),
            steps("main", [{"name": "first", "template": "first"}]),
        ],
        params=[{"name": "priority", "value": "normal", "enum": ["low", "normal"]}],
    )
    with pytest.raises(ManifestError, match="'priority' is 'urgent', not one of its enum"):
        run(m, tmp_path, priority="urgent")
    assert order(tmp_path) == []
    run(m, tmp_path, priority="low")
    assert order(tmp_path)[0] == "first"  # then the exit handler


def test_branch_switched_off_by_a_workflow_parameter_is_not_checked(tmp_path: Path) -> None:
    """The multi-node branch (a resource template) of a one-node run is never reached, so
    the runner accepts the manifest; with nodes=2 it refuses it, naming the kind."""
    one = container("one", step_code(""), "one")
    gang = {"name": "gang", "resource": {"action": "create", "manifest": "kind: Job"}}
    main = steps(
        "main",
        [
            {"name": "one", "template": "one", "when": "{{workflow.parameters.nodes}} == 1"},
            {"name": "gang", "template": "gang", "when": "{{workflow.parameters.nodes}} > 1"},
        ],
    )
    m = workflow([one, gang, main], params=[{"name": "nodes", "value": "1"}])
    assert run(m, tmp_path).phase == "Succeeded"
    assert order(tmp_path) == ["one", "bye"]
    with pytest.raises(ManifestError, match="a resource of kind 'Job'"):
        run(m, tmp_path, nodes="2")
    assert order(tmp_path) == ["one", "bye"]


def test_unresolvable_reference_errors_the_node_and_teardown_still_runs(tmp_path: Path) -> None:
    """A step reading the output of a step that failed (continueOn) before writing it: Argo
    (>= v3.7.11 / v4.0.2) requeues it forever; the local run says so, and the exit handler
    still runs."""
    fails = container(
        "fails",
        step_code("sys.exit(1)"),
        "fails",
        outputs={"parameters": [{"name": "doc", "valueFrom": {"path": "/tmp/outputs/d.json"}}]},
    )
    reads = container(
        "reads", step_code(""), "reads", "{{inputs.parameters.doc}}",
        inputs={"parameters": [{"name": "doc"}]},
    )  # fmt: skip
    main = steps(
        "main",
        [{"name": "fails", "template": "fails", "continueOn": {"failed": True}}],
        [{"name": "reads", "template": "reads", "arguments": {"parameters": [
            {"name": "doc", "value": "{{steps.fails.outputs.parameters.doc}}"}]}}],
    )  # fmt: skip
    result = run(workflow([fails, reads, main]), tmp_path)
    assert result.phase == "Failed"
    assert "steps.fails.outputs.parameters.doc" in result.message
    assert "hang forever" in result.message
    assert order(tmp_path) == ["fails", "bye"]
    assert result.exit_handler_phase == "Succeeded"


def test_sigterm_stops_the_run_like_argo_stop_and_the_exit_handler_runs(tmp_path: Path) -> None:
    """A real SIGTERM to this process while a step runs: the step's process is stopped, no
    further step starts, the exit handler runs, and run() returns a result."""
    import os
    import signal
    import threading
    import time

    slow = container(
        "slow", step_code("open(W + '/started', 'w').close()\ntime.sleep(120)"), "slow"
    )
    never = container("never", step_code(""), "never")
    main = steps(
        "main", [{"name": "slow", "template": "slow"}], [{"name": "never", "template": "never"}]
    )

    def stop_when_started() -> None:
        while not (tmp_path / "started").exists():
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=stop_when_started, daemon=True)
    watcher.start()
    before = signal.getsignal(signal.SIGTERM)
    result = run(workflow([slow, never, main]), tmp_path)
    watcher.join(timeout=30)
    assert result.phase == "Failed"
    assert "stopped by signal 15" in result.message
    assert order(tmp_path) == ["slow", "bye"]
    assert (tmp_path / "status.txt").read_text() == "Failed"
    assert result.nodes[0].message.startswith("stopped")
    assert signal.getsignal(signal.SIGTERM) is before  # handlers restored


def _stop_while_launching(
    tmp_path: Path, main: dict[str, Any], hold: Callable[[WorkflowEngine], None]
) -> tuple[Any, int, bool]:
    """Run ``main`` with a launcher that sends this process SIGTERM while it starts the pod
    of step "a"; ``hold`` decides what the launcher does before it returns. Returns the
    result, the exit code of a's process and whether that process outlived the run."""
    import os
    import signal

    tmp_path.mkdir()
    started: list[subprocess.Popen[bytes]] = []
    engine: WorkflowEngine | None = None

    def launch(pod: Pod, log: IO[bytes]) -> subprocess.Popen[bytes]:
        proc = launch_process(pod, log)
        if pod.step == "a":
            started.append(proc)
            os.kill(os.getpid(), signal.SIGTERM)
            assert engine is not None
            hold(engine)
        return proc

    a = container("a", step_code("time.sleep(3)"), "a")
    b = container("b", step_code("time.sleep(1)"), "b")
    opts = EngineOptions(
        workflow_name="wf-1", volumes={"work": tmp_path}, pods_dir=tmp_path / "pods", launch=launch
    )
    engine = WorkflowEngine(workflow([a, b, main]), opts)
    result = engine.run()
    (proc,) = started
    outlived = proc.poll() is None
    if outlived:  # the bug: end it here, the test then fails
        proc.kill()
        proc.wait()
    return result, proc.returncode, outlived


def test_stop_signal_during_a_pods_start_stops_it(tmp_path: Path) -> None:
    """SIGTERM to the runner while a pod starts. (1) The main thread starts it (a lone step):
    the signal is held until the process is registered, then the pod is stopped (raised
    inside the launch, it orphaned the pod). (2) A branch thread starts it (a step group of
    two) after the stop took its snapshot of the live pods: the pod sees the stop and stops
    itself (it ran to its end and was recorded Succeeded)."""

    def hold_main(_engine: WorkflowEngine) -> None:
        time.sleep(0.2)  # the handler runs here, in the main thread

    main = steps("main", [{"name": "a", "template": "a"}], [{"name": "b", "template": "b"}])
    result, _, outlived = _stop_while_launching(tmp_path / "lone", main, hold_main)
    assert not outlived, "the pod outlived the stop"
    assert result.phase == "Failed" and "stopped by signal 15" in result.message
    assert [(n.step, n.phase) for n in result.nodes] == [("a", "Failed"), ("bye", "Succeeded")]
    assert result.nodes[0].message.startswith("stopped")

    def hold_branch(engine: WorkflowEngine) -> None:
        while not engine._stop_event.is_set():  # the main thread took the stop
            time.sleep(0.01)
        time.sleep(0.3)  # ... and stopped the live pods it knew of

    group = steps("main", [{"name": "a", "template": "a"}, {"name": "b", "template": "b"}])
    result, code, outlived = _stop_while_launching(tmp_path / "group", group, hold_branch)
    nodes = {n.step: n for n in result.nodes}
    assert result.phase == "Failed" and "stopped by signal 15" in result.message
    assert (nodes["a"].phase, nodes["a"].message) == ("Failed", "stopped: the run was stopped")
    assert not outlived and code < 0  # stopped, not run to its end


def test_stop_signal_while_a_group_starts_its_branches_waits_for_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """SIGTERM to the runner while its main thread starts a step group's branches (here: as
    it starts the second, the first one's pod running): the stop is held until every branch
    has started, then stops them and waits for them. Raised between two starts, it left the
    first branch unwaited for: the exit handler and the report went on beside its pod, the
    node still "Pending" (CI run ciI)."""
    import os
    import signal
    import threading

    real = threading.Thread
    launched: dict[str, subprocess.Popen[bytes]] = {}
    a_running = threading.Event()
    starts = [0]

    def launch(pod: Pod, log: IO[bytes]) -> subprocess.Popen[bytes]:
        proc = launch_process(pod, log)
        launched[pod.step] = proc
        if pod.step == "a":
            a_running.set()
        return proc

    class SignalAtTheSecondBranch(real):
        def start(self) -> None:
            target = getattr(self, "_target", None)
            if getattr(target, "__name__", "") == "one":  # a branch of a step group
                starts[0] += 1
                if starts[0] == 2:
                    assert a_running.wait(30)
                    os.kill(os.getpid(), signal.SIGTERM)  # handled here, in the main thread
            super().start()

    monkeypatch.setattr(threading, "Thread", SignalAtTheSecondBranch)
    a = container("a", step_code("time.sleep(30)"), "a")
    b = container("b", step_code("time.sleep(1)"), "b")
    group = steps("main", [{"name": "a", "template": "a"}, {"name": "b", "template": "b"}])
    opts = EngineOptions(
        workflow_name="wf-1", volumes={"work": tmp_path}, pods_dir=tmp_path / "pods", launch=launch
    )
    try:
        result = WorkflowEngine(workflow([a, b, group]), opts).run()
        outlived = launched["a"].poll() is None
    finally:
        for proc in launched.values():
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert starts[0] == 2
    assert not outlived, "a's pod outlived the run"
    assert result.phase == "Failed" and "stopped by signal 15" in result.message
    nodes = {n.step: n for n in result.nodes}
    assert (nodes["a"].phase, nodes["a"].message) == ("Failed", "stopped: the run was stopped")
    assert "b" not in nodes or nodes["b"].phase == "Failed"  # never started, or stopped
    assert nodes["bye"].phase == "Succeeded"
    assert (tmp_path / "status.txt").read_text() == "Failed"


def test_output_artifacts_are_kept_even_when_the_step_fails(tmp_path: Path) -> None:
    """Output artifacts land in artifacts/<step>/<name>: the local artifact repository
    (given one: EngineOptions.artifact_repository). A
    failed step's artifact is kept too (the decision record of a refused preflight)."""
    write_then_exit = step_code(
        "os.makedirs(T + '/outputs', exist_ok=True)\n"
        "pathlib.Path(T + '/outputs/rec.json').write_text(json.dumps({'v': sys.argv[2]}))\n"
        "sys.exit(int(sys.argv[2]))"
    )
    outputs = {
        "artifacts": [
            {
                "name": "record",
                "path": "/tmp/outputs/rec.json",
                "archive": {"none": {}},
                "optional": True,
            }
        ]
    }
    ok = container("ok", write_then_exit, "ok", "0", outputs=outputs)
    bad = container("bad", write_then_exit, "bad", "3", outputs=outputs)
    missing = container(
        "missing",
        step_code("pass"),
        "missing",
        outputs={"artifacts": [{"name": "record", "path": "/tmp/outputs/none.json"}]},
    )
    m = workflow(
        [
            ok,
            bad,
            missing,
            steps(
                "main",
                [{"name": "ok", "template": "ok"}],
                [{"name": "missing", "template": "missing"}],
            ),
        ]
    )
    _, result = run_with(m, tmp_path, artifact_repository=True)
    assert json.loads((tmp_path / "artifacts" / "ok" / "record.json").read_text()) == {"v": "0"}
    assert result.phase != "Succeeded"  # a non-optional artifact that was not written fails
    assert "output artifact 'record'" in next(
        n.message for n in result.nodes if n.step == "missing"
    )

    m = workflow([bad, steps("main", [{"name": "bad", "template": "bad"}])])
    (tmp_path / "second").mkdir()
    run_with(m, tmp_path / "second", artifact_repository=True)
    kept = tmp_path / "second" / "artifacts" / "bad" / "record.json"
    assert json.loads(kept.read_text()) == {"v": "3"}


def test_a_service_account_resource_is_recorded_and_other_kinds_are_refused(
    tmp_path: Path,
) -> None:
    sa = {
        "name": "sa",
        "inputs": {"parameters": [{"name": "role"}]},
        "resource": {
            "action": "apply",
            "setOwnerReference": True,
            "manifest": "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n"
            "  name: burst-{{workflow.name}}\n  annotations:\n"
            "    eks.amazonaws.com/role-arn: '{{inputs.parameters.role}}'\n",
        },
    }
    main = steps(
        "main",
        [{"name": "sa", "template": "sa", "arguments": {"parameters": [
            {"name": "role", "value": "arn:aws:iam::1:role/r"}]}}],
    )  # fmt: skip
    result = run(workflow([sa, main]), tmp_path)
    assert result.phase == "Succeeded"
    (recorded,) = (tmp_path / "pods").glob("*-sa/manifest.yaml")
    doc = yaml.safe_load(recorded.read_text())
    assert doc["metadata"]["name"] == "burst-wf-1"
    assert doc["metadata"]["annotations"]["eks.amazonaws.com/role-arn"] == "arn:aws:iam::1:role/r"
    job = {**sa, "resource": {**sa["resource"], "manifest": "apiVersion: batch/v1\nkind: Job\n"}}
    with pytest.raises(ManifestError, match="kind 'Job'"):
        run(workflow([job, main]), tmp_path)


def test_node_loss_is_armed_by_its_setting(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The named fault point (burst/faults.py node_loss): BURST_NODE_LOSS alone arms it."""
    lost = container("lost", counter_code("sys.exit(0)"), "lost", retryStrategy=RETRY_75)
    m = workflow([lost, steps("main", [{"name": "lost", "template": "lost"}])])
    monkeypatch.setenv("BURST_NODE_LOSS", f"lost@0+{31 * 60}")
    engine, result = run_with(m, tmp_path)
    assert result.phase == "Succeeded"
    first, second = result.nodes[0].attempts
    assert (first.exit_code, first.phase, first.message) == (None, "Error", "pod deleted")
    assert second.exit_code == 0
    assert engine.now() - time.monotonic() > 31 * 60 - 1  # the loss's virtual half hour
    monkeypatch.setenv("BURST_NODE_LOSS", "lost@first")
    with pytest.raises(BadInputError, match="BURST_NODE_LOSS: 'lost@first'"):
        run_with(m, tmp_path)
