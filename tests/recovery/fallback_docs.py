"""A run's plan and provision documents for an attempt on an on-demand fallback (the
quickstart: A spot lost, train placed on demand in A), for the back-to-spot tests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from burst.documents import PlanDocument, ProvisionDocument
from burst.documents.plan import Candidate
from burst.documents.provision import PlacedCandidate, ProvisionAttempt, RecoveryRecord
from burst.spec import BurstJob, load_spec

REPO = Path(__file__).resolve().parents[2]
A, B = "ap-southeast-1", "ap-southeast-3"


def candidate(region: str, capacity: str, price: float) -> Candidate:
    return Candidate.model_validate(
        {
            "region": region,
            "provider": "aws",
            "capacity": capacity,
            "instance": "p5.48xlarge",
            "nodes": 1,
            "price_per_hour": price,
            "mtbf_hours": 30.0 if capacity == "spot" else 2000.0,
            "checkpoint_interval_s": 900.0,
        }
    )


def fallback_docs(
    tmp: Path, store: Path | None = None, **recovery: Any
) -> tuple[BurstJob, PlanDocument, ProvisionDocument]:
    """The quickstart spec (``probe_interval_s`` 600 unless given), its plan (A and B spot,
    A and B on demand) and the provision document of its on-demand placement in A after
    one spot loss."""
    doc = yaml.safe_load((REPO / "examples" / "quickstart.yaml").read_text())
    doc["compute"]["recovery"] = {"probe_interval_s": 600, "on_demand_after": 1, **recovery}
    doc["storage"]["checkpoint_uri"] = f"file://{store or tmp / 'store'}"
    tmp.mkdir(parents=True, exist_ok=True)
    spec = tmp / "spec.yaml"
    spec.write_text(yaml.safe_dump(doc, sort_keys=False))
    job = load_spec(spec)
    here = candidate(A, "on_demand", 98.0)
    plan = PlanDocument(
        candidates=[
            candidate(A, "spot", 30.0),
            candidate(B, "spot", 28.0),
            here,
            candidate(B, "on_demand", 99.0),
        ]
    )
    record = RecoveryRecord(
        strategy="failover",
        event="requeue",
        candidate=PlacedCandidate(region=A, provider="aws", capacity="on_demand"),
        history=[PlacedCandidate(region=A, provider="aws", capacity="spot", ended="requeue")],
        requeues=1,
        spot_losses=1,
        may_requeue=True,
    )
    infra = ProvisionDocument(
        candidate=here,
        recovery=record,
        attempts=[
            ProvisionAttempt(
                index=1, region=A, provider="aws", capacity="on_demand", result="ok", seconds=240.0
            )
        ],
    )
    return job, plan, infra
