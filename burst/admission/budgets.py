"""Team budgets: GPU-hours and dollars over rolling windows, with dated overrides.

The budgets live next to the ledger (``teams.yaml`` in the ledger store, ``burst budget
--set FILE`` writes it), so every submitter (a laptop, CI, an Argo pod) reads the same
limits. A team without an entry has no limit: its runs are still recorded. The format
(``examples/teams.yaml``)::

    teams:
      ml-research:
        day:   {usd: 2000, gpu_hours: 400}
        week:  {usd: 8000}
        month: {usd: 25000, gpu_hours: 5000}
        overrides:
          - {window: week, start: 2026-12-01, end: 2026-12-08, usd: 15000, reason: deadline}

Windows are rolling: ``day`` is the last 24 hours, ``week`` 7 days, ``month`` 30 days. An
override replaces the limits it names for its window while ``start <= now < end`` (UTC;
the last matching override in the file wins).
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from burst.errors import BadInputError

Window = Literal["day", "week", "month"]
WINDOWS: tuple[Window, ...] = ("day", "week", "month")
WINDOW_S: dict[str, float] = {"day": 86400.0, "week": 7 * 86400.0, "month": 30 * 86400.0}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, defer_build=True)


class Limit(_Strict):
    usd: float | None = Field(default=None, ge=0, description="Dollars in the window.")
    gpu_hours: float | None = Field(default=None, ge=0, description="GPU-hours in the window.")


class Override(_Strict):
    window: Window
    start: dt.datetime | dt.date
    end: dt.datetime | dt.date
    usd: float | None = Field(default=None, ge=0)
    gpu_hours: float | None = Field(default=None, ge=0)
    reason: str = ""

    @staticmethod
    def _ts(v: dt.datetime | dt.date) -> float:
        if not isinstance(v, dt.datetime):
            v = dt.datetime(v.year, v.month, v.day, tzinfo=dt.UTC)
        elif v.tzinfo is None:
            v = v.replace(tzinfo=dt.UTC)
        return v.timestamp()

    @property
    def start_ts(self) -> float:
        return self._ts(self.start)

    @property
    def end_ts(self) -> float:
        return self._ts(self.end)

    @model_validator(mode="after")
    def _ordered(self) -> Override:
        if self.end_ts <= self.start_ts:
            raise ValueError("end must be after start")
        if self.usd is None and self.gpu_hours is None:
            raise ValueError("an override names usd, gpu_hours or both")
        return self


class TeamBudget(_Strict):
    day: Limit | None = None
    week: Limit | None = None
    month: Limit | None = None
    overrides: list[Override] = Field(default_factory=list)

    def limit(self, window: Window, now: float) -> tuple[Limit | None, Override | None]:
        """The window's limit at ``now``: the base, with the active override's values."""
        base: Limit | None = getattr(self, window)
        active = None
        for o in self.overrides:
            if o.window == window and o.start_ts <= now < o.end_ts:
                active = o
        if active is None:
            return base, None
        merged = Limit(
            usd=active.usd if active.usd is not None else (base.usd if base else None),
            gpu_hours=active.gpu_hours
            if active.gpu_hours is not None
            else (base.gpu_hours if base else None),
        )
        return merged, active


class TeamsFile(_Strict):
    teams: dict[str, TeamBudget] = Field(default_factory=dict)

    def budget(self, team: str) -> TeamBudget | None:
        return self.teams.get(team)


def parse_teams(text: str, where: str) -> TeamsFile:
    """Parse a teams file; one line naming the first problem and where (exit 2)."""
    try:
        raw = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise BadInputError(f"not YAML: {' '.join(str(exc).split())}", where=where) from exc
    try:
        return TeamsFile.model_validate(raw)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(x) for x in err["loc"])
        raise BadInputError(f"{loc}: {err['msg']}", where=where) from exc
