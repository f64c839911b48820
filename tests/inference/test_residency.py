"""Which regions may serve a request: the preflight's own rules, transfer kind "inference"."""

from __future__ import annotations

from pathlib import Path

from burst.inference.residency import DataKey, inference_residency
from burst.inference.routing import Request, TierState, plan_request
from burst.spec import load_spec

QUICKSTART = Path(__file__).resolve().parents[2] / "examples" / "quickstart.yaml"

EDGE, HEAVY = "ap-southeast-1", "me-central-1"


def test_preflight_decides_where_requests_may_go() -> None:
    job = load_spec(QUICKSTART)
    kept, open_ = DataKey("personal", "SG", EDGE), DataKey("internal", "SG", EDGE)
    residency = inference_residency(job, [kept, open_], [EDGE, HEAVY, "nowhere-1"], "aws")
    assert residency.allowed(open_) == {EDGE, HEAVY}
    assert residency.allowed(kept) == {EDGE}
    denied = residency.ruling(kept, HEAVY)
    assert denied.verdict == "deny" and "XFER-NO-SAFEGUARD" in denied.reason
    assert not residency.ruling(open_, "nowhere-1").allowed  # unknown region: fail closed
    # the router names the preflight's reason when it leaves the heavy tier out
    tiers = (TierState("heavy", "heavy", HEAVY, service_ms=30.0),)
    plan = plan_request(Request("r", kept, 500.0, "high"), tiers, residency, {})
    assert [s.action for s in plan.steps] == ["refuse"]
    assert "XFER-NO-SAFEGUARD" in plan.skipped[0].reason
