"""The decision record: what preflight decided, for which spec and which policies.

Schema (``DecisionRecord``, JSON):

    {
      "kind": "burst/decision-record", "version": 1,
      "spec_name": str, "spec_sha256": hex64, "policy_sha256": hex64, "policy_dir": str,
      "created_at": "YYYY-MM-DDTHH:MM:SSZ", "evaluated_on": "YYYY-MM-DD",
      "max_fact_age_days": int,
      "verdict": "allow" | "review" | "deny",       # best verdict over all candidates
      "allowed": [{"region", "provider"}, ...],      # candidates with verdict allow, spec order
      "counts": {"allow": n, "review": n, "deny": n},
      "data_may_leave": bool,        # false: a localisation duty keeps the data in its origin
                                     # (or the origin is unknown); the planner never moves it out
      "data_localisation": [{"fact", "stay_in": [country], "effect", "confidence", "source"}],
      "decisions": [
        {"region", "provider", "verdict",
         "data_may_move": bool,      # may the data be moved to this candidate? false when the
                                     # candidate is denied, a residency reason blocks it, or
                                     # it rests on an unsure residency fact
         "sources": [{"region", "country", "moves", "may_move"}],  # where the data is stored
         "reasons": [{"rule", "message", "source", "effect", "fact"?, "waived_by"?,
                      "waiver_expires"?}, ...],     # deny first, then review, then info
         "satisfied": [{"rule", "message", "source", "fact"?}, ...]}  # what satisfied each
                                     # rule that could have blocked it (the audit trail)
      ]
    }

The planner (burst/plan/placement.py) reads ``data_may_move`` per decision, and falls back to
the record's ``data_may_leave`` for a decision that does not carry it (fail closed).

``require_allow`` is what the provision step calls before it creates anything.
"""

from __future__ import annotations

import datetime as dt
import logging
from pathlib import Path
from typing import Any, Final

from burst.documents import Decision, DecisionRecord, parse_document, produce
from burst.documents.base import Detail
from burst.documents.decision import Counts, Location, Verdict
from burst.errors import BadInputError, PolicyRefusal
from burst.policy.engine import Engine, input_document
from burst.policy.loader import PolicySet, load_policies, policy_sha256
from burst.spec import BurstJob

log = logging.getLogger(__name__)

KIND: Final = "burst/decision-record"
VERSION: Final = 1
VERDICTS: Final[tuple[Verdict, ...]] = ("allow", "review", "deny")


def _utcnow() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def candidates(job: BurstJob) -> list[tuple[str, str]]:
    """Every (region, provider) of the spec, providers outer, regions in preference order."""
    return [(r, p) for p in job.compute.providers for r in job.compute.regions]


def evaluate(
    job: BurstJob,
    policies: PolicySet | None = None,
    *,
    today: dt.date | None = None,
    max_fact_age_days: int | None = None,
    now: dt.datetime | None = None,
) -> DecisionRecord:
    """Decide every candidate of ``job`` and return the decision record."""
    policies = policies or load_policies()
    now = now or _utcnow()
    today = today or now.date()
    max_age = max_fact_age_days or policies.settings.max_fact_age_days
    engine = Engine.shared(policies)
    decisions: list[Decision] = []
    may_leave: list[bool] = []
    localisation: list[dict[str, Any]] = []
    for region, provider in candidates(job):
        doc = input_document(job, region, provider, today=today, max_fact_age_days=max_age)
        result = engine.evaluate(doc)
        if "data_may_leave" in result:
            may_leave.append(result.pop("data_may_leave"))
        for duty in result.pop("localisation", []):
            if duty not in localisation:
                localisation.append(duty)
        decisions.append(decision_of(region, provider, result))
        log.info("preflight %s/%s: %s", provider, region, result["verdict"])
    verdicts = [d.verdict for d in decisions]
    counts = Counts(
        allow=verdicts.count("allow"), review=verdicts.count("review"), deny=verdicts.count("deny")
    )
    best: Verdict = next((v for v in VERDICTS if getattr(counts, v)), "deny")
    return DecisionRecord(
        kind=KIND,
        version=VERSION,
        spec_name=job.name,
        spec_sha256=job.sha256(),
        policy_sha256=policies.sha256,
        policy_dir=str(policies.root),
        created_at=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
        evaluated_on=today.isoformat(),
        max_fact_age_days=max_age,
        verdict=best,
        allowed=[
            Location(region=d.region, provider=d.provider)
            for d in decisions
            if d.verdict == "allow"
        ],
        counts=counts,
        # fail closed: rules that do not say whether the data may leave keep it home
        data_may_leave=bool(may_leave) and all(may_leave),
        data_localisation=[Detail(**duty) for duty in localisation],
        decisions=decisions,
    )


def decision_of(region: str, provider: str, result: dict[str, Any]) -> Decision:
    """One candidate's decision from the policy engine's result (its schema checked: a
    result of another shape is burst's bug, one line)."""
    return produce(Decision, {"region": region, "provider": provider, **result})


def first_reason(decision: Decision | dict[str, Any]) -> str:
    """The reason a table shows: the first blocking one; for an allow, the first waiver (what
    the allow rests on), else the first reason at all (an info note). Only a decision with no
    reasons at all shows "no rule objects"."""
    if isinstance(decision, Decision):
        decision = decision.model_dump(exclude_none=True)
    reasons = decision.get("reasons", [])
    for r in reasons:
        if r["effect"] in ("deny", "review") and "waived_by" not in r:
            return f"{r['rule']}: {r['message']}"
    waived = [r for r in reasons if "waived_by" in r]
    if waived:
        w = waived[0]
        fact = f" ({w['fact']})" if w.get("fact") else ""
        return f"{w['rule']}{fact} waived by exception {w['waived_by']}"
    if reasons:
        return f"{reasons[0]['rule']}: {reasons[0]['message']}"
    return "no rule objects"


def require_allow(
    record: DecisionRecord | dict[str, Any],
    spec: BurstJob,
    policy_dir: str | Path | None,
    region: str,
    provider: str,
    *,
    today: dt.date | None = None,
) -> dict[str, Any]:
    """Refuse (``PolicyRefusal``, exit 3) unless ``record`` allows (region, provider) for
    exactly this spec and the policies in ``policy_dir`` as they are now.

    Checks: the record's spec_sha256 is ``spec.sha256()``; its policy_sha256 is the hash of
    ``policy_dir`` (None: the default policy directory) now; the decision for (region,
    provider) is ``allow``; no exception it relied on has expired since. Returns that decision.
    A record that is not a decision record (``burst.documents.DecisionRecord``) raises
    ``BadInputError`` (exit 2).
    """
    record = parse_document(DecisionRecord, record, "input decision")
    if record.spec_sha256 != spec.sha256():
        raise PolicyRefusal(
            f"decision record is for spec sha256 {record.spec_sha256[:12]}, "
            f"not this spec ({spec.sha256()[:12]}): run preflight again"
        )
    root = Path(policy_dir) if policy_dir is not None else None
    if root is None:
        from burst.policy.loader import default_policy_dir

        root = default_policy_dir()
    current = policy_sha256(root)
    if record.policy_sha256 != current:
        raise PolicyRefusal(
            f"decision record is for policies sha256 {record.policy_sha256[:12]}, "
            f"but {root} is now {current[:12]}: run preflight again"
        )
    decision = record.decision(region, provider)
    if decision is None:
        raise PolicyRefusal(f"preflight did not decide {provider}/{region}: not allowed")
    if decision.verdict != "allow":
        raise PolicyRefusal(
            f"preflight verdict for {provider}/{region} is {decision.verdict}: "
            f"{first_reason(decision)}"
        )
    today = today or _utcnow().date()
    for r in decision.reasons:
        expires = r.waiver_expires
        if expires and _date(expires) <= today:
            raise PolicyRefusal(
                f"exception {r.waived_by} that allowed {provider}/{region} "
                f"({r.rule}) expired on {expires}: run preflight again"
            )
    return decision.model_dump(exclude_unset=True)


def _date(text: str) -> dt.date:
    try:
        return dt.date.fromisoformat(text)
    except ValueError:
        raise BadInputError(
            f"waiver_expires {text!r} is not a date (YYYY-MM-DD)", where="input decision"
        ) from None
