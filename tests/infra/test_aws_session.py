"""burst.aws_session: each session resolves the credentials the environment has now, and all
share one loader of botocore's data (parsed once a process, not once a client)."""

from __future__ import annotations

import pytest

from burst.aws_session import session
from burst.infra.remote_errors import aws_client


def test_sessions_share_the_data_but_not_the_credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CONFIG_FILE", "AWS_SHARED_CREDENTIALS_FILE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "first")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s1")
    one = session()
    assert one.get_credentials().access_key == "first"
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "second")
    two = session()
    assert two.get_credentials().access_key == "second"
    assert one.get_credentials().access_key == "first"
    loader = one._session.get_component("data_loader")
    assert two._session.get_component("data_loader") is loader
    # a client parses the endpoints and its service's model into that loader once
    aws_client("ec2", "us-east-1")
    parsed = len(loader._cache)
    aws_client("ec2", "eu-west-1")
    assert len(loader._cache) == parsed
