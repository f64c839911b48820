"""The reaper CronWorkflow runs on the controller (deploy/argo/burst-reaper-cron.yaml, calling
the WorkflowTemplate burst-reaper under templateReferencing: Secure): the real controller's
cron scheduler makes its Workflow, the stand-in kubelet runs `burst reap --yes --json` in the
step pod, and the reaper asks a real `argo server` (client auth mode, its self-signed TLS) which
workflows are unfinished, with the pod's own service-account token.

Nothing reaches a cloud: the regions' AWS APIs are a moto server on loopback (AWS_ENDPOINT_URL
in the pods' environment), the Terraform state bucket is the tier's loopback S3 store
(AWS_ENDPOINT_URL_S3, as every pod of the tier has it)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml
from runs import wait_finished, wait_until

from burst.storage.loopback import LoopbackS3
from devtools.cluster import argo
from devtools.cluster.controlplane import ControlPlane
from devtools.cluster.tier import Tier

pytestmark = pytest.mark.cluster

REGION = "ap-southeast-1"
CRON = "burst-reaper"
CRON_LABEL = "workflows.argoproj.io/cron-workflow"
PAST = "2020-01-01T00:00:00Z"
FUTURE = "2099-01-01T00:00:00Z"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def moto_endpoint(tmp_path: Path) -> Iterator[str]:
    """A moto server (AWS emulation) on loopback only."""
    port = _free_port()
    log = (tmp_path / "moto.log").open("ab")
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"moto server did not start:\n{(tmp_path / 'moto.log').read_text()}"
                ) from None
            time.sleep(0.2)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)
        log.close()


def _ec2(endpoint: str) -> Any:
    # moto's fake credentials, never real ones
    return boto3.client(
        "ec2",
        region_name=REGION,
        endpoint_url=endpoint,
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
    )


def _tagged_vpc(ec2: Any, cidr: str, run_id: str, expires: str) -> str:
    tags = [{"Key": "burst:run-id", "Value": run_id}, {"Key": "burst:expires-at", "Value": expires}]
    vpc = ec2.create_vpc(CidrBlock=cidr, TagSpecifications=[{"ResourceType": "vpc", "Tags": tags}])
    return str(vpc["Vpc"]["VpcId"])


def _state(run_id: str, expires: str) -> bytes:
    """A Terraform state holding one tagged resource of the run."""
    return json.dumps(
        {
            "version": 4,
            "resources": [
                {
                    "mode": "managed",
                    "type": "aws_vpc",
                    "name": "run",
                    "instances": [
                        {
                            "attributes": {
                                "tags": {"burst:run-id": run_id, "burst:expires-at": expires}
                            }
                        }
                    ],
                }
            ],
        }
    ).encode()


def _report(text: str) -> dict[str, Any]:
    """The JSON document `burst reap --json` printed, among whatever else the log holds."""
    dec = json.JSONDecoder()
    for i, line in enumerate(text.splitlines(keepends=True)):
        if line.startswith("{"):
            rest = "".join(text.splitlines(keepends=True)[i:])
            doc, _ = dec.raw_decode(rest)
            return dict(doc)
    raise AssertionError(f"no JSON report in the reaper's log:\n{text}")


def _cron_workflows(cp: ControlPlane) -> list[dict[str, Any]]:
    out = cp.get_json("workflows", "-n", "burst", "-l", f"{CRON_LABEL}={CRON}")
    return list(out.get("items") or [])


def _arg(wf: dict[str, Any], name: str) -> str | None:
    for p in ((wf.get("spec") or {}).get("arguments") or {}).get("parameters") or []:
        if p.get("name") == name:
            return str(p.get("value"))
    return None


def test_the_reaper_cron_runs_on_the_controller(
    tier: Tier, cp: ControlPlane, store: LoopbackS3, moto_endpoint: str
) -> None:
    started = time.monotonic()
    ec2 = _ec2(moto_endpoint)
    suffix = uuid.uuid4().hex[:6]

    # a live run: a Workflow Argo reports unfinished (a run of the burst-reaper template,
    # suspended: Secure allows spec.suspend; created as a cluster administrator, whom
    # deploy/admission/workflows.yaml does not hold to burst-train/burst-regional)
    live_wf = {
        "apiVersion": "argoproj.io/v1alpha1",
        "kind": "Workflow",
        "metadata": {"generateName": "live-", "namespace": "burst"},
        "spec": {"workflowTemplateRef": {"name": "burst-reaper"}, "suspend": True},
    }
    live = cp.kubectl(
        "create", "-f", "-", "-o", "jsonpath={.metadata.name}", stdin=yaml.safe_dump(live_wf)
    ).stdout.strip()
    assert live.startswith("live-"), live

    # the cloud: an expired run nothing drives (deleted), the live run's expired resources
    # (kept), an unexpired run (kept)
    orphan, active = f"orphan-{suffix}", f"active-{suffix}"
    orphan_vpc = _tagged_vpc(ec2, "10.1.0.0/16", orphan, PAST)
    live_vpc = _tagged_vpc(ec2, "10.2.0.0/16", live, PAST)
    active_vpc = _tagged_vpc(ec2, "10.3.0.0/16", active, FUTURE)

    # the state bucket: the live run's state (expired) and the orphan's
    bucket = f"reaper-state-{suffix}"
    store.create_bucket(bucket)
    s3 = store.store(bucket)
    try:
        for run_id in (live, orphan):
            s3._client.put_object(
                Bucket=bucket,
                Key=f"burst/runs/{run_id}/terraform.tfstate",
                Body=_state(run_id, PAST),
            )
    finally:
        s3.close()

    server, url = argo.start_server(cp, tier.bin["argo"])
    # where the reaper's pod reaches the Argo server (on real nodes: the pod network's
    # address for that loopback port)
    pod_url = tier.pod_url(url)
    env_change = tier.pod_env(
        AWS_ENDPOINT_URL=moto_endpoint,  # every AWS API but S3 (the store's)
        AWS_EC2_METADATA_DISABLED="true",
        BURST_RUNS_ROOT="/tmp/runs",  # the container's own /tmp: no local runs
    )
    env_change.__enter__()
    original = cp.get_json("cronworkflow", CRON, "-n", "burst")
    params = {
        "regions": REGION,
        "state-bucket": bucket,
        "state-region": store.region,
        "argo-server": pod_url,
        "argo-insecure-skip-verify": "true",  # argo server's self-signed certificate
    }
    args = [
        {"name": p["name"], "value": params.get(p["name"], p.get("value", ""))}
        for p in original["spec"]["workflowSpec"]["arguments"]["parameters"]
    ]
    before = {w["metadata"]["name"] for w in _cron_workflows(cp)}
    name = ""
    try:
        # the site's edit (its argo-server, regions, bucket) and a schedule of every minute:
        # the controller's cron scheduler makes the Workflow, as it does every 5 minutes
        cp.kubectl(
            "patch", "cronworkflow", CRON, "-n", "burst", "--type=merge", "-p",
            json.dumps({"spec": {
                "schedules": ["* * * * *"],
                "suspend": False,  # the session keeps it suspended (conftest.py)
                "workflowSpec": {"arguments": {"parameters": args}},
            }}),
        )  # fmt: skip
        box: dict[str, str] = {}

        def scheduled() -> bool:
            for wf in _cron_workflows(cp):
                n = wf["metadata"]["name"]
                if n not in before and _arg(wf, "argo-server") == pod_url:
                    box["name"] = n
                    return True
            return False

        wait_until(tier, CRON, "the cron's Workflow (schedule * * * * *)", scheduled, 150)
        name = box["name"]
        wf = wait_finished(tier, name, timeout=420)
        assert wf["spec"].get("workflowTemplateRef") == {"name": "burst-reaper"}
        assert wf["status"]["phase"] == "Succeeded", tier.describe(name)

        logs = tier.container_logs(name)
        assert logs, tier.describe(name)
        report = _report(logs)

        # the reaper asked the Argo server, with its own token, which workflows are unfinished
        assert report["argo"]["checked"] is True, report["argo"]
        assert live in report["argo"]["unfinished"], report["argo"]
        assert name in report["argo"]["unfinished"], report["argo"]  # itself, running
        assert report["dry_run"] is False and report["errors"] == 0, report

        runs = {(r["run_id"], r["source"]): r for r in report["runs"]}
        assert runs[(live, "state")]["verdict"] == "live", report
        assert runs[(live, "tags")]["verdict"] == "live", report
        assert runs[(orphan, "state")]["verdict"] == "expired", report
        assert runs[(orphan, "tags")]["verdict"] == "expired", report
        assert runs[(active, "tags")]["verdict"] == "active", report
        acts = {(a["run_id"], a["action"]): a for a in report["actions"]}
        assert set(acts) == {(orphan, "left-to-tag-path"), (orphan, "delete-by-tags")}, report
        deleted = acts[(orphan, "delete-by-tags")]["resources"]
        assert [(d["id"], d["result"]) for d in deleted] == [(orphan_vpc, "deleted")], report

        # and the cloud says so: the orphan's VPC is gone, the live and active runs' are not
        left = {v["VpcId"] for v in ec2.describe_vpcs()["Vpcs"]}
        assert orphan_vpc not in left
        assert {live_vpc, active_vpc} <= left
        print(f"reaper workflow {name} Succeeded in {time.monotonic() - started:.0f} s")
    finally:
        spec = original["spec"]
        cp.kubectl(
            "patch", "cronworkflow", CRON, "-n", "burst", "--type=merge", "-p",
            json.dumps({"spec": {
                "schedules": spec["schedules"],
                "suspend": True,
                "workflowSpec": {"arguments": spec["workflowSpec"]["arguments"]},
            }}),
        )  # fmt: skip
        env_change.__exit__(None, None, None)
        cp.kubectl("delete", "workflow", live, "-n", "burst", "--wait=false", check=False)
        cp.processes.pop("argo-server", None)
        server.stop()
