"""The failure line a person reads (`burst run`'s "failed at STEP (exit N): ...", `burst status`'s
"message:", `burst report`) is the step's last error in words, never a raw JSON log record
(issue 46, "Output": steps log JSON records, and a step killed before it printed its one-line
error left the report quoting its last JSON line that contained "error", or a record whose
fields merely held the word, such as ``"errors": []``)."""

from __future__ import annotations

import json
from pathlib import Path

from burst.obs.report import build_report
from burst.runs import RunPaths

STEPS = ["preflight", "plan", "verify-image", "provision", "train", "teardown"]


def _record(level: str, msg: str, **fields: object) -> str:
    doc = {"ts": "2026-01-01T00:00:01.000Z", "level": level, "msg": msg, "step": "train"}
    return json.dumps({**doc, **fields})


def _report(tmp_path: Path, log_lines: list[str]) -> dict[str, object]:
    paths = RunPaths(tmp_path, "r1").create()
    paths.log("train").write_text("\n".join(log_lines) + "\n")
    steps = [
        {
            "name": n,
            "status": "failed" if n == "train" else "succeeded",
            "exit_code": 137 if n == "train" else 0,
            "seconds": 0.1,
        }
        for n in STEPS
    ]
    return build_report(paths, steps, "Error (exit code 137)")


def test_a_json_error_record_is_its_message(tmp_path: Path) -> None:
    report = _report(
        tmp_path,
        [
            _record("info", "step 5 loss 0.61"),
            _record("error", "checkpoint upload to file:///s failed: disk full"),
            _record("info", "checkpoint.committed", errors=[]),  # the word, not an error
            "a program's own line",
        ],
    )
    failure = report["failure"]
    assert isinstance(failure, dict)
    assert failure["message"] == "checkpoint upload to file:///s failed: disk full"


def test_a_plain_error_line_stays_as_written(tmp_path: Path) -> None:
    report = _report(
        tmp_path,
        [_record("error", "first"), "burst train: error: the store did not answer (exit 4)"],
    )
    failure = report["failure"]
    assert isinstance(failure, dict)
    assert failure["message"] == "burst train: error: the store did not answer (exit 4)"
