"""burst submit / burst status against a fake Argo server (pytest-httpserver on loopback: a
stand-in, since no Argo server can run here). The tests check the requests Hera sends."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from pytest_httpserver import HTTPServer
from werkzeug import Request, Response

pytestmark = pytest.mark.e2e  # end-to-end tier (make test-fast skips it)

PINNED = "registry.example.com/burst/trainer@sha256:" + "ab" * 32


@pytest.fixture
def spec(quickstart_in: Path) -> Path:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["image"]["reference"] = PINNED
    quickstart_in.write_text(yaml.safe_dump(doc, sort_keys=False))
    return quickstart_in


@pytest.fixture
def argo_env(httpserver: HTTPServer, monkeypatch: pytest.MonkeyPatch) -> HTTPServer:
    monkeypatch.setenv("ARGO_SERVER", httpserver.url_for("/"))
    monkeypatch.setenv("ARGO_TOKEN", "t0k3n")
    monkeypatch.setenv("ARGO_NAMESPACE", "ml")
    monkeypatch.delenv("BURST_STEPS_IMAGE", raising=False)
    return httpserver


def _burst(burst_cmd: list[str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*burst_cmd, *args], capture_output=True, text=True, check=False, timeout=120
    )


def test_submit_posts_a_workflow_calling_the_template(
    argo_env: HTTPServer, spec: Path, burst_cmd: list[str]
) -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: Request) -> Response:
        seen.append({"auth": request.headers.get("Authorization"), "body": request.get_json()})
        body = {
            "metadata": {"name": "quickstart-x7k2p", "namespace": "ml"},
            "spec": request.get_json()["workflow"]["spec"],
        }
        return Response(json.dumps(body), content_type="application/json")

    argo_env.expect_request("/api/v1/workflows/ml", method="POST").respond_with_handler(handler)
    proc = _burst(burst_cmd, "submit", str(spec))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "quickstart-x7k2p"
    (req,) = seen
    assert req["auth"] == "Bearer t0k3n"
    wf = req["body"]["workflow"]
    assert wf["metadata"]["generateName"] == "quickstart-"
    assert wf["spec"]["workflowTemplateRef"] == {"name": "burst-train"}
    assert wf["spec"]["activeDeadlineSeconds"] == 24 * 3600 + 3600
    params = {p["name"]: p["value"] for p in wf["spec"]["arguments"]["parameters"]}
    assert params["spec"] == spec.read_text()
    # no trainer image: train runs the digest verify-image verified from the spec
    assert "trainer-image" not in params
    assert params["team"] == "ml-research" and params["cost-centre"] == "cc-1001"
    assert params["train-deadline-seconds"] == str(24 * 3600)
    # every parameter it sends is one the compiled template declares
    template = yaml.safe_load(
        (
            Path(__file__).resolve().parents[2]
            / "burst"
            / "pipelines"
            / "compiled"
            / "burst-train.yaml"
        ).read_text()
    )
    declared = {p["name"] for p in template["spec"]["arguments"]["parameters"]}
    assert set(params) <= declared


def test_submit_refuses_an_image_argo_cannot_pull(
    argo_env: HTTPServer, quickstart_in: Path, burst_cmd: list[str]
) -> None:
    doc = yaml.safe_load(quickstart_in.read_text())
    doc["image"]["reference"] = "oci-layout://examples/images/quickstart-oci@sha256:" + "0" * 64
    quickstart_in.write_text(yaml.safe_dump(doc))
    proc = _burst(burst_cmd, "submit", str(quickstart_in))
    assert proc.returncode == 2
    assert "pinned by digest" in proc.stderr and "Traceback" not in proc.stderr
    assert argo_env.log == []  # nothing was sent


def test_submit_without_server_or_token_is_bad_input(
    spec: Path, burst_cmd: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ARGO_SERVER", raising=False)
    proc = _burst(burst_cmd, "submit", str(spec))
    assert proc.returncode == 2 and "ARGO_SERVER is not set" in proc.stderr
    monkeypatch.setenv("ARGO_SERVER", "http://127.0.0.1:9")
    monkeypatch.delenv("ARGO_TOKEN", raising=False)
    proc = _burst(burst_cmd, "submit", str(spec))
    assert proc.returncode == 2 and "ARGO_TOKEN is not set" in proc.stderr


def test_submit_rejected_token_is_one_line(
    argo_env: HTTPServer, spec: Path, burst_cmd: list[str]
) -> None:
    argo_env.expect_request("/api/v1/workflows/ml", method="POST").respond_with_json(
        {"code": 16, "message": "token not valid"}, status=401
    )
    proc = _burst(burst_cmd, "submit", str(spec))
    assert proc.returncode == 2
    assert "refused ARGO_TOKEN" in proc.stderr and "Traceback" not in proc.stderr


def test_submit_unreachable_server_is_infrastructure(
    spec: Path, burst_cmd: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ARGO_SERVER", "http://127.0.0.1:9")
    monkeypatch.setenv("ARGO_TOKEN", "t")
    proc = _burst(burst_cmd, "submit", str(spec))
    assert proc.returncode == 4 and "cannot reach the Argo server" in proc.stderr


def _workflow(phase: str, nodes: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"name": "quickstart-x7k2p"},
        "spec": {"workflowTemplateRef": {"name": "burst-train"}},
        "status": {"phase": phase, "progress": f"{len(nodes)}/6", "nodes": nodes},
    }


def _node(name: str, phase: str, started: str, exit_code: str | None = None) -> dict[str, Any]:
    n: dict[str, Any] = {
        "id": name,
        "name": f"quickstart-x7k2p.{name}",
        "displayName": name,
        "type": "Pod",
        "phase": phase,
        "startedAt": started,
    }
    if exit_code is not None:
        n["outputs"] = {"exitCode": exit_code}
    return n


def test_status_follows_until_finished(argo_env: HTTPServer, burst_cmd: list[str]) -> None:
    pre = _node("preflight", "Succeeded", "2026-01-01T00:00:00Z", "0")
    states = [
        _workflow("Running", {"a": pre}),
        _workflow("Running", {"a": pre, "b": _node("train", "Running", "2026-01-01T00:01:00Z")}),
        _workflow(
            "Failed",
            {
                "a": pre,
                "b": _node("train", "Failed", "2026-01-01T00:01:00Z", "1"),
                "c": _node("teardown", "Succeeded", "2026-01-01T00:02:00Z", "0"),
            },
        ),
    ]
    for state in states:
        argo_env.expect_ordered_request(
            "/api/v1/workflows/ml/quickstart-x7k2p",
            method="GET",
            headers={"Authorization": "Bearer t0k3n"},
        ).respond_with_json(state)
    proc = _burst(burst_cmd, "status", "quickstart-x7k2p", "--follow", "--interval", "0.1")
    assert proc.returncode == 1, proc.stderr  # the workflow failed
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("quickstart-x7k2p: Running")
    assert "  train: Running" in lines
    assert "  train: Failed exit 1" in lines
    assert "  teardown: Succeeded exit 0" in lines
    assert any(line.startswith("quickstart-x7k2p: Failed") for line in lines)
    assert len(argo_env.log) == 3


def test_status_no_follow_and_not_found(argo_env: HTTPServer, burst_cmd: list[str]) -> None:
    argo_env.expect_request("/api/v1/workflows/ml/quickstart-x7k2p").respond_with_json(
        _workflow("Running", {})
    )
    proc = _burst(burst_cmd, "status", "quickstart-x7k2p", "--no-follow")
    assert proc.returncode == 0 and "Running" in proc.stdout
    argo_env.expect_request("/api/v1/workflows/ml/nope").respond_with_json(
        {"code": 5, "message": "not found"}, status=404
    )
    proc = _burst(burst_cmd, "status", "nope")
    assert proc.returncode == 2 and "not found" in proc.stderr


def test_status_answer_that_is_not_a_workflow_is_infrastructure(
    argo_env: HTTPServer, burst_cmd: list[str]
) -> None:
    argo_env.expect_request("/api/v1/workflows/ml/odd").respond_with_json({"metadata": {}})
    proc = _burst(burst_cmd, "status", "odd", "--no-follow")
    assert proc.returncode == 4
    assert "not a Workflow" in proc.stderr and "Traceback" not in proc.stderr


def test_a_one_gpu_job_asks_for_one_gpu_per_pod_not_gpus_per_node() -> None:
    """gpus-per-node is each node's train pod's request: the spec's GPUs spread over the
    nodes, capped by compute.gpus_per_node (a 1-GPU job on the default 8 asked for 8)."""
    from burst.runner.argo import spec_parameters
    from burst.spec import parse_spec

    text = (Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml").read_text()
    doc = yaml.safe_load(text)
    for count, per_node, nodes, want in ((1, 8, "1", "1"), (8, 8, "1", "8"), (12, 8, "2", "6"),
                                         (16, 8, "2", "8")):  # fmt: skip
        doc["compute"]["gpu_count"], doc["compute"]["gpus_per_node"] = count, per_node
        t = yaml.safe_dump(doc)
        params = spec_parameters(parse_spec(t, "spec.yaml"), t)
        assert (params["nodes"], params["gpus-per-node"]) == (nodes, want), (count, params)
