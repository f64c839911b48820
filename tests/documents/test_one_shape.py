"""One implementation per concept (issue 14): the attempt records' prefix and reader, the
decision record's validation and the save result are defined once."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SOURCES = [p for d in ("burst", "steps") for p in (REPO / d).rglob("*.py")]


def _defining(pattern: str) -> list[str]:
    rx = re.compile(pattern)
    return sorted(str(p.relative_to(REPO)) for p in SOURCES if rx.search(p.read_text()))


def test_the_attempt_prefix_is_written_once() -> None:
    assert _defining(r"[\"']train/attempts/") == ["burst/documents/train.py"]


def test_attempt_records_are_read_in_one_place() -> None:
    # every reader of the attempt prefix goes through burst.attempt_records
    assert _defining(r"\.list\((ATTEMPTS_)?PREFIX\)") == ["burst/attempt_records.py"]


def test_the_decision_record_is_validated_by_its_model_only() -> None:
    # the hand-written shape checks of policy, plan and provision are gone
    assert _defining(r"kind must be burst/decision-record|_check_shape|def _may_move") == []


def test_one_save_result() -> None:
    # read as text: this process avoids importing torch (it aborted here after regopy loaded)
    assert _defining(r"class SaveResult\b") == ["burst/checkpoint/manager.py"]
    loop_side = (REPO / "burst" / "train" / "checkpoints.py").read_text()
    assert re.search(r"from burst\.checkpoint import [^\n]*\bSaveResult\b", loop_side)
