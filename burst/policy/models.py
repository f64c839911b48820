"""Pydantic models of the policy files in ``policies/`` (the facts, not the rules).

Every fact carries where it comes from (``source``), when someone last checked it
(``last_verified``) and how sure we are (``confidence``). The rules treat ``low`` and
``unknown`` confidence, and facts older than ``settings.max_fact_age_days``, as never
enough to allow.
"""

from __future__ import annotations

import datetime as dt
import re
from enum import StrEnum
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    field_validator,
    model_validator,
)
from pydantic import Strict as StrictType

COUNTRY = r"^[A-Z]{2}$"
JURISDICTION = r"^[A-Z]{2}(-[A-Z]{2,5})?$"
TOKEN = r"^[a-z][a-z0-9_]*$"


# Numbers in policy files are strict (``true`` is not 1) and finite, with sensible bounds.
Int = Annotated[int, StrictType()]
Float = Annotated[float, StrictType(), Field(allow_inf_nan=False)]
DAY_SECONDS = 86400


class Strict(BaseModel):
    model_config = ConfigDict(
        defer_build=True,
        extra="forbid",
        frozen=True,
        use_enum_values=True,
        allow_inf_nan=False,
        str_max_length=20_000,
    )


class Confidence(StrEnum):
    high = "high"  # read in primary text or a statute mirror
    med = "med"  # two or more consistent secondary sources
    low = "low"  # single secondary source, or unsourced background knowledge
    unknown = "unknown"  # not researched


class Effect(StrEnum):
    deny = "deny"
    review = "review"


def _as_list(v: object) -> object:
    return [v] if isinstance(v, str) else v


Sources = Annotated[list[str], BeforeValidator(_as_list)]


def _not_in_the_future(v: dt.date) -> dt.date:
    """A fact cannot have been verified after today: a future date would never grow stale, so
    the staleness rule (fail closed on old facts) would never fire for it. One day of slack
    for time zones."""
    latest = dt.datetime.now(dt.UTC).date() + dt.timedelta(days=1)
    if v > latest:
        raise ValueError(
            f"{v.isoformat()} is in the future (a fact is verified on or before today)"
        )
    return v


VerifiedOn = Annotated[dt.date, AfterValidator(_not_in_the_future)]


class Fact(Strict):
    """One sourced statement. ``rule`` is the statement in words."""

    rule: str = Field(min_length=1)
    source: Sources = Field(default_factory=list, description="URLs or document references.")
    confidence: Confidence
    last_verified: VerifiedOn
    note: str | None = None


class Outbound(Fact):
    """What a jurisdiction requires before personal data leaves it."""

    safeguard_required: bool = Field(description="A recorded safeguard is needed for a transfer.")
    accepted_safeguards: list[str] = Field(
        default_factory=list, description="Tokens in spec data.transfer_safeguards that count."
    )
    adequate_destinations: list[str] = Field(
        default_factory=list, description="Countries a transfer to needs no safeguard."
    )
    assessment_required: bool = Field(
        default=False, description="A transfer impact/risk assessment ('tia') is also needed."
    )
    assessment_waived_by: list[str] = Field(
        default_factory=list, description="Safeguards (derogations) that need no assessment."
    )
    always_review: str | None = Field(
        default=None, description="A duty no spec field can show done (e.g. a filing): review."
    )
    article: str | None = Field(
        default=None, description="The provision a satisfied transfer cites (e.g. PDPA s.26)."
    )
    dates: str | None = None

    @field_validator("accepted_safeguards", "assessment_waived_by")
    @classmethod
    def _tokens(cls, v: list[str]) -> list[str]:
        for t in v:
            if not re.match(TOKEN, t):
                raise ValueError(f"safeguard {t!r} must be a lowercase token (scc, bcr, consent)")
        return v

    @model_validator(mode="after")
    def _consistent(self) -> Outbound:
        if self.safeguard_required and not self.accepted_safeguards:
            raise ValueError("safeguard_required is true but accepted_safeguards is empty")
        return self


class Localization(Fact):
    """A duty to keep some data classes inside the jurisdiction's countries."""

    id: str = Field(pattern=r"^[a-z0-9-]+$", description="Short id, unique in the jurisdiction.")
    classes: list[str] = Field(min_length=1, description="Data classes the duty covers.")
    headquarters_in: list[str] | None = Field(
        default=None, description="Applies only when the organisation is based in these countries."
    )
    effect: Effect = Effect.deny


class ImportantData(Fact):
    """A regime for exporting non-personal 'important' or 'core' data (China's DSL/PIPL, Vietnam's
    Data Law): data of these classes leaving the jurisdiction reviews, since the spec cannot
    show it is not such data."""

    classes: list[str] = Field(min_length=1, description="Data classes the regime may cover.")


class Jurisdiction(Strict):
    name: str = Field(min_length=1)
    law: str = Field(min_length=1)
    countries: list[str] = Field(
        description="Countries whose regions count as inside (empty for free zones)."
    )
    host: str | None = Field(
        default=None,
        pattern=COUNTRY,
        description="For a free zone: the country it lies in (whose localisation may bind it).",
    )
    host_localization: Fact | None = Field(
        default=None,
        description="Whether the host country's localisation duties bind this free zone "
        "(confidence unknown when the sources do not settle it: such data reviews).",
    )
    source: Sources = Field(default_factory=list)
    outbound: Outbound | None = None
    inbound_rented_region: Fact | None = None
    localization: list[Localization] = Field(default_factory=list)
    localization_general: Fact | None = Field(
        default=None,
        description="What the sources say about localisation in general (e.g. 'none general; "
        "sectoral rules'): every decision that lets data leave rests on it.",
    )
    important_data: ImportantData | None = Field(
        default=None,
        description="An export regime for important/core (non-personal) data, when the "
        "jurisdiction has one.",
    )
    breach: Fact | None = None
    note: str | None = None
    other_facts: dict[str, Fact] = Field(
        default_factory=dict,
        description="Further sourced statements of the fact sheet about this jurisdiction "
        "(status, scope exclusions, adequacy lists), kept with their confidence and date.",
    )

    @model_validator(mode="after")
    def _host(self) -> Jurisdiction:
        if (self.host is None) != (self.host_localization is None):
            raise ValueError("host and host_localization go together (free zones only)")
        return self

    @field_validator("countries")
    @classmethod
    def _countries(cls, v: list[str]) -> list[str]:
        for c in v:
            if not re.match(COUNTRY, c):
                raise ValueError(f"country {c!r} must be an ISO 3166-1 alpha-2 code")
        return v

    @model_validator(mode="after")
    def _unique_ids(self) -> Jurisdiction:
        ids = [loc.id for loc in self.localization]
        if len(set(ids)) != len(ids):
            raise ValueError("two localization entries share an id")
        return self


class JurisdictionsFile(Strict):
    jurisdictions: dict[str, Jurisdiction]

    @field_validator("jurisdictions")
    @classmethod
    def _codes(cls, v: dict[str, Jurisdiction]) -> dict[str, Jurisdiction]:
        for code in v:
            if not re.match(JURISDICTION, code):
                raise ValueError(f"jurisdiction code {code!r} must look like SG, AE-DIFC or EU")
        return v


GROUP = r"^[A-E]:[0-9](\|[A-E]:[0-9])*$"


class CountryGroups(Fact):
    """The region's country in the EAR country groups (15 CFR Part 740 Supp. 1), as the fact
    sheet places it. ``D:1|D:4`` means one of them (the sheet does not say which)."""

    groups: list[str] = Field(
        default_factory=list, description="Groups the country is in, e.g. D:4, A:6, D:1|D:4."
    )
    not_in: list[str] = Field(default_factory=list, description="Groups it is believed not in.")
    destination_licence: bool = Field(
        description="3A090/4A090 need a destination licence there (since 2023-11-17)."
    )
    contested: bool = Field(
        default=False, description="The sources disagree on the membership (e.g. Israel)."
    )

    @field_validator("groups", "not_in")
    @classmethod
    def _groups(cls, v: list[str]) -> list[str]:
        for g in v:
            if not re.match(GROUP, g):
                raise ValueError(f"country group {g!r} must look like D:4, A:6 or D:1|D:4")
        return v


class SpotNotice(Fact):
    """How much warning a spot/preemptible instance gets before it is reclaimed there."""

    seconds: Int | None = Field(
        ge=0, le=DAY_SECONDS, description="Advance notice in seconds; null when none is documented."
    )


class Region(Strict):
    name: str = Field(min_length=1)
    country: str = Field(pattern=COUNTRY)
    country_groups: CountryGroups
    spot_notice: SpotNotice
    gpu_types: list[str] = Field(default_factory=list, description="GPU types seen there.")
    access: Literal["open", "opt_in", "restricted"] = "open"
    note: str | None = None


class ProviderRegions(Strict):
    source: Sources = Field(min_length=1)
    confidence: Confidence
    last_verified: VerifiedOn
    note: str | None = None
    regions: dict[str, Region] = Field(min_length=1)


class RegionsFile(Strict):
    providers: dict[str, ProviderRegions]


class Feature(Fact):
    """A provider feature: available true/false, or None when nobody checked."""

    available: bool | None = None

    @model_validator(mode="after")
    def _unknown_means_unknown(self) -> Feature:
        if self.available is None and self.confidence != Confidence.unknown:
            raise ValueError("available is not set, so confidence must be 'unknown'")
        return self


class Provider(Strict):
    name: str = Field(min_length=1)
    customer_managed_keys: Feature
    audit_logs: Feature
    breach_notification: Feature
    data_processing_agreement: Feature
    preemption_notice: Fact
    preemption_notice_seconds: Int | None = Field(default=None, ge=0, le=DAY_SECONDS)


class ProvidersFile(Strict):
    providers: dict[str, Provider]


class AcceleratorClass(Fact):
    gpu_types: list[str] = Field(min_length=1)


class HeadquartersRule(Fact):
    countries: list[str] = Field(min_length=1, description="D:5 countries and Macau.")
    controlled_classes: list[str] = Field(min_length=1)
    effect: Effect = Effect.deny


class ModelWeightsRule(Fact):
    threshold_ops: Float = Field(gt=0, le=1e40)
    effect: Effect = Effect.review


class ExportFile(Strict):
    accelerator_classes: dict[str, AcceleratorClass]
    headquarters_rule: HeadquartersRule
    screened_headquarters: Fact = Field(
        description="Countries the fact sheet places outside D:5 (others: unknown, review)."
    )
    screened_countries: list[str]
    destination_licence: Fact
    destination_licence_countries: list[str]
    model_weights: ModelWeightsRule
    controlled_models: Fact
    export_controlled_data: Fact

    @model_validator(mode="after")
    def _known_classes(self) -> ExportFile:
        for c in self.headquarters_rule.controlled_classes:
            if c not in self.accelerator_classes:
                raise ValueError(f"headquarters_rule names class {c!r}, not in accelerator_classes")
        return self


class DataClassInfo(Strict):
    description: str = Field(min_length=1)
    personal: bool = Field(description="Personal-data transfer rules apply.")
    requires_customer_managed_keys: bool
    localisation_fact_required: bool = Field(
        default=False,
        description="Data of this class may leave a jurisdiction only when that jurisdiction "
        "has a localisation fact for the class on record; none: review (the fact sheet "
        "researched such rules, e.g. government-data hosting, only for some countries).",
    )


class ModelUpdateFact(Fact):
    """Whether a rule that binds the data also binds model updates derived from it (the
    pseudo-gradients a regional worker sends to the aggregation region, issue 21).
    ``covered`` None: nobody knows (confidence must then be ``unknown``)."""

    covered: bool | None = Field(
        default=None,
        description="true: the rule extends to updates; false: it does not; null: unknown.",
    )

    @model_validator(mode="after")
    def _unknown_means_unknown(self) -> ModelUpdateFact:
        if self.covered is None and self.confidence != Confidence.unknown:
            raise ValueError("covered is not set, so confidence must be 'unknown'")
        return self


class ModelUpdateFacts(Strict):
    """One fact per kind of rule that can bind a shard (XFER-MODEL-UPDATE reads them)."""

    personal: ModelUpdateFact
    localisation: ModelUpdateFact
    export_controlled: ModelUpdateFact
    important_data: ModelUpdateFact


class DataClassesFile(Strict):
    data_classes: dict[str, DataClassInfo]
    model_updates: ModelUpdateFacts | None = Field(
        default=None,
        description="Whether the data's rules extend to model updates derived from it "
        "(absent: unknown, so regional-sync updates of such data review).",
    )


class Settings(Strict):
    max_fact_age_days: Int = Field(
        default=365, ge=1, le=3650, description="Older facts never allow (at most ten years)."
    )
    fact_sheet: str | None = None


NO_WILDCARD = "must list what the sign-off was justified for (no '*')"


class OrganizationBinding(Strict):
    """The organisation a sign-off was justified for: the spec's ``organization`` must match
    (name compared without case or surrounding blanks; the same parent, null for none)."""

    name: str = Field(min_length=1)
    headquarters: str = Field(pattern=COUNTRY)
    parent_headquarters: str | None = Field(
        default=None, pattern=COUNTRY, description="null: the organisation has no parent."
    )


class Scope(Strict):
    """What a sign-off binds to. ``organization``, ``facts``, ``regions`` and ``providers``
    are required and explicit; the rest are optional selectors (default: any)."""

    organization: OrganizationBinding
    facts: list[str] = Field(
        min_length=1,
        description="Fact ids a waived reason cites (e.g. export.screened_headquarters).",
    )
    regions: list[str] = Field(min_length=1)
    providers: list[str] = Field(min_length=1)
    specs: list[str] = Field(default_factory=lambda: ["*"], description="Spec names.")
    spec_sha256: list[str] = Field(
        default_factory=lambda: ["*"], description="Spec hashes (BurstJob.sha256())."
    )
    origins: list[str] = Field(default_factory=lambda: ["*"])
    classifications: list[str] = Field(default_factory=lambda: ["*"])

    @field_validator("facts", "regions", "providers")
    @classmethod
    def _explicit(cls, v: list[str]) -> list[str]:
        if any(x.strip() in ("", "*") for x in v):
            raise ValueError(NO_WILDCARD)
        return v


class PolicyException(Strict):
    """A signed-off exception: turns one rule's ``review`` into ``allow`` within a scope."""

    id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
    rule: str = Field(pattern=r"^[A-Z][A-Z0-9-]+$")
    scope: Scope
    approver: str = Field(min_length=3, description="Who signed it off (name <email>).")
    approved: dt.date
    expires: dt.date
    justification: str = Field(min_length=10)
    ticket: str | None = None

    @model_validator(mode="after")
    def _dates(self) -> PolicyException:
        if self.expires <= self.approved:
            raise ValueError("expires must be after approved")
        if (self.expires - self.approved).days > 366:
            raise ValueError("an exception may last at most one year")
        return self


class ExceptionFile(Strict):
    exceptions: list[PolicyException] = Field(min_length=1)
