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


# Sign-offs bind to an organisation (name and headquarters), so the matrix's specs are made
# by two test organisations, neither of them the demo's (Example Labs Pte Ltd, whose shipped
# sign-offs must never apply here): specs named SIGNED belong to SIGNED_ORG, which the
# test-only SIGNOFF below binds to; specs named MATRIX_NAME belong to UNSIGNED_ORG.
SIGNED = "matrix-sg-signed-off"
MATRIX_NAME = "policy-matrix"
SIGNED_ORG = "Matrix Signed Org Pte Ltd"
UNSIGNED_ORG = "Matrix Unsigned Org Pte Ltd"


def job_from(over: dict[str, Any]) -> BurstJob:
    """The quickstart spec with ``over`` merged in (lists replace). A spec named SIGNED or
    MATRIX_NAME is made by SIGNED_ORG or UNSIGNED_ORG (unless ``over`` names the organisation)."""
    base = parse_yaml(QUICKSTART.read_text(), str(QUICKSTART))  # as burst reads specs
    org = {SIGNED: SIGNED_ORG, MATRIX_NAME: UNSIGNED_ORG}.get(over.get("name", ""))
    if org is not None:
        base["organization"]["name"] = org
    return BurstJob.model_validate(merge(base, over))


# Test-only sign-off (written into policy copies, never into policies/): the matrix's allow
# cases rent h100 (3A090.a) as an SG-headquartered organisation; SG's place outside D:5 and
# the regions' country groups are LOW-confidence facts, so they are `review` unless signed off.
SIGNOFF = """exceptions:
  - id: matrix-sg-hq-outside-d5
    rule: FACT-LOW-CONFIDENCE
    scope:
      organization: {name: Matrix Signed Org Pte Ltd, headquarters: SG, parent_headquarters: null}
      facts: [export.screened_headquarters, regions.aws.ap-southeast-1.country_groups,
              regions.aws.ap-southeast-3.country_groups, regions.gcp.asia-southeast1.country_groups]
      regions: [ap-southeast-1, ap-southeast-3, asia-southeast1, me-central-1]
      providers: [aws, gcp]
    approver: "Test Reviewer <review@example.com>"
    approved: 2026-11-21
    expires: 2027-11-20
    justification: "test sign-off: SG headquarters outside D:5, SG/ID outside D:1/D:4, pending eCFR"
"""
SIGNOFF_FACTS = {
    "export.screened_headquarters",
    "regions.aws.ap-southeast-1.country_groups",
    "regions.aws.ap-southeast-3.country_groups",
    "regions.gcp.asia-southeast1.country_groups",
}


def add_signoff(policy_dir: Path) -> Path:
    path = policy_dir / "exceptions" / "matrix-signoff.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(SIGNOFF)
    return path
