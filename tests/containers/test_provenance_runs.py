"""The container tier, provenance (issue 46): ``burst run --containers`` with the images
``make images`` built. The CPU trainer built here is not the quickstart's signed image: the
run is refused before anything is created, in one line naming both digests, where it used to
train in it while the report named the signed image."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from burst import checkout
from burst.errors import EXIT_REFUSED, PolicyRefusal
from burst.runner.containers import ContainerEngine, prepare
from burst.supplychain.provenance import VERIFIED

from .conftest import Images


@pytest.mark.containers
@pytest.mark.e2e
def test_a_trainer_image_that_is_not_the_signed_one_is_refused_before_renting(
    tmp_path: Path, images: Images
) -> None:
    env = {**os.environ, "PYTHONPATH": str(checkout.ROOT)}
    env.pop("BURST_RUNS_ROOT", None)
    runs = tmp_path / "runs"
    proc = subprocess.run(
        [sys.executable, "-m", "burst.cli.main", "run", "--containers",
         "--steps-image", images.steps, "--trainer-image", images.trainer,
         "--runs-root", str(runs), "examples/quickstart.yaml"],
        cwd=checkout.ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert proc.returncode == EXIT_REFUSED, proc.stderr[-2000:]
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, proc.stderr  # one line, no traceback
    local = images.engine.inspect(images.trainer)["digest"]
    signed = "sha256:cecc7e52a847230838532d5bba9605ef9759cb030385fad3925ec84a3b388409"
    assert local in lines[0] and signed in lines[0] and "--unverified-local-image" in lines[0]
    assert not runs.exists()  # nothing created, nothing rented


@pytest.fixture
def scratch(tmp_path: Path) -> Iterator[ContainerEngine]:
    """podman with a store of the test's own, holding two tiny images built FROM scratch
    (no base to pull, no container started): what ``image inspect`` says of a real image."""
    if not shutil.which("podman"):
        pytest.skip("podman is not installed (scripts/container-deps.sh)")
    from devtools.images import CONTAINERS_CONF

    (tmp_path / "containers.conf").write_text(CONTAINERS_CONF)
    run = Path(tempfile.mkdtemp(prefix="bp-"))  # podman's runroot: at most 50 characters
    args = ("--root", str(tmp_path / "storage"), "--runroot", str(run))
    engine = ContainerEngine(
        "podman", "podman", args, {"CONTAINERS_CONF": str(tmp_path / "containers.conf")}
    )
    try:
        for name in ("steps", "trainer"):
            ctx = tmp_path / name
            ctx.mkdir()
            (ctx / "f.txt").write_text(f"{name}\n")
            (ctx / "Containerfile").write_text(f"FROM scratch\nCOPY f.txt /f.txt\nLABEL n={name}\n")
            engine.run("build", "--pull=never", "--tag", f"localhost/burst/{name}:dev", str(ctx),
                       timeout=300)  # fmt: skip
        yield engine
    finally:
        engine.run("system", "reset", "--force", check=False)
        shutil.rmtree(run, ignore_errors=True)


def test_the_store_decides_by_digest(scratch: ContainerEngine) -> None:
    """A real store: the trainer image runs verified where the spec pins its digest, by that
    digest; a spec pinning another digest is refused naming both."""
    trainer = scratch.inspect("localhost/burst/trainer:dev")["digest"]
    steps = scratch.inspect("localhost/burst/steps:dev")["digest"]
    spec = f"registry.example.com/ml/trainer@{trainer}"
    lau, params = prepare(scratch, spec, "localhost/burst/steps:dev", "localhost/burst/trainer:dev")
    assert params == {"steps-image": f"localhost/burst/steps@{steps}"}
    run = lau.spec_image
    assert run is not None and (run.provenance, run.digest) == (VERIFIED, trainer)
    assert run.ref.endswith(f"@{trainer}")  # podman resolves a pinned name by its digest
    assert scratch.inspect(run.ref)["id"] == scratch.inspect("localhost/burst/trainer:dev")["id"]
    assert scratch.inspect(params["steps-image"])["digest"] == steps
    other = "sha256:" + "5e" * 32
    with pytest.raises(PolicyRefusal) as info:
        prepare(scratch, f"registry.example.com/ml/trainer@{other}",
                "localhost/burst/steps:dev", "localhost/burst/trainer:dev")  # fmt: skip
    assert other in info.value.one_line() and trainer in info.value.one_line()
