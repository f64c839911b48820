"""`burst serve` serves the tier its tiers index names (issue 46, provenance end to end): the
checkpoint at the index's step, and only when its weights are the digest the index records.
Before: each tier was the newest checkpoint of its store, whatever the index named, and the
index's weights_sha256 was never compared (a tier store written after `burst distill`, or an
index edited by hand, was served as if it were the distilled tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from burst.errors import BadInputError
from burst.inference.distill import TiersDocument, _save, load_tier
from burst.spec import load_spec
from burst.train.setup import load_entrypoint
from burst.train.weights import state_sha256


def _index(job: object, store: str, step: int, digest: str) -> TiersDocument:
    tier = {
        "name": "heavy", "kind": "heavy", "store": store, "manifest": "m", "step": step,
        "weights_sha256": digest, "parameters": 1, "size_bytes": 1, "heldout_loss": 0.1,
        "latency_ms_p50": 1.0,
    }  # fmt: skip
    return TiersDocument.model_validate(
        {"run_id": "t", "spec_name": "q", "teacher_step": step, "distill_steps": 1,
         "heldout_samples": 1, "seed": 0, "tiers": [tier]}
    )  # fmt: skip


def test_the_tier_is_the_step_and_the_weights_the_index_names(
    quickstart_in: Path, tmp_path: Path
) -> None:
    job = load_spec(quickstart_in)
    model = load_entrypoint(job)(job).model
    named = {k: v.clone() for k, v in model.state_dict().items()}
    later = {k: v + 1.0 for k, v in named.items()}  # a newer checkpoint in the same store
    store = f"file://{tmp_path}/tiers/heavy"
    _save(store, 1, named)
    _save(store, 2, later)
    served = load_tier(job, _index(job, store, 1, state_sha256(named)), "heavy")
    assert state_sha256(served.state_dict()) == state_sha256(named)  # step 1, not the newest
    with pytest.raises(BadInputError, match=r"tier 'heavy' names weights sha256 0000"):
        load_tier(job, _index(job, store, 1, "0" * 64), "heavy")
