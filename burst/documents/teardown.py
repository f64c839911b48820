"""The teardown document: what was destroyed, whether the last checkpoint reached the store
first, and what the leak scan found (``burst.infra.teardown``, ``burst.infra.ckptsync``)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from burst.documents.base import Detail, Document, StepDocument


class CheckpointRef(Document):
    step: int
    tier: str


class CheckpointSync(Document):
    """Did the checkpoint the last train attempt left reach the store before the nodes went?"""

    confirmed: bool | None = Field(
        description="None: nothing to sync (no train attempt, no checkpoint in the store)."
    )
    store: str | None = None
    expected_step: int | None = None
    latest: CheckpointRef | None = None
    verified: bool | None = Field(
        default=None, description="Every chunk of the latest checkpoint read back and checked."
    )
    restorable: CheckpointRef | None = Field(
        default=None, description="When the latest does not verify: the newest that does."
    )
    waited_s: float = 0.0
    error: str | None = None


class Leak(Detail):
    """A resource of the run still alive (``kind`` and ``id``; the rest depends on it)."""

    kind: str
    id: str


class Settlement(Document):
    """The run's reservation settled to what it used (``burst.admission.admit.settle``)."""

    team: str
    reserved_usd: float
    reserved_gpu_hours: float
    actual_usd: float
    actual_gpu_hours: float = Field(
        description="Billed: each train attempt's metered hours x the GPUs it rented "
        "(burst.budget.billed_gpu_hours), the figure burst report shows."
    )
    requeues: int = 0
    basis: str | None = None


def settlement_of(entry: Any) -> Settlement:
    """A settled ``burst.admission.ledger.Entry`` as the teardown document's section."""
    return Settlement(
        team=entry.team,
        reserved_usd=entry.reserved_usd,
        reserved_gpu_hours=entry.reserved_gpu_hours,
        actual_usd=entry.actual_usd,
        actual_gpu_hours=entry.actual_gpu_hours,
        requeues=entry.requeues,
        basis=entry.basis,
    )


class Destroyed(Document):
    """What ``terraform destroy`` of one run's state did (``burst.infra.teardown.destroy_run``):
    the teardown step's, ``burst down``'s and the reaper's."""

    destroyed: bool
    attempts: int = Field(ge=0)
    errors: list[str] = Field(default_factory=list)
    stale_locks_released: list[str] = Field(default_factory=list)
    resources_remaining: int = Field(ge=0)
    terraform_state: str | None = None


class TeardownDocument(StepDocument, Destroyed):
    """The teardown step's document (also written with exit 4 when something leaked): the
    destroy, then what the step checked around it."""

    checkpoint_sync: CheckpointSync | None = None
    injected_failures: list[int] = Field(default_factory=list)
    leaks: list[Leak] = Field(default_factory=list)
    settlement: Settlement | None = None
