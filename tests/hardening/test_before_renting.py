"""Check before renting: the entrypoint builds and the stores accept a write, found by
`burst validate` (and the preflight step) before anything is provisioned; a checkpoint of a
differently shaped model is one line naming the tensor (issue 15)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from burst.checkpoint.state import apply_state, check_fits
from burst.errors import CheckpointError

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def test_a_checkpoint_of_another_shape_names_the_first_tensor() -> None:
    saved = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 2)).state_dict()
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 2))
    before = [p.clone() for p in model.parameters()]
    with pytest.raises(CheckpointError) as err:
        apply_state({"model": saved}, model)
    line = err.value.one_line()
    assert "'0.weight' has shape [16, 8] in the checkpoint, [32, 8] in the model" in line
    assert err.value.exit_code == 2
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters(), strict=True))
    with pytest.raises(CheckpointError, match=r"'2\.weight' of the checkpoint is not in"):
        check_fits({}, {"2.weight": torch.zeros(1)}, "checkpoint step 3 (full)")


def _validate(spec: Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(cwd)])}
    return subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "validate", str(spec)],
        capture_output=True,
        text=True,
        timeout=300,  # a bound on the wait (the check itself has a time limit)
        cwd=cwd,
        env=env,
    )


BROKEN = [
    ("def build(job:\n", "module {m} does not compile"),
    ("raise RuntimeError('at import')\n", "importing module {m} raised RuntimeError: at import"),
    ("def build(job):\n    raise ValueError('no data')\n", "raised ValueError: no data"),
    ("def build(job):\n    return 42\n", "returned a int, not a TrainSetup"),
    ("x = 1\n", "module {m} has no function 'build'"),
]


@pytest.mark.parametrize(("module", "words"), BROKEN)
def test_an_entrypoint_that_does_not_build_is_one_line_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, module: str, words: str
) -> None:
    from burst.errors import BadInputError
    from burst.spec import load_spec
    from burst.train.setup import build_setup

    name = f"broken_{abs(hash(module)) % 10**8}"  # a fresh module name per case
    (tmp_path / f"{name}.py").write_text(module)
    monkeypatch.syspath_prepend(str(tmp_path))
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        QUICKSTART.read_text().replace(
            "entrypoint: burst.train.example:build", f"entrypoint: {name}:build"
        )
    )
    with pytest.raises(BadInputError) as err:
        build_setup(load_spec(spec))
    line = err.value.one_line()
    assert line.startswith(f"training.entrypoint {name}:build"), line
    assert words.format(m=name) in line, line
    assert err.value.exit_code == 2


@pytest.mark.e2e
@pytest.mark.slow
def test_an_entrypoint_that_does_not_build_is_found_by_validate(tmp_path: Path) -> None:
    module, words = BROKEN[2][0], BROKEN[2][1]
    (tmp_path / "broken_entry.py").write_text(module)
    text = QUICKSTART.read_text()
    text = text.replace("entrypoint: burst.train.example:build", "entrypoint: broken_entry:build")
    text = text.replace("file://checkpoints", f"file://{tmp_path}/store")
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    proc = _validate(spec, tmp_path)
    assert proc.returncode == 2, proc.stderr
    problem, _summary = proc.stderr.strip().splitlines()
    assert problem.startswith(f"{spec}: training.entrypoint broken_entry:build")
    assert words in problem and "Traceback" not in proc.stderr


@pytest.mark.e2e
@pytest.mark.slow
def test_a_store_that_refuses_a_write_is_exit_4_before_renting(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    # root writes anywhere: a path under /proc refuses even root
    replica = "/proc/burst-no-such/r" if os.geteuid() == 0 else f"{locked}/r"
    text = QUICKSTART.read_text().replace(
        "file://checkpoints", f"file://{tmp_path}/store\n  replica_uri: file://{replica}"
    )
    # a program's command (checked by a dry import), not the example's entrypoint (a torch
    # build in a child process): the stores are this test's subject
    program = REPO / "examples" / "programs" / "hf_trainer.py"
    text = text.replace(
        "  entrypoint: burst.train.example:build\n", f"  command: [python, {program}]\n"
    )
    assert str(program) in text
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    proc = _validate(spec, tmp_path)
    assert proc.returncode == 4, proc.stderr
    problem = proc.stderr.strip().splitlines()[0]
    assert "storage.replica_uri: the store" in problem and "does not accept a write" in problem
    assert not (tmp_path / "store" / "_burst_probe").exists() or not any(
        (tmp_path / "store" / "_burst_probe").iterdir()
    )  # the probe of the primary store cleaned up after itself
