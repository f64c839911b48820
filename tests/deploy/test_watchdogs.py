"""The pipeline's own watchdogs: the in-cluster reaper asks Argo which workflows are live, and
never destroys a run a live workflow drives, such as one whose train pod is being retried after
exit 75 (no trainer renews the heartbeat during the backoff and while the new pod waits for its
GPUs). Real parts: the reaper's code against a loopback S3 state bucket (tests/s3server.py).
Walk: docs/reference/burst-reaper.md."""

from __future__ import annotations

import datetime as dt
import json
import time
from pathlib import Path
from typing import Any

import boto3
import pytest
import yaml

from burst.infra.reaper import reap, runs_in_s3_state_store

REPO = Path(__file__).resolve().parents[2]
BEFORE = Path(__file__).resolve().parent / "before"
FUTURE = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")


def _reaper_spec(path: Path) -> tuple[dict[str, Any], dict[str, str]]:
    """(the workflow spec a reap runs, its parameters' values). The CronWorkflow of
    ``<path>-cron.yaml`` calls the WorkflowTemplate ``path`` by workflowTemplateRef, and its
    arguments win over the template's defaults (argo workflow/util/merge.go JoinWorkflowSpec);
    before, ``path`` was a CronWorkflow holding its templates."""
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    if doc["kind"] == "CronWorkflow":
        wf: dict[str, Any] = doc["spec"]["workflowSpec"]
        return wf, {p["name"]: p.get("value", "") for p in wf["arguments"]["parameters"]}
    cron = yaml.safe_load(path.with_name(f"{path.stem}-cron.yaml").read_text(encoding="utf-8"))
    call = cron["spec"]["workflowSpec"]
    assert call["workflowTemplateRef"]["name"] == doc["metadata"]["name"]
    values = {p["name"]: p.get("value", "") for p in doc["spec"]["arguments"]["parameters"]}
    values.update({p["name"]: p["value"] for p in call["arguments"]["parameters"]})
    return doc["spec"], values


def _reaper_env(path: Path) -> dict[str, str]:
    wf, defaults = _reaper_spec(path)
    (t,) = [t for t in wf["templates"] if "container" in t]
    env = {}
    for e in t["container"].get("env") or []:
        value = e.get("value", "")
        for name, default in defaults.items():
            value = value.replace(f"{{{{workflow.parameters.{name}}}}}", default)
        env[e["name"]] = value
    env["_command"] = " ".join(t["container"]["command"])
    return env


def argo_settings_problems(path: Path) -> list[str]:
    """The reaper's pod can ask the Argo server (burst.runner.argo.settings_from_env needs
    ARGO_SERVER and ARGO_TOKEN) in the namespace its runs live in."""
    env = _reaper_env(path)
    out = []
    if not env.get("ARGO_SERVER"):
        out.append("the reaper has no ARGO_SERVER: it cannot see live workflows")
    if "ARGO_TOKEN" not in env and "ARGO_TOKEN=" not in env["_command"]:
        out.append("the reaper has no ARGO_TOKEN")
    if env.get("ARGO_NAMESPACE") not in ("{{workflow.namespace}}",):
        out.append("the reaper does not ask about its own namespace (ARGO_NAMESPACE)")
    return out


def test_before_issue_28_the_reaper_could_not_see_live_workflows() -> None:
    assert argo_settings_problems(BEFORE / "pipelines_compiled_burst-reaper.yaml")


def test_the_reaper_has_argo_server_settings() -> None:
    assert (
        argo_settings_problems(REPO / "burst" / "pipelines" / "compiled" / "burst-reaper.yaml")
        == []
    )


def test_the_crons_arguments_reach_the_reaper_over_the_templates_defaults(
    tmp_path: Path,
) -> None:
    """A site sets its server in the CronWorkflow's arguments; that is what the pod gets."""
    compiled = REPO / "burst" / "pipelines" / "compiled"
    for name in ("burst-reaper.yaml", "burst-reaper-cron.yaml"):
        (tmp_path / name).write_text((compiled / name).read_text(encoding="utf-8"))
    cron = tmp_path / "burst-reaper-cron.yaml"
    doc = yaml.safe_load(cron.read_text(encoding="utf-8"))
    for p in doc["spec"]["workflowSpec"]["arguments"]["parameters"]:
        if p["name"] == "argo-server":
            p["value"] = "https://argo.example:2746"
    cron.write_text(yaml.safe_dump(doc))
    assert _reaper_env(tmp_path / "burst-reaper.yaml")["ARGO_SERVER"] == "https://argo.example:2746"
    # a cron that passes an empty server leaves the reaper blind, whatever the default
    for p in doc["spec"]["workflowSpec"]["arguments"]["parameters"]:
        if p["name"] == "argo-server":
            p["value"] = ""
    cron.write_text(yaml.safe_dump(doc))
    assert argo_settings_problems(tmp_path / "burst-reaper.yaml")


def _run_with_lapsed_heartbeat(bucket: str, run_id: str) -> None:
    s3 = boto3.client("s3")
    inst = {"attributes": {"id": "x", "tags_all": {"burst:expires-at": FUTURE}}}
    state = {"resources": [{"instances": [inst]}]}
    s3.put_object(
        Bucket=bucket, Key=f"burst/runs/{run_id}/terraform.tfstate", Body=json.dumps(state)
    )
    then = time.time() - 3600  # renewed an hour ago, lapsed since
    beat = {"holder": "trainer", "token": "t", "renewed_at": then, "expires_at": then + 180}
    s3.put_object(
        Bucket=bucket, Key=f"burst/runs/{run_id}/heartbeat/trainer.json", Body=json.dumps(beat)
    )


@pytest.mark.parametrize(
    ("live_workflows", "run_id", "verdict"),
    [
        (None, "burst-abc12", "active"),  # Argo not asked: wait for the expiry
        ({"burst-abc12"}, "burst-abc12", "live"),  # retried after exit 75: still Running
        ({"burst-abc12"}, "burst-abc12-me-central-1", "live"),  # a region of burst-regional
        (set(), "burst-abc12", "lapsed"),  # Argo says nothing drives it: destroyed at once
    ],
)
def test_a_lapsed_heartbeat_destroys_only_what_argo_says_is_not_live(
    s3_bucket: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    live_workflows: set[str] | None,
    run_id: str,
    verdict: str,
) -> None:
    monkeypatch.setenv("BURST_TF_STATE_BUCKET", s3_bucket)
    _run_with_lapsed_heartbeat(s3_bucket, run_id)
    states = runs_in_s3_state_store(s3_bucket, "us-east-1", client=boto3.client("s3"))
    doc: dict[str, Any] = reap(
        dt.datetime.now(dt.UTC),
        tmp_path,
        [],
        act=False,
        s3_states=states,
        live_workflows=live_workflows,
    )
    assert [(r["run_id"], r["verdict"]) for r in doc["runs"]] == [(run_id, verdict)]
