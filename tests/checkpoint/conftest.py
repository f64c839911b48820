"""Stores for checkpoint tests: a local directory and a bucket on the loopback S3 server."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.storage import ObjectStore, open_store


@pytest.fixture(params=["local", pytest.param("s3", marks=pytest.mark.e2e)])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> ObjectStore:
    if request.param == "local":
        return open_store(f"file://{tmp_path}/store")
    bucket = request.getfixturevalue("s3_bucket")
    return open_store(f"s3://{bucket}/run-1")


@pytest.fixture
def local_store(tmp_path: Path) -> ObjectStore:
    return open_store(str(tmp_path / "store"))
