"""The decision record: what preflight decided, for which spec and which policies.

Written by the preflight step (``burst.policy.record.evaluate``); read by plan (verdicts and
``data_may_move``) and provision (``require_allow``). One validation, here, for all three.
"""

from __future__ import annotations

from typing import Any, Final, Literal

from pydantic import Field, StrictBool, model_validator

from burst.documents.base import Detail, Document, StepDocument

KIND: Final = "burst/decision-record"
VERSION: Final = 1
Verdict = Literal["allow", "review", "deny"]
Effect = Literal["deny", "review", "info"]
HEX64 = r"^[0-9a-f]{64}$"


class Reason(Document):
    """Why a rule decided what it did; ``waived_by`` names the exception that waives it."""

    rule: str = Field(min_length=1)
    effect: Effect
    message: str
    source: str
    fact: str | None = None
    waived_by: str | None = None
    waiver_expires: str | None = Field(default=None, description="YYYY-MM-DD")


class Satisfied(Document):
    """A rule that could have blocked the candidate, and what satisfied it (audit trail)."""

    rule: str = Field(min_length=1)
    message: str
    source: str
    fact: str | None = None


class DataSource(Detail):
    """Where the data is stored today, and whether it may move from there to the candidate."""

    region: str | None = None
    country: str | None = None
    moves: bool | None = None
    may_move: bool | None = None


class Decision(Document):
    """The verdict for one candidate (region, provider)."""

    region: str = Field(min_length=1)
    provider: str = Field(min_length=1)
    verdict: Verdict
    reasons: list[Reason] = Field(default_factory=list)
    satisfied: list[Satisfied] = Field(default_factory=list)
    sources: list[DataSource] = Field(default_factory=list)
    data_may_move: StrictBool | None = Field(
        default=None,
        description="May the data be moved to this candidate? Absent: the record's "
        "data_may_leave decides (fail closed).",
    )


class Location(Document):
    region: str
    provider: str


class Counts(Document):
    allow: int = Field(ge=0)
    review: int = Field(ge=0)
    deny: int = Field(ge=0)


class DecisionRecord(StepDocument):
    """The preflight step's document (kind ``burst/decision-record``)."""

    kind: Literal["burst/decision-record"] = KIND
    version: Literal[1] = VERSION
    spec_name: str | None = None
    spec_sha256: str = Field(pattern=HEX64, description="sha256 of the canonical spec.")
    policy_sha256: str = Field(pattern=HEX64, description="sha256 of the policy directory.")
    policy_dir: str | None = None
    created_at: str | None = Field(default=None, description="YYYY-MM-DDTHH:MM:SSZ")
    evaluated_on: str | None = Field(default=None, description="YYYY-MM-DD")
    max_fact_age_days: int | None = None
    verdict: Verdict | None = Field(default=None, description="Best verdict of any candidate.")
    allowed: list[Location] = Field(default_factory=list)
    counts: Counts | None = None
    data_may_leave: StrictBool | None = Field(
        default=None,
        description="false: a localisation duty keeps the data in its origin (the planner "
        "never moves it out).",
    )
    data_localisation: list[Detail] = Field(default_factory=list)
    decisions: list[Decision]

    @model_validator(mode="before")
    @classmethod
    def _is_a_record(cls, data: Any) -> Any:
        if isinstance(data, dict) and not data.get("spec_sha256"):
            raise ValueError(
                "no spec_sha256: not a decision record "
                "(make one with `burst preflight SPEC --out FILE`)"
            )
        return data

    def decision(self, region: str, provider: str) -> Decision | None:
        return next(
            (d for d in self.decisions if d.region == region and d.provider == provider), None
        )

    def may_move(self, decision: Decision | None) -> bool:
        """May the data move to this candidate? The decision's ``data_may_move`` first, else
        the record's ``data_may_leave``; a record that says neither leaves it unchecked."""
        if decision is not None and decision.data_may_move is not None:
            return decision.data_may_move
        return True if self.data_may_leave is None else self.data_may_leave
