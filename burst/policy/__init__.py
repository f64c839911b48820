"""Legal preflight: facts and Rego rules in ``policies/``, one decision per candidate.

from burst.policy import evaluate, load_policies, require_allow
record = evaluate(job, load_policies("policies"))      # the decision record (DecisionRecord)
require_allow(record, job, "policies", "ap-southeast-1", "aws")   # provision's gate
"""

from burst.policy.loader import PolicyFileError, PolicySet, default_policy_dir, load_policies
from burst.policy.record import evaluate, first_reason, require_allow

__all__ = [
    "PolicyFileError",
    "PolicySet",
    "default_policy_dir",
    "evaluate",
    "first_reason",
    "load_policies",
    "require_allow",
]
