"""The per-team ledger: one small JSON entry per run, in an object store, and a team lock.

Where: ``BURST_LEDGER`` (an object store URL), else the aws stack's Terraform state bucket
(``BURST_TF_STATE_BUCKET``: ``s3://<bucket>/burst/ledger``, beside the runs' state and
heartbeats; the provision and teardown pods already have it), else ``<runs root>/ledger``
(a local directory, one machine). Layout::

    teams.yaml                      the budgets (burst.admission.budgets)
    <team>/runs/<run-id>.json       the run's entry: reservation, settlement, state
    <team>/lock.json                the team's admission lock (a burst.lease.Lease)

Only a run writes its own entry, so settling and requeueing need no lock. Admitting a run
of a team with a budget is check-then-write: it holds the team's lock, taken the way a run
lease is (write, wait the settle time, read back; ``burst.lease``: this works on S3 and on
``rclone serve s3``, which ignores conditional PUT headers), reads every entry of the team,
checks the windows, writes the reservation, and releases the lock. Two admissions racing for
the last of a budget are serialised by the lock; the second sees the first's reservation.
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from burst.admission.budgets import WINDOW_S, WINDOWS, Limit, Override, TeamsFile, parse_teams
from burst.errors import InfraError
from burst.lease import Lease, LeaseHeld, describe_holder, read_lease, settle_s
from burst.storage.base import ObjectMissing, ObjectStore, StoreError

log = logging.getLogger(__name__)

TEAMS_KEY = "teams.yaml"
LOCK_TTL_S = 30.0
DEFAULT_LOCK_WAIT_S = 120.0

EntryState = Literal["queued", "admitted", "refused", "settled"]


class Entry(BaseModel):
    """One run's line in its team's ledger."""

    model_config = ConfigDict(extra="forbid", defer_build=True)

    run_id: str
    team: str
    priority: str = "normal"
    state: EntryState
    at: float = Field(description="When the run was admitted (or refused), epoch seconds.")
    gpus: int = 0
    budget_hours: float = 0.0
    reserved_usd: float = 0.0
    reserved_gpu_hours: float = 0.0
    compute_usd: float = 0.0
    egress_usd: float = 0.0
    storage_usd: float = 0.0
    requeues: int = 0
    actual_usd: float | None = None
    actual_gpu_hours: float | None = None
    settled_at: float | None = None
    basis: str | None = None
    refusal: str | None = None
    ending: str | None = Field(
        default=None,
        description="How the run ended when it was settled (burst.endings; 'reaped' by burst "
        "down or burst reap).",
    )
    used_from: float | None = Field(
        default=None, description="When its usage began (its first train attempt's start)."
    )
    used_to: float | None = Field(
        default=None, description="When its usage ended (its last train attempt's end)."
    )

    def charge(self) -> tuple[float, float]:
        """What the entry counts against its team now: (usd, gpu_hours)."""
        if self.state == "admitted":
            return self.reserved_usd, self.reserved_gpu_hours
        if self.state == "settled":
            return float(self.actual_usd or 0.0), float(self.actual_gpu_hours or 0.0)
        return 0.0, 0.0

    def share(self, since: float, until: float) -> float:
        """The part of the entry's charge that falls in ``[since, until]``. An open reservation
        counts in full in every window (it may still be spent); a settled run's usage is
        spread evenly over the hours it happened (``used_from`` to ``used_to``), so a run that
        spans midnight counts on both days."""
        if self.state == "admitted":
            return 1.0
        if self.state != "settled":
            return 0.0
        end = float(self.used_to if self.used_to is not None else (self.settled_at or self.at))
        start = float(self.used_from if self.used_from is not None else self.at)
        start = min(start, end)
        if end - start <= 0:
            return 1.0 if since <= end <= until else 0.0
        overlap = min(end, until) - max(start, since)
        return max(0.0, min(1.0, overlap / (end - start)))


@dataclass(frozen=True)
class Standing:
    """A team's window: its limit now, what is used in it, what remains."""

    window: str
    limit: Limit
    override: Override | None
    used_usd: float
    used_gpu_hours: float

    @property
    def remaining_usd(self) -> float | None:
        return None if self.limit.usd is None else self.limit.usd - self.used_usd

    @property
    def remaining_gpu_hours(self) -> float | None:
        gh = self.limit.gpu_hours
        return None if gh is None else gh - self.used_gpu_hours

    def as_dict(self) -> dict[str, object]:
        return {
            "window": self.window,
            "limit_usd": self.limit.usd,
            "limit_gpu_hours": self.limit.gpu_hours,
            "used_usd": round(self.used_usd, 6),
            "used_gpu_hours": round(self.used_gpu_hours, 6),
            "remaining_usd": None if self.remaining_usd is None else round(self.remaining_usd, 6),
            "remaining_gpu_hours": None
            if self.remaining_gpu_hours is None
            else round(self.remaining_gpu_hours, 6),
            "override": None
            if self.override is None
            else self.override.model_dump(mode="json", exclude_none=True),
        }


SAFE = re.compile(r"[^A-Za-z0-9._-]")


def team_key(team: str) -> str:
    """A team name as one key segment (anything outside [A-Za-z0-9._-] hex-escaped)."""
    return SAFE.sub(lambda m: "_x" + m.group().encode().hex() + "_", team)


def ledger_url(runs_root: Path) -> str:
    """``BURST_LEDGER``; else, where the aws stack keeps its Terraform state
    (``BURST_TF_STATE_BUCKET``, as the run heartbeats do): ``s3://<bucket>/burst/ledger``;
    else ``<runs root>/ledger``."""
    from burst.settings import current, per_stack

    settings = current()
    if settings.ledger:
        return settings.ledger
    bucket = per_stack(settings.tf_state_bucket, "aws")
    if bucket:
        region = per_stack(settings.tf_state_region, "aws")
        return f"s3://{bucket}/burst/ledger" + (f"?region={region}" if region else "")
    return (runs_root / "ledger").resolve().as_uri()


class Ledger:
    def __init__(self, store: ObjectStore, *, lock_wait_s: float = DEFAULT_LOCK_WAIT_S) -> None:
        self.store = store
        self.lock_wait_s = lock_wait_s

    @classmethod
    def open(cls, url: str) -> Ledger:
        from burst.storage import open_store

        return cls(open_store(url))

    @property
    def url(self) -> str:
        return self.store.url

    # -- budgets
    def teams(self) -> TeamsFile:
        try:
            text = self.store.get_bytes(TEAMS_KEY).decode("utf-8", errors="replace")
        except ObjectMissing:
            return TeamsFile()
        return parse_teams(text, f"{self.url}/{TEAMS_KEY}")

    def set_teams(self, text: str, where: str) -> TeamsFile:
        parsed = parse_teams(text, where)
        self.store.put_bytes(TEAMS_KEY, text.encode())
        return parsed

    # -- entries
    def _key(self, team: str, run_id: str) -> str:
        return f"{team_key(team)}/runs/{run_id}.json"

    def entry(self, team: str, run_id: str) -> Entry | None:
        try:
            return Entry.model_validate_json(self.store.get_bytes(self._key(team, run_id)))
        except ObjectMissing:
            return None
        except ValueError:
            log.warning("%s/%s is not a ledger entry: ignored", self.url, self._key(team, run_id))
            return None

    def write(self, entry: Entry) -> None:
        self.store.put_bytes(self._key(entry.team, entry.run_id), entry.model_dump_json().encode())

    def entries(self, team: str) -> list[Entry]:
        out = []
        for info in list(self.store.list(f"{team_key(team)}/runs/")):
            if not info.key.endswith(".json"):
                continue
            try:
                out.append(Entry.model_validate_json(self.store.get_bytes(info.key)))
            except ObjectMissing:
                continue
            except ValueError:
                log.warning("%s/%s is not a ledger entry: ignored", self.url, info.key)
        return sorted(out, key=lambda e: (e.at, e.run_id))

    def find(self, run_id: str) -> Entry | None:
        """A run's entry, whatever its team (``burst down`` and ``burst reap`` know the run
        id only)."""
        for team in self.team_names():
            found = self.entry(team, run_id)
            if found is not None:
                return found
        return None

    def team_names(self) -> list[str]:
        """Every team with a budget, and every team with entries."""
        names = set(self.teams().teams)
        first: dict[str, str] = {}
        for info in self.store.list(""):
            d, _, rest = info.key.partition("/")
            if rest.startswith("runs/") and rest.endswith(".json"):
                first.setdefault(d, info.key)
        for key in first.values():
            try:
                names.add(Entry.model_validate_json(self.store.get_bytes(key)).team)
            except (ObjectMissing, ValueError):
                continue
        return sorted(names)

    # -- windows
    def standing(self, team: str, now: float, entries: list[Entry] | None = None) -> list[Standing]:
        budget = self.teams().budget(team)
        entries = self.entries(team) if entries is None else entries
        out = []
        for window in WINDOWS:
            limit, override = (None, None) if budget is None else budget.limit(window, now)
            since = now - WINDOW_S[window]
            usd = gh = 0.0
            for e in entries:
                part = e.share(since, now)
                if part > 0:
                    cu, cg = e.charge()
                    usd += cu * part
                    gh += cg * part
            out.append(Standing(window, limit or Limit(), override, usd, gh))
        return out

    # -- the team's admission lock
    @contextlib.contextmanager
    def locked(self, team: str) -> Iterator[None]:
        lease = Lease(
            self.store,
            f"{team_key(team)}/lock.json",
            describe_holder("admission"),
            f"team {team}'s ledger lock",
            LOCK_TTL_S,
            settle_s(self.store),
        )
        end = time.monotonic() + self.lock_wait_s
        while True:
            try:
                lease.acquire()
                break
            except LeaseHeld as exc:
                if time.monotonic() > end:
                    raise InfraError(
                        f"{exc.one_line()} (waited {self.lock_wait_s:g} s)", where=self.url
                    ) from exc
                time.sleep(random.uniform(0.02, 0.2))
        try:
            yield
        finally:
            self._unlock(lease)

    def _unlock(self, lease: Lease) -> None:
        """Delete the lock if it is still ours (the next admission finds none, not a lapsed
        one to take over); a store that fails leaves it to lapse after its time to live."""
        try:
            held = read_lease(self.store, lease.key)
            if held is not None and held.get("token") == lease.token:
                self.store.delete([lease.key])
        except StoreError as exc:
            log.warning("cannot release the %s: %s", lease.what, exc.one_line())


def dumps(obj: object) -> str:
    return json.dumps(obj, indent=2, sort_keys=True, default=str)
