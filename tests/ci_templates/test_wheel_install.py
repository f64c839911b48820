"""Installs as users make them: a wheel of burst, built from the files git tracks, installed
into a fresh virtual environment outside the checkout, runs the CI templates' preflight job
(GitHub's and GitLab's commands, as written, after their install step) on a spec in a
directory of its own: the shipped policies and Terraform come from the wheel (setup.py puts
them in ``burst/_shipped``), not from a checkout. The environment's dependencies come from the
shared test environment (a ``.pth`` line: nothing is downloaded); the checkout's own editable
burst is not on its path (``.pth`` files of an added directory are not processed: site.py)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> Path:
    tmp = tmp_path_factory.mktemp("wheel")
    src = tmp / "src"
    files = subprocess.run(
        ["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=True
    ).stdout.split(b"\0")
    for f in filter(None, files):
        path = REPO / f.decode()
        if path.is_file():
            (src / f.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, src / f.decode())
    dist = tmp / "dist"
    # the test environment's uv (make setup puts it there; its venv has no pip of its own)
    uv = shutil.which("uv", path=str(Path(sys.executable).parent)) or shutil.which("uv")
    assert uv, "uv is not installed beside this Python (make setup installs it)"
    subprocess.run(
        [uv, "build", "--quiet", "--wheel", "--no-build-isolation", "--python", sys.executable,
         "-o", str(dist), str(src)],
        check=True,
    )  # fmt: skip
    (whl,) = dist.glob("burst_train-*.whl")
    names = zipfile.ZipFile(whl).namelist()
    assert "burst/_shipped/policies/jurisdictions.yaml" in names or any(
        n.startswith("burst/_shipped/policies/") for n in names
    )
    assert "burst/_shipped/terraform/stacks/burst-run/main.tf" in names
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "shared-deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    # The CI runner has no torch (the jobs install `.` only): these stand-ins, first on the
    # path, make an import of torch or deepspeed fail there as it would on the runner.
    for name in ("torch", "deepspeed"):
        (site / name).mkdir()
        (site / name / "__init__.py").write_text(
            f"raise ImportError('{name} is not installed in the CI preflight job')\n"
        )
    subprocess.run(
        [uv, "pip", "install", "--quiet", "--no-deps", "--python", str(venv / "bin" / "python"),
         str(whl)],
        check=True,
    )  # fmt: skip
    return venv


def _preflight_commands() -> dict[str, list[str]]:
    gh = yaml.safe_load((REPO / "ci" / "github" / "burst.yml").read_text())
    gh_steps = gh["jobs"]["preflight"]["steps"]
    gh_run = [s["run"] for s in gh_steps if "run" in s and "pip install" not in s["run"]]
    gl = yaml.safe_load((REPO / "ci" / "gitlab" / "burst.gitlab-ci.yml").read_text())
    return {"github": gh_run, "gitlab": list(gl["burst:preflight"]["script"])}


@pytest.mark.parametrize("ci", ["github", "gitlab"])
def test_the_preflight_job_runs_from_a_wheel(wheel_env: Path, tmp_path: Path, ci: str) -> None:
    work = tmp_path / "user-repo"
    (work / "examples").mkdir(parents=True)
    shutil.copy(REPO / "examples" / "quickstart.yaml", work / "examples" / "quickstart.yaml")
    bin_dir = wheel_env / "bin"
    env = {
        k: v for k, v in os.environ.items()
        if not k.startswith(("BURST_", "PYTHONPATH", "VIRTUAL_ENV"))
    }  # fmt: skip
    env.update(
        PATH=f"{bin_dir}{os.pathsep}{env.get('PATH', '')}",
        BURST_SPEC="examples/quickstart.yaml",
        GITHUB_OUTPUT=str(tmp_path / "github_output"),
        HOME=str(tmp_path),
    )
    for command in _preflight_commands()[ci]:
        proc = subprocess.run(
            ["bash", "-e", "-c", command], cwd=work, env=env, capture_output=True, text=True
        )
        assert proc.returncode == 0, f"{ci}: {command}\n{proc.stderr[-2000:]}"
    which = subprocess.run(
        [str(bin_dir / "python"), "-c", "import burst, burst.checkout as c; print(burst.__file__, c.POLICIES)"],
        capture_output=True, text=True, check=True, env=env, cwd=work,
    ).stdout  # fmt: skip
    assert str(wheel_env) in which and str(REPO) not in which
    for out in ("preflight.json", "plan.json"):
        assert (work / out).stat().st_size > 0
