"""`burst logs RUN` (issue 29): a local run's step logs and an Argo workflow's pod logs, one
command, `--step`, `--json` (before: no logs command). The Argo server is the loopback fake
(pytest-httpserver)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path

from obs_run import RUN_ID, make_run
from pytest_httpserver import HTTPServer

Cli = Callable[..., subprocess.CompletedProcess[str]]


def test_logs_of_a_local_run(burst_cli: Cli, tmp_path: Path) -> None:
    """A person reads lines (time, level, message), never raw JSON; --json gives each record
    exactly as the step wrote it, once encoded (issue 46: a person got the raw JSON lines,
    and --json encoded each line twice, a JSON string inside a JSON string)."""
    root = tmp_path / "runs"
    d = make_run(root)
    with (d / "logs" / "train.log").open("a") as fh:
        fh.write("a program's own line\n")
    proc = burst_cli(["logs", RUN_ID, "--runs-root", str(root)])
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    steps = [line.split("]", 1)[0].lstrip("[") for line in lines]
    assert "train" in steps and steps.index("preflight") < steps.index("train")
    assert not any(line.split("] ", 1)[1].startswith("{") for line in lines)
    assert "[train] a program's own line" in lines
    train = (d / "logs" / "train.log").read_text().splitlines()
    record = json.loads(train[2])  # the train step's first event record
    one = burst_cli(["logs", RUN_ID, "--runs-root", str(root), "--step", "train"])
    shown = one.stdout.splitlines()
    assert len(shown) == len(train)  # one step: unprefixed, every line
    assert shown[2] == f"{record['ts'][11:19]} {'info':7s} {record['msg']}"
    assert shown[-1] == "a program's own line"
    js = burst_cli(["logs", RUN_ID, "--runs-root", str(root), "--step", "train", "--json"])
    docs = [json.loads(x) for x in js.stdout.splitlines()]
    assert docs[2] == record and docs[2]["event"] == "train.first_step"  # exact, once
    assert docs[-1] == {"step": "train", "line": "a program's own line"}
    bad = burst_cli(["logs", RUN_ID, "--runs-root", str(root), "--step", "nope"])
    assert bad.returncode == 2 and "--step 'nope'" in bad.stderr


def test_rank_keeps_one_ranks_lines(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    d = make_run(root)
    line = '{{"msg": "step {n} loss 0.5", "step": "train.{r}", "run_id": "{run}"}}'
    ranks = [line.format(n=n, r=r, run=RUN_ID) for n in (1, 2) for r in (0, 1)]
    with (d / "logs" / "train.log").open("a") as fh:
        fh.write("\n".join([*ranks, "a program's own line", '{"msg": "x", "step": "train"}']))
        fh.write("\n")
    one = burst_cli(
        ["logs", RUN_ID, "--runs-root", str(root), "--step", "train", "--rank", "1", "--json"]
    )
    assert one.returncode == 0, one.stderr
    assert one.stdout.splitlines() == [ranks[1], ranks[3]]
    bad = burst_cli(["logs", RUN_ID, "--runs-root", str(root), "--rank", "-1"])
    assert bad.returncode == 2


def test_follow_stops_at_a_run_nobody_drives(burst_cli: Cli, tmp_path: Path) -> None:
    root = tmp_path / "runs"
    d = make_run(root)
    (d / "report.json").unlink()  # as if still running, but no runner renews a heartbeat
    proc = burst_cli(["logs", RUN_ID, "--runs-root", str(root), "--follow", "--interval", "0.05"])
    assert proc.returncode == 0 and proc.stdout


def test_logs_of_an_argo_run(argo_server: HTTPServer, burst_cli: Cli, tmp_path: Path) -> None:
    entries = [
        {"result": {"content": "preflight: allow", "podName": "wf-1-preflight-1"}},
        {"result": {"content": "step 1 loss 0.9\nstep 2 loss 0.8", "podName": "wf-1-train-2"}},
    ]
    argo_server.expect_request(
        "/api/v1/workflows/ml/wf-1/log",
        headers={"Authorization": "Bearer t0k3n"},
        query_string={"logOptions.container": "main", "logOptions.follow": "false"},
    ).respond_with_data("\n".join(json.dumps(e) for e in entries) + "\n")
    proc = burst_cli(["logs", "wf-1", "--runs-root", str(tmp_path), "--step", "train", "--json"])
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(x)["line"] for x in proc.stdout.splitlines()] == [
        "step 1 loss 0.9",
        "step 2 loss 0.8",
    ]
    argo_server.expect_request("/api/v1/workflows/ml/nope-1/log").respond_with_json(
        {"code": 5, "message": 'workflows.argoproj.io "nope-1" not found'}, status=404
    )
    missing = burst_cli(["logs", "nope-1", "--runs-root", str(tmp_path)])
    assert missing.returncode == 2 and "not found" in missing.stderr
