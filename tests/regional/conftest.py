"""The shipped two-region run, shared by the tests that check it and those whose faulty runs
must end with its weights (each marked ``xdist_group(TWO_REGIONS_GROUP)``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burst.spec import load_spec

from .regional_specs import REPO, TWO, cli_run


@pytest.fixture(scope="session")
def two_regions(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """``burst run examples/regional.yaml`` (in this process, click's CliRunner): its runs
    root and report. The two-region test checks it; the fault tests take it as the run
    without faults their final weights must equal."""
    from tests.conftest import cli_runner

    root = tmp_path_factory.mktemp("regional-two") / "runs"
    spec = REPO / "examples" / "regional.yaml"
    assert load_spec(spec).data.shards == TWO
    return root, cli_run(cli_runner(), spec, root, "two")
