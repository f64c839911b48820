"""`burst report` shows the back-to-spot decision of an attempt on an on-demand fallback: in
report.json's attempt summary (its decision, figures, candidate) and one line of the text
report, moved or stayed, the saving against the move's cost and margin."""

from __future__ import annotations

from typing import Any

from burst.documents.base import Detail
from burst.documents.report import AttemptSummary
from burst.documents.train import TrainAttempt
from burst.obs.report import _attempt
from burst.obs.report_text import back_to_spot_line

CANDIDATE = {"region": "ap-southeast-1", "provider": "aws", "capacity": "spot"}


def _summary(**record: Any) -> AttemptSummary:
    # report.json's attempt, validated by its model (unknown fields are refused)
    return AttemptSummary.model_validate(_attempt(TrainAttempt(attempt=2, **record)))


def _decision(decision: str, saving: float, reason: str) -> Detail:
    return Detail.model_validate(
        {
            "decision": decision,
            "reason": reason,
            "saving_usd": saving,
            "move_cost_usd": 3.5,
            "margin_usd": 1.0,
            "terms": [{"term": "save", "usd": 0.5, "detail": "30 s"}],
            "probe": "local",
            "candidate": CANDIDATE,
            "at_step": 40,
            "probes": 3,
        }
    )


def test_a_move_back_to_spot_is_in_the_report() -> None:
    a = _summary(outcome="moved", back_to_spot=_decision("move", 120.25, "move to ..."))
    assert a.back_to_spot is not None
    kept = a.back_to_spot.model_dump()
    assert kept["decision"] == "move" and kept["candidate"] == CANDIDATE
    assert "terms" not in kept  # (the record keeps them)
    assert back_to_spot_line(a) == (
        "back to spot: attempt 2 moved to aws/ap-southeast-1 spot at step 40: saving $120.25 "
        "against move cost $3.50 + margin $1.00"
    )


def test_a_stay_on_demand_is_in_the_report_with_why() -> None:
    a = _summary(outcome="done", spot_probe=_decision("stay", 2.0, "stay on demand: ..."))
    assert back_to_spot_line(a) == (
        "back to spot: attempt 2 stayed on demand (aws/ap-southeast-1 spot probed, 3 probes) "
        "at step 40: saving $2.00 against move cost $3.50 + margin $1.00"
    )
    # a saving that would pay for the move: the line says why it stayed anyway
    no_room = _summary(spot_probe=_decision("stay", 50.0, "stay: no spot capacity on X"))
    line = back_to_spot_line(no_room)
    assert line is not None and line.endswith("(stay: no spot capacity on X)")


def test_no_fallback_no_line() -> None:
    a = _summary(outcome="done")
    assert a.back_to_spot is None and back_to_spot_line(a) is None
