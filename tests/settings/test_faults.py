"""Fault points in one place: production code reaches test and demo hooks only by name."""

from __future__ import annotations

import ast
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from burst import faults
from burst.errors import BadInputError, InfraError, InjectedFailure
from burst.settings import Settings

REPO = Path(__file__).resolve().parents[2]
FAULT_SETTINGS = {
    "fail_at",
    "simulate_no_capacity",
    "preempt_at_steps",
    "checkpoint_fault",
    "budget_time_scale",
    "node_loss",
}


def _production_files() -> list[Path]:
    files = [p for d in ("burst",) for p in sorted((REPO / d).rglob("*.py"))]
    return [
        p for p in files if p not in (REPO / "burst" / "faults.py", REPO / "burst" / "settings.py")
    ]


def _violations(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    where = path.relative_to(REPO) if path.is_relative_to(REPO) else path
    out: list[str] = []
    for node in ast.walk(tree):
        line = f"{where}:{getattr(node, 'lineno', 0)}"
        if isinstance(node, ast.ImportFrom) and node.module == "burst.faults":
            out.append(f"{line} imports from burst.faults (use `from burst import faults`)")
        elif isinstance(node, ast.Import) and any(a.name == "burst.faults" for a in node.names):
            out.append(f"{line} imports burst.faults (use `from burst import faults`)")
        elif isinstance(node, ast.ImportFrom) and node.module in (
            "burst.preempt.demo",
            "burst.checkpoint.faults",
        ):
            out.append(f"{line} imports a retired fault module")
        elif isinstance(node, ast.Attribute):
            if isinstance(node.value, ast.Name) and node.value.id == "faults":
                if node.attr not in faults.POINTS:
                    out.append(f"{line} uses faults.{node.attr}, not a named point")
            elif node.attr in FAULT_SETTINGS and not (
                isinstance(node.value, ast.Attribute) and node.value.attr == "options"
            ):  # a runner's options say what to arm (faults.arm); settings are read here
                out.append(f"{line} reads the fault setting {node.attr} itself")
    return out


def test_production_reaches_fault_hooks_only_through_named_points() -> None:
    found = [v for p in _production_files() for v in _violations(p)]
    assert not found, "\n".join(found)


def test_the_grep_catches_each_way_around(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    for text in (
        "from burst.faults import MIDWAY_MARKER\n",
        "import burst.faults\n",
        "from burst.preempt.demo import DemoPreemptions\n",
        "from burst import faults\nfaults._hits\n",
        "from burst.settings import current\ncurrent().fail_at\n",
        "s.simulate_no_capacity\n",
    ):
        sample.write_text(text)
        assert _violations(sample), text
    sample.write_text("from burst import faults\nfaults.fail_at('train', 'before')\n")
    assert not _violations(sample)


def test_every_named_point_exists() -> None:
    for name in faults.POINTS:
        assert hasattr(faults, name), name


def test_fail_at_names_a_step_or_a_point() -> None:
    armed = Settings.from_env({"BURST_FAIL_AT": "provision, train:before"})
    with pytest.raises(InjectedFailure, match=r"provision \(BURST_FAIL_AT\)"):
        faults.fail_at("provision", settings=armed)
    with pytest.raises(InjectedFailure, match="train:before"):
        faults.fail_at("train", "before", settings=armed)
    faults.fail_at("train", settings=armed)  # not armed: nothing happens
    faults.fail_at("provision", settings=Settings.from_env({}))


def test_provision_faults() -> None:
    s = Settings.from_env(
        {"BURST_FAIL_AT": "provision:midway", "BURST_SIMULATE_NO_CAPACITY": "a, b"}
    )
    pf = faults.provision_faults(s)
    assert pf.terraform_variables() == {"simulate_no_capacity": ["a", "b"], "fail_midway": True}
    pf.before_apply("local")  # the local module emulates it at apply time
    with pytest.raises(InjectedFailure):
        pf.before_apply("aws")
    marker = InfraError(f"terraform apply failed: {faults.MIDWAY_MARKER} through provision")
    assert isinstance(pf.injected("a", marker), InjectedFailure)
    assert pf.injected("a", InfraError("AccessDenied")) is None
    off = faults.provision_faults(s, fail_midway=False)
    assert off.injected("a", marker) is None and off.terraform_variables()["fail_midway"] is False


def test_demo_preemptions_parse_and_record(tmp_path: Path) -> None:
    record = tmp_path / "preempt-demo.json"
    demo = faults.demo_preemptions(record, "7, 19")
    assert demo.wanted == {7, 19} and demo.fired == set()
    record.write_text('{"fired": [7]}')
    assert faults.demo_preemptions(record, "7,19").fired == {7}
    with pytest.raises(BadInputError, match="'x' is not STEP"):
        faults.demo_preemptions(record, "7,x")
    record.write_text("[]")
    with pytest.raises(BadInputError, match="not a preemption record"):
        faults.demo_preemptions(record, "7")


def test_demo_events_name_their_kind_and_window(tmp_path: Path) -> None:
    demo = faults.demo_preemptions(tmp_path / "r.json", "3:notice=120, 5:node,8:rank, 9:notice")
    assert demo.events == {
        3: faults.DemoEvent(3, "notice", 120.0),
        5: faults.DemoEvent(5, "node"),
        8: faults.DemoEvent(8, "rank"),
        9: faults.DemoEvent(9, "notice"),
    }
    for bad in ("3:node=5", "3:notice=0", "0:rank", "3:cancel"):
        with pytest.raises(BadInputError, match="is not STEP"):
            _ = Settings.from_env({"BURST_PREEMPT_AT_STEPS": bad}).preempt_at_steps
    with pytest.raises(BadInputError, match="takes plain notices only"):
        demo.program_env({}, tmp_path, target=1, start=0)


@pytest.mark.parametrize(("kind", "lost"), [("node", True), ("rank", False)])
def test_a_demo_node_or_rank_event_kills_the_process(tmp_path: Path, kind: str, lost: bool) -> None:
    """A real process fires ``2:<kind>`` after step 2: it dies by SIGKILL, and only a node
    loss marks its pod (the local runner then reports "pod deleted", not a 137)."""
    code = (
        "from pathlib import Path; from burst import faults; "
        f"d = faults.demo_preemptions(Path({str(tmp_path / 'r.json')!r})); "
        "d.maybe_fire(1); d.maybe_fire(2); print('survived')"
    )
    env = {**os.environ, "BURST_PREEMPT_AT_STEPS": f"2:{kind}", "BURST_POD_DIR": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert "survived" not in proc.stdout
    assert (tmp_path / faults.NODE_LOST_MARK).exists() is lost
    assert json.loads((tmp_path / "r.json").read_text()) == {"fired": [2]}


def test_node_loss_reads_its_setting_and_refuses_a_bad_one() -> None:
    s = Settings.from_env({"BURST_NODE_LOSS": "train@1+1860, provision"})
    assert faults.node_loss(s) == (
        faults.NodeLoss("train", 1, 1860.0),
        faults.NodeLoss("provision", 0, 0.0),
    )
    assert faults.node_loss(Settings.from_env({})) == ()
    with pytest.raises(BadInputError, match=r"BURST_NODE_LOSS: 'train@x' is not STEP"):
        faults.node_loss(Settings.from_env({"BURST_NODE_LOSS": "train@x"}))
