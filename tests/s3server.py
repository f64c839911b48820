"""Fixtures: a real S3 server (rclone serve s3) on loopback, reusable by any test area.

``s3_server`` (session): the running server; credentials generated for this test run are put
in os.environ (AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL_S3, AWS_REGION)
for the session, so boto3 and child processes find it. ``s3_bucket``: a fresh bucket name.
"""

from __future__ import annotations

import os
import secrets
from collections.abc import Iterator
from pathlib import Path

import pytest

from burst.storage.loopback import LoopbackS3


@pytest.fixture(scope="session")
def s3_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LoopbackS3]:
    root: Path = tmp_path_factory.mktemp("s3root")
    server = LoopbackS3(root / "data").start()
    saved = {k: os.environ.get(k) for k in server.client_env()}
    os.environ.update(server.client_env())
    try:
        yield server
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture
def s3_bucket(s3_server: LoopbackS3) -> str:
    name = "t" + secrets.token_hex(6)
    s3_server.create_bucket(name)
    return name
