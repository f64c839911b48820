"""Static rules on images/*/Dockerfile, and each rule proven to catch what it should."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from devtools.dockerfile_rules import base_images, check, check_file

REPO = Path(__file__).resolve().parents[2]
DOCKERFILES = sorted((REPO / "images").glob("*/Dockerfile"))
PIN = "@sha256:" + "0" * 64


def test_both_dockerfiles_exist() -> None:
    assert {p.parent.name for p in DOCKERFILES} >= {"steps", "trainer"}


@pytest.mark.parametrize("path", DOCKERFILES, ids=lambda p: p.parent.name)
def test_dockerfile_follows_the_rules(path: Path) -> None:
    assert [str(v) for v in check_file(path)] == []


def test_dockerfiles_use_the_locked_base_images() -> None:
    lock = json.loads((REPO / "images" / "lock.json").read_text())
    for name, image in lock["base_images"].items():
        text = (REPO / "images" / name / "Dockerfile").read_text()
        assert base_images(text) == [image]


def test_trainer_labels_come_from_the_lock() -> None:
    lock = json.loads((REPO / "images" / "lock.json").read_text())["trainer"]
    text = (REPO / "images" / "trainer" / "Dockerfile").read_text()
    for arg, key in [("CUDA_VERSION", "cuda"), ("DRIVER_MIN", "driver_min"), ("TORCH_VERSION", "torch"),
                     ("NCCL_VERSION", "nccl"), ("DEEPSPEED_VERSION", "deepspeed")]:  # fmt: skip
        assert f"ARG {arg}={lock[key]}\n" in text


GOOD = f"FROM python:3.12-slim{PIN}\nRUN pip install --no-cache-dir x\nUSER 65532\n"


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("FROM python:3.12-slim\nUSER 1000\n", "DF001"),
        ("FROM python:latest\nUSER 1000\n", "DF002"),
        (f"FROM python{PIN}\n", "DF003"),
        (f"FROM python{PIN}\nUSER root\n", "DF003"),
        (f"FROM python{PIN}\nUSER 0:0\n", "DF003"),
        (f"FROM python{PIN} AS b\nUSER 1000\nFROM b\n", "DF003"),
        (f"FROM python{PIN}\nADD https://example.com/x.tgz /x\nUSER 1\n", "DF004"),
        (f"FROM python{PIN}\nENV API_TOKEN=abc\nUSER 1\n", "DF005"),
        (f"FROM python{PIN}\nARG DB_PASSWORD\nUSER 1\n", "DF005"),
        (f"FROM python{PIN}\nENV X=AKIAABCDEFGHIJKLMNOP\nUSER 1\n", "DF005"),
        (f"FROM python{PIN}\nRUN apt-get update && apt-get install -y curl\nUSER 1\n", "DF006"),
        (f"FROM python{PIN}\nRUN pip install \\\n    torch\nUSER 1\n", "DF006"),
    ],
)
def test_each_rule_catches_its_violation(text: str, rule: str) -> None:
    assert rule in {v.rule for v in check(text)}


def test_good_dockerfile_and_exemptions() -> None:
    assert check(GOOD) == []
    multi = f"FROM golang{PIN} AS build\nRUN go build\nFROM scratch\nCOPY --from=build /a /a\nUSER 65532\n"
    assert check(multi) == []
    with_env = f"FROM python{PIN}\nENV PIP_NO_CACHE_DIR=1\nRUN pip install x\nUSER 1\n"
    assert check(with_env) == []


@pytest.mark.e2e
def test_build_script_parses_and_reads_only_locked_keys() -> None:
    import re
    import subprocess

    script = REPO / "images" / "build.sh"
    assert subprocess.run(["bash", "-n", str(script)], check=False).returncode == 0
    lock = json.loads((REPO / "images" / "lock.json").read_text())
    keys = set(re.findall(r"lockval ([a-z_.]+)", script.read_text()))
    assert {"trainer.torch", "trainer.nccl", "trainer.deepspeed", "repositories.trainer"} <= keys
    for key in keys:
        node = lock
        for part in key.split("."):
            assert part in node, f"build.sh reads {key}, missing from images/lock.json"
            node = node[part]


def test_the_images_requirements_are_pyprojects() -> None:
    """The images install burst's dependencies from images/requirements.txt (a layer that
    stays cached while the rest of pyproject.toml changes): it must be pyproject's list."""
    from devtools.images import REQUIREMENTS, requirements_text

    assert REQUIREMENTS.read_text() == requirements_text(), (
        "images/requirements.txt differs from pyproject.toml: "
        "run python -m devtools.images --requirements"
    )


def test_the_image_build_reads_pip_configuration_from_a_venv_without_pip(tmp_path: Path) -> None:
    """make setup makes .venv without pip; the image build passes this machine's pip
    configuration to podman, read by the interpreter the venv was made from."""
    import subprocess
    import sys

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next((venv / "lib").glob("python3*/site-packages"))
    (site / "repo.pth").write_text(str(Path(__file__).resolve().parents[2]) + "\n")
    code = "from devtools.images import pip_config_text; print(pip_config_text(), end='')"
    python = venv / "bin" / "python"
    assert subprocess.run([python, "-m", "pip", "--version"], capture_output=True).returncode
    found = subprocess.run([python, "-c", code], capture_output=True, text=True, check=True)
    base = sys._base_executable  # what the venv was made from (the test's own venv's base)
    expected = subprocess.run(
        [base, "-m", "pip", "config", "list"], capture_output=True, text=True, check=True
    )
    assert found.stdout == expected.stdout


def test_looking_for_pip_here_would_break_setuptools_later() -> None:
    """Why pip_config_text asks a child process: in this process even ``find_spec("pip")``
    runs setuptools' distutils hook for pip, which gives up setuptools' distutils for the rest
    of the process (a later ``import setuptools``, as torch.utils.cpp_extension does, fails).
    Checked in a child: importing devtools.images and reading the configuration leave the
    hook as it was."""
    import subprocess
    import sys

    code = (
        "import sys\nfrom devtools.images import pip_config_text\npip_config_text()\n"
        "import setuptools, distutils.core\n"
        "assert '_distutils' in distutils.core.__file__, distutils.core.__file__\n"
    )
    env_path = str(Path(__file__).resolve().parents[2])
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=env_path
    )
    assert proc.returncode == 0, proc.stderr[-1000:]
