"""Assembly: the plan document from the ranked candidates (docs/planning.md "The plan
document"): the data placement and topology of the first candidate, its regional sync plan,
the catalog files and assumptions used, the simulation's seed."""

from __future__ import annotations

from typing import Any

from burst.plan import datastrategy
from burst.plan.catalog import Catalog
from burst.plan.crossregion import recommend_span
from burst.plan.eligibility import DataInputs, supply
from burst.plan.regional import plan_regional_sync
from burst.plan.workload import Workload
from burst.spec import BurstJob


def plan_document(
    job: BurstJob,
    cat: Catalog,
    work: Workload,
    *,
    objective: str,
    candidates: list[dict[str, Any]],
    excluded: list[dict[str, Any]],
    data_in: DataInputs,
    data_options: dict[tuple[str, str], list[datastrategy.DataPlan]],
    seed: int,
    replicas: int,
    record_given: bool,
) -> dict[str, Any]:
    first = candidates[0]
    span = recommend_span(
        job.compute.gpu_count, supply(cat, job, first["provider"], first["region"])
    )
    regional = plan_regional_sync(job, cat, work, first["provider"])
    return {
        **({"regional": regional} if regional is not None else {}),
        "spec_sha256": job.sha256(),
        "objective": objective,
        "budget_usd": job.budget.max_usd,
        "deadline_hours": job.budget.max_hours,
        "gpu_type": job.compute.gpu_type,
        "gpu_count": job.compute.gpu_count,
        "workload": work.as_dict(),
        "data": {
            "uri": job.data.uri,
            "region": job.data.region,
            "size_gb": job.data.size_gb,
            "strategy": first["data_strategy"],
            "shards": data_in.shards,
            "sync_gb": data_in.sync_gb,
            "sync_rounds": data_in.sync_rounds,
            # the three strategies for the first candidate: what the choice was among
            "alternatives": [
                o.as_dict() for o in data_options[(first["provider"], first["region"])]
            ],
        },
        "candidates": candidates,
        "excluded": excluded,
        "topology": {"span": span.span, "parallelism": span.parallelism, "reason": span.reason},
        "catalog": {
            "files": cat.files,
            "assumptions": {k: f.as_dict() for k, f in sorted(cat.assumptions.items())},
        },
        "simulation": {"seed": seed, "replicas": replicas},
        "decision_record": "given" if record_given else "none (unchecked)",
    }
