"""Step groups run in parallel, and withItems / withParam fan-out, as Argo runs them
(workflow/controller/steps.go executeStepGroup, expandStep; operator.go processItem,
generateNodeName, processAggregateNodeOutputs; node_counters.go for ``parallelism``).

Every container is a real process. Concurrency is proven by the processes themselves (each
waits, with a bound, for its sibling to have started: run one after the other, the first
gives up and fails) and by the recorded start and end of each attempt, never by a duration.
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from pathlib import Path

import pytest

from burst.runner import fanout
from burst.runner.engine import PodNode, node_key

from .test_engine import container, order, run, step_code, steps, workflow

#: ``sys.argv[1]`` records itself, marks itself started, then waits (at most 60 s) for the
#: marker of ``sys.argv[2]``: it exits 0 only if that sibling started while it was running.
MEET = step_code(
    "pathlib.Path(W + '/started-' + sys.argv[1]).touch()\n"
    "end = time.monotonic() + 60\n"
    "while not pathlib.Path(W + '/started-' + sys.argv[2]).exists():\n"
    "    if time.monotonic() > end: sys.exit(1)\n"
    "    time.sleep(0.02)\n"
)


def _interval(node: PodNode) -> tuple[float, float]:
    (a,) = node.attempts
    assert a.started_at is not None
    return a.started_at, a.started_at + a.seconds


def _overlap(a: PodNode, b: PodNode) -> bool:
    (s1, e1), (s2, e2) = _interval(a), _interval(b)
    return max(s1, s2) < min(e1, e2)


def test_a_step_groups_steps_run_at_the_same_time(tmp_path: Path) -> None:
    left = container("left", MEET, "left", "right")
    right = container("right", MEET, "right", "left")
    after = container("after", step_code(""), "after")
    main = steps(
        "main",
        [{"name": "left", "template": "left"}, {"name": "right", "template": "right"}],
        [{"name": "after", "template": "after"}],
    )
    result = run(workflow([left, right, after, main]), tmp_path)
    assert result.phase == "Succeeded", result.message
    by = {n.step: n for n in result.nodes}
    assert by["left"].exit_code == by["right"].exit_code == 0
    assert _overlap(by["left"], by["right"])
    # the next group waits for the whole group
    assert _interval(by["after"])[0] >= max(_interval(by["left"])[1], _interval(by["right"])[1])
    assert order(tmp_path)[-2:] == ["after", "bye"]


def test_with_param_expands_one_parallel_step_per_item(tmp_path: Path) -> None:
    """``{{item}}`` in the arguments, nodes named ``name(i:item)``, every item at once, the
    outputs aggregated for the next group as JSON lists in item order."""
    echo = container(
        "echo",
        step_code(
            "os.makedirs(T + '/outputs', exist_ok=True)\n"
            "pathlib.Path(T + '/outputs/out.txt').write_text('got-' + sys.argv[1])\n"
            + MEET.split("\n", 2)[2]
        ),
        "{{inputs.parameters.region}}",
        "{{inputs.parameters.peer}}",
        inputs={"parameters": [{"name": "region"}, {"name": "peer"}]},
        outputs={"parameters": [{"name": "out", "valueFrom": {"path": "/tmp/outputs/out.txt"}}]},
    )
    gather = container(
        "gather",
        step_code(
            "pathlib.Path(W + '/gathered.json').write_text(sys.argv[2] + '\\n' + sys.argv[3])"
        ),
        "gather",
        "{{inputs.parameters.all}}",
        "{{inputs.parameters.outs}}",
        inputs={"parameters": [{"name": "all"}, {"name": "outs"}]},
    )
    main = steps(
        "main",
        [
            {
                "name": "fan",
                "template": "echo",
                "withParam": "{{workflow.parameters.regions}}",
                "arguments": {
                    "parameters": [
                        {"name": "region", "value": "{{item.name}}"},
                        {"name": "peer", "value": "{{item.peer}}"},
                    ]
                },
            }
        ],
        [
            {
                "name": "gather",
                "template": "gather",
                "arguments": {
                    "parameters": [
                        {"name": "all", "value": "{{steps.fan.outputs.parameters}}"},
                        {"name": "outs", "value": "{{steps.fan.outputs.parameters.out}}"},
                    ]
                },
            }
        ],
    )
    regions = [{"name": "eu", "peer": "ap"}, {"name": "ap", "peer": "eu"}]
    m = workflow([echo, gather, main], params=[{"name": "regions"}])
    result = run(m, tmp_path, regions=json.dumps(regions))
    assert result.phase == "Succeeded", result.message
    fanned = [n for n in result.nodes if n.template == "echo"]
    assert sorted(n.step for n in fanned) == ["fan(0:name:eu,peer:ap)", "fan(1:name:ap,peer:eu)"]
    assert all(n.key == n.step for n in fanned)  # unique: logs and pods are named by it
    assert _overlap(*fanned)
    all_, outs = (tmp_path / "gathered.json").read_text().split("\n")
    assert json.loads(all_) == [{"out": "got-eu"}, {"out": "got-ap"}]
    assert outs == '["got-eu", "got-ap"]'


def test_when_is_evaluated_per_item_and_parallelism_bounds_the_children(tmp_path: Path) -> None:
    """``when`` reads ``{{item}}`` (a skipped item runs nothing); the template's
    ``parallelism: 1`` runs the other items one at a time (their recorded attempts never
    overlap)."""
    say = container(
        "say",
        step_code(""),
        "{{inputs.parameters.v}}",
        inputs={"parameters": [{"name": "v"}]},
    )
    main = steps(
        "main",
        [
            {
                "name": "say",
                "template": "say",
                "withItems": ["a", "b", 3, True],
                "when": "'{{item}}' != 'b'",
                "arguments": {"parameters": [{"name": "v", "value": "{{item}}"}]},
            }
        ],
        parallelism=1,
    )
    result = run(workflow([say, main]), tmp_path)
    assert result.phase == "Succeeded", result.message
    ran = [n for n in result.nodes if n.template == "say"]
    assert sorted(n.step for n in ran) == ["say(0:a)", "say(2:3)", "say(3:true)"]
    assert sorted(order(tmp_path)[:-1]) == ["3", "a", "true"]
    for i, a in enumerate(ran):
        for b in ran[i + 1 :]:
            assert not _overlap(a, b), (a.step, b.step)


def test_a_failed_child_fails_the_group_once_its_siblings_have_ended(tmp_path: Path) -> None:
    """Argo waits for every child of the group (no cancelling), then the first failed child
    without continueOn fails the group; the next group never starts, the exit handler runs.
    An item whose step continues on failure does not fail it."""
    fail = container(
        "fail",
        step_code("pathlib.Path(W + '/started-fail').touch()\nsys.exit(int(sys.argv[2]))"),
        "fail",
        "{{inputs.parameters.code}}",
        inputs={"parameters": [{"name": "code"}]},
    )
    slow = container("slow", MEET, "slow", "fail")  # ends only after the failing one started
    never = container("never", step_code(""), "never")
    main = steps(
        "main",
        [
            {
                "name": "tolerated",
                "template": "fail",
                "withItems": ["3"],
                "continueOn": {"failed": True},
                "arguments": {"parameters": [{"name": "code", "value": "{{item}}"}]},
            },
            {
                "name": "fails",
                "template": "fail",
                "arguments": {"parameters": [{"name": "code", "value": "7"}]},
            },
            {"name": "slow", "template": "slow"},
        ],
        [{"name": "never", "template": "never"}],
    )
    result = run(workflow([fail, slow, never, main]), tmp_path)
    assert result.phase == "Failed"
    assert result.message.startswith("child 'fails' failed"), result.message
    by = {n.step: n for n in result.nodes}
    assert by["slow"].phase == "Succeeded"  # its sibling's failure did not stop it
    assert by["tolerated(0:3)"].exit_code == 3
    assert "never" not in order(tmp_path) and order(tmp_path)[-1] == "bye"


@pytest.mark.parametrize(
    ("value", "phase", "message"),
    [
        ("[]", "Succeeded", ""),  # Skipped, empty params: the next group runs
        ('{"a": 1}', "Failed", "withParam value could not be parsed as a JSON list"),
        ("not json", "Failed", "withParam value could not be parsed as a JSON list"),
        ("[null]", "Failed", "withItems[0] expected string, number, list, or map"),
    ],
)
def test_with_param_that_is_empty_or_not_a_list(
    tmp_path: Path, value: str, phase: str, message: str
) -> None:
    say = container("say", step_code(""), "say")
    after = container("after", step_code(""), "after")
    main = steps(
        "main",
        [{"name": "fan", "template": "say", "withParam": "{{workflow.parameters.items}}"}],
        [{"name": "after", "template": "after"}],
    )
    m = workflow([say, after, main], params=[{"name": "items"}])
    result = run(m, tmp_path, items=value)
    assert result.phase == phase
    assert message in result.message
    assert "say" not in order(tmp_path) and order(tmp_path)[-1] == "bye"
    assert ("after" in order(tmp_path)) == (phase == "Succeeded")


def test_a_false_when_without_item_skips_the_step_before_its_with_param_is_read(
    tmp_path: Path,
) -> None:
    say = container("say", step_code(""), "say")
    after = container("after", step_code(""), "after")
    main = steps(
        "main",
        [
            {
                "name": "fan",
                "template": "say",
                "withParam": "{{workflow.parameters.items}}",
                "when": "'{{workflow.parameters.on}}' == 'yes'",
            }
        ],
        [{"name": "after", "template": "after"}],
    )
    m = workflow([say, after, main], params=[{"name": "items"}, {"name": "on"}])
    result = run(m, tmp_path, items="not a list", on="no")
    assert result.phase == "Succeeded", result.message
    assert order(tmp_path) == ["after", "bye"]


def test_sigterm_stops_every_parallel_branch_and_the_exit_handler_runs(tmp_path: Path) -> None:
    hold = container(
        "hold",
        step_code("pathlib.Path(W + '/started-' + sys.argv[1]).touch()\ntime.sleep(120)"),
        "{{inputs.parameters.n}}",
        inputs={"parameters": [{"name": "n"}]},
    )
    main = steps(
        "main",
        [
            {
                "name": "hold",
                "template": "hold",
                "withItems": ["a", "b"],
                "arguments": {"parameters": [{"name": "n", "value": "{{item}}"}]},
            }
        ],
    )

    def stop_when_both_started() -> None:
        end = time.monotonic() + 60
        while not all((tmp_path / f"started-{n}").exists() for n in "ab"):
            if time.monotonic() > end:
                return
            time.sleep(0.05)
        os.kill(os.getpid(), signal.SIGTERM)

    watcher = threading.Thread(target=stop_when_both_started, daemon=True)
    watcher.start()
    result = run(workflow([hold, main]), tmp_path)
    watcher.join(timeout=30)
    assert result.phase == "Failed" and "stopped by signal 15" in result.message
    held = [n for n in result.nodes if n.template == "hold"]
    assert len(held) == 2 and all(n.message.startswith("stopped") for n in held)
    assert order(tmp_path)[-1] == "bye"


def test_item_text_and_node_names_follow_argo() -> None:
    """operator.go processItem / generateNodeName, item.go Item.String."""
    it = fanout.item("s", 2, {"b": 1, "a": "x(y)"})
    assert it.name == "s(2:a:xy,b:1)"  # sorted pairs, parentheses removed
    assert it.variables == {"item": '{"a":"x(y)","b":1}', "item.a": "x(y)", "item.b": "1"}
    assert fanout.item("s", 0, ["a", 1]).name == "s(0:[a 1])"
    assert fanout.item("s", 0, ["a", 1]).variables == {"item": '["a",1]'}
    assert fanout.item("s", 1, 1.5).variables == {"item": "1.5"}
    assert node_key("main/regions(0:eu)/worker", "worker") == "regions(0:eu).worker"
    assert node_key("onExit/teardown(1:ap)", "teardown(1:ap)") == "teardown(1:ap)"
    assert node_key("main/train", "train") == "train"
