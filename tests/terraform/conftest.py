"""Fixtures for the Terraform checks: run the embedded Terraform like the driver does."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from burst.infra.terraform import terraform_argv, terraform_env

REPO = Path(__file__).resolve().parents[2]

TfRun = Callable[..., subprocess.CompletedProcess[str]]


@pytest.fixture
def tf() -> TfRun:
    """``tf(*args, cwd=None)``: the embedded Terraform (or $BURST_TERRAFORM_BIN)."""

    def run(*args: str, chdir: Path | None = None) -> subprocess.CompletedProcess[str]:
        argv = [*terraform_argv(), *([f"-chdir={chdir}"] if chdir else []), *args]
        return subprocess.run(
            argv,
            capture_output=True,
            text=True,
            env=terraform_env(),
            cwd=REPO,
            timeout=300,
            check=False,
        )

    return run
