"""One vocabulary of endings (issue 46): the table in docs/reference/endings.md is the one in
burst/endings.py (checked both ways), report.json's status takes exactly its words, and every
reader decides an ending from the same facts: the report of a local run, an Argo workflow's
phase, message and nodes (the loopback fake Argo server, pytest-httpserver). Before: after a
stop the run "failed" with exit 75 (the preemption code), a lost node was exit 1, and `burst
status` of an Argo workflow knew succeeded and failed only."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

import pytest
from pytest_httpserver import HTTPServer

from burst.documents.report import RunReport
from burst.endings import ENDINGS, Ending, hint
from burst.obs.report import build_report
from burst.runs import RunPaths

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reference" / "endings.md"
Cli = Callable[..., subprocess.CompletedProcess[str]]
STEPS = ["preflight", "plan", "verify-image", "provision", "train", "teardown"]


def doc_table(text: str) -> dict[str, tuple[str, str, str]]:
    """The endings table of the doc: ending -> (exit code, wording, next), cells as written."""
    block = text.split("<!-- endings table", 1)[1].split("<!-- end of endings table -->", 1)[0]
    rows: dict[str, tuple[str, str, str]] = {}
    for line in block.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 4 or not cells[0].startswith("`"):
            continue
        rows[cells[0].strip("`")] = (cells[1], cells[2], cells[3])
    return rows


def code_table() -> dict[str, tuple[str, str, str]]:
    """The same table from burst.endings, as the doc writes it (RUN for the run)."""
    return {e.value: (m.exit_text, m.wording, hint(e, "RUN") or "none") for e, m in ENDINGS.items()}


def test_the_doc_table_is_the_code_table_both_ways() -> None:
    doc, code = doc_table(DOC.read_text(encoding="utf-8")), code_table()
    assert len(code) == 7
    for name, row in code.items():  # every ending of the code is in the doc, as the code has it
        assert doc.get(name) == row, name
    for name, row in doc.items():  # and the doc has no ending the code lacks, nor another word
        assert code.get(name) == row, name


def test_the_table_check_can_fail() -> None:
    text = DOC.read_text(encoding="utf-8")
    changed = doc_table(text.replace("| `cancelled` | 130 |", "| `cancelled` | 75 |"))
    assert changed != code_table()
    extra = text.replace(
        "<!-- end of endings table -->", "| `paused` | 0 | nothing | none |\n<!-- end of endings"
    )
    assert set(doc_table(extra)) - set(code_table()) == {"paused"}


def test_report_json_takes_exactly_the_endings_words() -> None:
    status = RunReport.model_fields["status"].annotation
    assert set(get_args(status)) == {e.value for e in Ending}


def _steps(failed: str, code: int | None, message: str = "") -> list[dict[str, Any]]:
    return [
        {
            "name": n,
            "status": "failed" if n == failed else "succeeded",
            "exit_code": code if n == failed else 0,
            "seconds": 0.1,
            "attempt_details": [{"message": message if n == failed else ""}],
        }
        for n in STEPS
    ]


@pytest.mark.parametrize(
    ("steps", "workflow", "status", "code"),
    [
        (_steps("train", 75), "Error (exit code 75)", "preempted", 75),
        (_steps("train", 75), "stopped by signal 15 (like `argo stop`)", "cancelled", 130),
        (_steps("provision", 75), "stopped by signal 2 (like `argo stop`)", "cancelled", 130),
        (_steps("train", 137), "Error (exit code 137)", "lost", 137),
        (_steps("provision", 4), "Error (exit code 4)", "failed", 4),
    ],
)
def test_the_report_decides_the_ending_from_facts(
    tmp_path: Path, steps: list[dict[str, Any]], workflow: str, status: str, code: int
) -> None:
    paths = RunPaths(tmp_path, "r1").create()
    r = build_report(paths, steps, workflow)
    assert (r["status"], r["exit_code"]) == (status, code)


def _node(name: str, phase: str, exit_code: str | None, at: str, message: str = "") -> dict:
    node: dict[str, Any] = {
        "id": f"{name}-{at}",
        "name": f"wf-1.{name}",
        "displayName": name,
        "type": "Pod",
        "phase": phase,
        "startedAt": at,
        "message": message,
    }
    if exit_code is not None:
        node["outputs"] = {"exitCode": exit_code}
    return node


def _workflow(phase: str, message: str, nodes: list[dict]) -> dict:
    return {
        "metadata": {"name": "wf-1"},
        "spec": {"workflowTemplateRef": {"name": "burst-train"}},
        "status": {
            "phase": phase,
            "message": message,
            "progress": "6/6",
            "nodes": {n["id"]: n for n in nodes},
        },
    }


T1, T2, T3, T4 = (f"2026-01-01T00:0{i}:00Z" for i in range(1, 5))
PROVISION = _node("provision", "Succeeded", "0", T1)
TEARDOWN = _node("teardown", "Succeeded", "0", T4)


@pytest.mark.parametrize(
    ("phase", "message", "nodes", "ending", "code"),
    [
        (
            "Failed",
            "Stopped with strategy 'Stop'",
            [PROVISION, _node("train", "Failed", "75", T2), TEARDOWN],
            "cancelled",
            130,
        ),
        (
            "Failed",
            "child 'x' failed",
            [
                PROVISION,
                _node("train", "Failed", "75", T2),
                _node("give-up", "Failed", "75", T3),
                TEARDOWN,
            ],
            "preempted",
            75,
        ),
        (
            "Failed",
            "child 'x' failed",
            [
                PROVISION,
                _node("train", "Error", None, T2, "pod deleted"),
                _node("give-up", "Failed", "1", T3),
                TEARDOWN,
            ],
            "lost",
            137,
        ),
        (
            "Failed",
            "child 'x' failed",
            [
                PROVISION,
                _node("train", "Failed", "3", T2),
                _node("give-up", "Failed", "3", T3),
                TEARDOWN,
            ],
            "budget-stopped",
            3,
        ),
        (
            "Failed",
            "child 'x' failed",
            [_node("provision", "Failed", "4", T1), TEARDOWN],
            "failed",
            4,
        ),
        (
            "Succeeded",
            "",
            [PROVISION, _node("train", "Succeeded", "0", T2), TEARDOWN],
            "succeeded",
            0,
        ),
    ],
)
def test_an_argo_workflow_ends_in_the_same_words(
    httpserver: HTTPServer,
    monkeypatch: pytest.MonkeyPatch,
    burst_cli: Cli,
    tmp_path: Path,
    phase: str,
    message: str,
    nodes: list[dict],
    ending: str,
    code: int,
) -> None:
    monkeypatch.setenv("ARGO_SERVER", httpserver.url_for("/"))
    monkeypatch.setenv("ARGO_TOKEN", "t0k3n")
    monkeypatch.setenv("ARGO_NAMESPACE", "ml")
    httpserver.expect_request("/api/v1/workflows/ml/wf-1", method="GET").respond_with_json(
        _workflow(phase, message, nodes)
    )
    proc = burst_cli(["status", "wf-1", "--runs-root", str(tmp_path), "--json"])
    doc = json.loads(proc.stdout)
    assert (doc["status"], doc["exit_code"], doc["finished"]) == (ending, code, True)
    assert doc["ending"]["wording"] == ENDINGS[Ending(ending)].wording
    assert doc["ending"]["hint"] is None  # the hints name local commands
    assert proc.returncode == (0 if ending == "succeeded" else 1)
    text = burst_cli(["status", "wf-1", "--runs-root", str(tmp_path)])
    assert re.search(rf"^{re.escape(ending)} \(exit {code}\): ", text.stdout, re.M), text.stdout
