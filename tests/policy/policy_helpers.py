"""Helpers for the legal-preflight tests (imported by conftest and the tests)."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from burst.inputs import parse_yaml
from burst.spec import BurstJob

REPO = Path(__file__).resolve().parents[2]
POLICIES = REPO / "policies"
QUICKSTART = REPO / "examples" / "quickstart.yaml"


def merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else copy.deepcopy(v)
        return out
    return copy.deepcopy(over)


def job_from(over: dict[str, Any]) -> BurstJob:
    """The quickstart spec with ``over`` merged in (lists replace)."""
    base = parse_yaml(QUICKSTART.read_text(), str(QUICKSTART))  # as burst reads specs
    return BurstJob.model_validate(merge(base, over))


# Test-only sign-off (written into policy copies, never into policies/): the matrix's allow
# cases rent h100 (3A090.a) as an SG-headquartered organisation, and SG's place outside D:5
# is a LOW-confidence fact, so they are `review` unless signed off. Specs named SIGNED carry
# this sign-off; every other matrix spec is named "policy-matrix" and does not.
SIGNED = "matrix-sg-signed-off"
SIGNOFF = """exceptions:
  - id: matrix-sg-hq-outside-d5
    rule: FACT-LOW-CONFIDENCE
    scope: {specs: [matrix-sg-signed-off], facts: [export.screened_headquarters]}
    approver: "Test Reviewer <review@example.com>"
    approved: 2026-11-21
    expires: 2027-11-20
    justification: "test sign-off: SG headquarters treated as outside D:5 pending eCFR check"
"""


def add_signoff(policy_dir: Path) -> Path:
    path = policy_dir / "exceptions" / "matrix-signoff.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SIGNOFF)
    return path
