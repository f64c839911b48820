"""The checkpoint worker is a process of its own for every manager (hundreds in a test run,
one per rank in production): it imports only what it uses. numpy alone was 0.15 of its 0.29
CPU-seconds of start-up; burst.checkpoint's names are now imported on first use."""

from __future__ import annotations

import subprocess
import sys

import pytest

import burst.checkpoint


def test_the_worker_starts_without_numpy_or_torch() -> None:
    code = (
        "import sys, burst.checkpoint.worker; "
        "print(sorted({'numpy', 'torch'} & {m.split('.')[0] for m in sys.modules}))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]", out.stdout


def test_every_public_name_of_the_package_resolves() -> None:
    for name in burst.checkpoint.__all__:
        assert getattr(burst.checkpoint, name) is not None, name
    with pytest.raises(AttributeError, match="no_such_name"):
        burst.checkpoint.no_such_name  # noqa: B018
