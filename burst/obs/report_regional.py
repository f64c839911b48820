"""The run report's regional section (``RunReport.regional``) of a regional-sync run, for the
one report builder (``burst.obs.report.build_report``).

It reads what the run's branches wrote: each region's workspace (``<run-id>-<region>/``: the
region's ``provision``, ``train``, ``aggregate`` and ``teardown`` documents, the role config its
``train`` step derived, its Terraform state), the run's plan document, and the step records of
the region's pods (named as their pods, ``regions(0:eu-west-1).train``, with their region).
What only the machine that ran it measured (the link emulator's transfers, the rounds the
aggregator's store holds when its step wrote no document) comes in as
``burst.documents.regional.RegionalMeasures``.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from burst.documents import PlanDocument, StepRecord, TeardownDocument, read_document
from burst.documents.base import DocumentError
from burst.documents.regional import (
    AggregateDocument,
    LinkTotals,
    LinkTransfer,
    RegionalMeasures,
    RegionalRound,
    RegionalSection,
    RegionAttempts,
)
from burst.errors import EXIT_BAD_INPUT, EXIT_PREEMPTED, EXIT_REFUSED
from burst.runs import RunPaths, count_state_resources, state_file
from burst.spec import BurstJob

log = logging.getLogger(__name__)

#: the steps of a region's branch that train: the worker (``train``) and the aggregator
ROLES = {"train": "worker", "aggregate": "aggregator"}
PROVISION, TEARDOWN = "provision", "teardown"


@dataclass
class RegionalFacts:
    """The section, and what the rest of the report takes from it."""

    section: RegionalSection
    final_weights_sha256: str | None
    resources_remaining: int  # left in the regions' states (or their teardowns' counts)
    unproven: list[str]  # regions provisioned and not proven empty by their teardown
    preemptions: int  # worker and aggregator pods that exited 75


def is_regional(job: BurstJob) -> bool:
    return job.training.strategy == "regional-sync" and job.training.regional_sync is not None


def region_paths(paths: RunPaths, region: str) -> RunPaths:
    """A region's workspace: the stack id its branch's steps ran under."""
    return RunPaths(paths.root, f"{paths.run_id}-{region}")


def _read(model: type[Any], path: Path) -> Any:
    if not path.is_file():
        return None
    try:
        return read_document(model, path)
    except DocumentError as exc:
        log.warning("%s: left out of the report", exc.one_line())
        return None


def _schedule(
    paths: RunPaths, regions: list[str], job: BurstJob
) -> tuple[int | None, str | None, int | None]:
    """H, its basis and the rounds planned: what the region's ``train`` step derived (its
    role config), else the plan document's regional section, else the spec's H."""
    plan = _read(PlanDocument, paths.doc("plan"))
    planned = plan.regional if plan is not None else None
    basis = planned.local_steps_basis if planned is not None else None
    for region in regions:
        cfg = region_paths(paths, region).dir / "worker.config.json"
        try:
            chosen = json.loads(cfg.read_text()) if cfg.is_file() else None
        except (OSError, ValueError):
            chosen = None
        if isinstance(chosen, dict) and isinstance(chosen.get("local_steps"), int):
            rounds = chosen.get("rounds")
            return chosen["local_steps"], basis, rounds if isinstance(rounds, int) else None
    if planned is not None:
        return planned.local_steps, basis, planned.rounds
    rs = job.training.regional_sync
    local = rs.local_steps if rs is not None else None
    return local, None if local is None else "training.regional_sync.local_steps", None


def _links(transfers: list[LinkTransfer]) -> tuple[LinkTotals | None, dict[int, int]]:
    """What crossed a region boundary, in total and by round."""
    if not transfers:
        return None, {}
    crossing = [t for t in transfers if t.src != t.dst]
    by_kind: dict[str, int] = {}
    by_round: dict[int, int] = {}
    for t in crossing:
        by_kind[t.kind] = by_kind.get(t.kind, 0) + t.bytes
        if t.round is not None:
            by_round[t.round] = by_round.get(t.round, 0) + t.bytes
    totals = LinkTotals(
        bytes_crossing=sum(by_kind.values()),
        bytes_by_kind=by_kind,
        shard_bytes_crossing=by_kind.get("shard", 0),
        egress_usd=sum(t.usd for t in crossing),
        link_seconds=round(sum(t.seconds for t in crossing), 6),
        transfers=len(crossing),
    )
    return totals, by_round


def _codes(step: StepRecord) -> list[int]:
    return [-1 if a.exit_code is None else a.exit_code for a in step.attempt_details]


def _provisioned(steps: list[StepRecord], regions: list[str]) -> list[str]:
    """Regions whose provisioning began (a failure half-way is torn down too); bad input (2)
    and a refusal (3) come before anything is applied."""
    began = {
        s.region
        for s in steps
        if s.module == PROVISION and any(c not in (EXIT_BAD_INPUT, EXIT_REFUSED) for c in _codes(s))
    }
    return [r for r in regions if r in began]


def regional_facts(
    paths: RunPaths, job: BurstJob, steps: list[StepRecord], measures: RegionalMeasures | None
) -> RegionalFacts:
    rs = job.training.regional_sync
    assert rs is not None  # is_regional(job)
    measures = measures or RegionalMeasures()
    regions = [str(r) for r in rs.regions or []]
    agg = str(rs.aggregation_region)
    local_steps, basis, planned = _schedule(paths, regions, job)
    aggregate = _read(AggregateDocument, region_paths(paths, agg).doc("aggregate"))
    history = list(aggregate.rounds) if aggregate is not None else list(measures.committed)
    links, by_round = _links(measures.transfers)
    if links is not None:
        history = [
            RegionalRound.model_validate(
                {**r.model_dump(), "bytes_crossing": by_round.get(r.round, 0)}
            )
            for r in history
        ]
    torn_down, remaining = [], 0
    for region in regions:
        ws = region_paths(paths, region)
        teardown = _read(TeardownDocument, ws.doc(TEARDOWN))
        if teardown is not None and teardown.destroyed and not teardown.leaks:
            torn_down.append(region)
        state = state_file(ws.terraform)
        remaining += (
            count_state_resources(state)
            if state.exists() or teardown is None
            else int(teardown.resources_remaining or 0)
        )
    provisioned = _provisioned(steps, regions)
    attempts = [
        RegionAttempts(
            region=s.region or "", role=ROLES[s.module], attempts=s.attempts, exit_codes=_codes(s)
        )
        for s in steps
        if s.module in ROLES and s.region and s.attempts
    ]
    completed = len(history)
    section = RegionalSection(
        regions=regions,
        aggregation_region=agg,
        local_steps=local_steps,
        local_steps_basis=basis,
        rounds_planned=planned,
        rounds_completed=completed,
        codec=rs.compression.codec,
        rounds=history,
        bytes_per_round=links.bytes_crossing / completed if links and completed else 0.0,
        links=links,
        attempts=attempts,
        provisioned=provisioned,
        torn_down=torn_down,
        stores=measures.stores,
        terraform=measures.terraform,
    )
    return RegionalFacts(
        section=section,
        final_weights_sha256=aggregate.final_weights_sha256 if aggregate is not None else None,
        resources_remaining=remaining,
        unproven=sorted(set(provisioned) - set(torn_down)),
        preemptions=sum(a.exit_codes.count(EXIT_PREEMPTED) for a in attempts),
    )
