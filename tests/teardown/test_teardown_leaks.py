"""The teardown step's leak scan against a moto server (AWS emulation; AWS itself cannot be
reached here): a resource tagged with the run id that survives the destroy is a loud exit 4."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import boto3
import pytest

from .provisioning import provision_only, step

REGION = "me-central-1"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    port = _free_port()
    server = Path(sys.executable).parent / "moto_server"
    proc = subprocess.Popen(
        [str(server), "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            time.sleep(0.1)
    for k, v in {
        "AWS_ENDPOINT_URL": url,
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_DEFAULT_REGION": REGION,
        "BURST_TARGET": "aws",
    }.items():
        monkeypatch.setenv(k, v)  # moto's fake credentials, never real ones
    monkeypatch.delenv("AWS_ENDPOINT_URL_S3", raising=False)
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.e2e  # a moto server process and a real teardown: not in make test-fast
def test_tagged_leftover_is_a_loud_exit_4(
    moto_endpoint: str, runs_root: Path, quickstart_in: Path
) -> None:
    provision_only(quickstart_in, "leaky", runs_root, REGION)

    ec2 = boto3.client("ec2", region_name=REGION)
    vpc = ec2.create_vpc(
        CidrBlock="10.9.0.0/16",
        TagSpecifications=[
            {"ResourceType": "vpc", "Tags": [{"Key": "burst:run-id", "Value": "leaky"}]}
        ],
    )["Vpc"]["VpcId"]
    ec2.create_vpc(
        CidrBlock="10.8.0.0/16",
        TagSpecifications=[
            {  # another run's: not a leak
                "ResourceType": "vpc",
                "Tags": [{"Key": "burst:run-id", "Value": "other"}],
            }
        ],
    )

    proc = step("teardown", quickstart_in, "leaky", runs_root)
    assert proc.returncode == 4, proc.stderr
    assert f"vpc {vpc}" in proc.stderr and "Traceback" not in proc.stderr
    doc = json.loads((runs_root / "leaky" / "docs" / "teardown.json").read_text())
    assert doc["resources_remaining"] == 0  # the state was destroyed ...
    assert [x["id"] for x in doc["leaks"]] == [vpc]  # ... but the cloud still holds this
    prom = (runs_root / "leaky" / "metrics" / "teardown.prom").read_text()
    assert "burst_resources_leaked{" in prom and "} 1.0" in prom

    ec2.delete_vpc(VpcId=vpc)
    proc = step("teardown", quickstart_in, "leaky", runs_root)
    assert proc.returncode == 0, proc.stderr
