"""Fixtures for provisioning tests: the quickstart spec, a real decision record from the
real policies, and candidates in three distinct regions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from burst.documents.plan import Candidate
from burst.spec import BurstJob, load_spec

REPO = Path(__file__).resolve().parents[2]
REGIONS = ("ap-southeast-1", "ap-southeast-3", "me-central-1")


@pytest.fixture
def job(quickstart_in: Path) -> BurstJob:
    return load_spec(quickstart_in)


@pytest.fixture
def decision(job: BurstJob) -> dict[str, Any]:
    from burst.policy import evaluate, load_policies

    record = evaluate(job, load_policies()).to_json()
    assert {(d["region"], d["verdict"]) for d in record["decisions"]} >= {
        (r, "allow") for r in REGIONS
    }, "the quickstart must be allowed in its three regions"
    return record


@pytest.fixture
def candidates() -> list[Candidate]:
    return [Candidate(region=r, provider="aws", capacity="spot") for r in REGIONS]
