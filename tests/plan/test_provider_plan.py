"""A plan over every provider the catalog knows: candidates of providers with a Terraform
stack are ranked with their sourced prices (Nebius's published preemptible price included);
a provider without a stack (OCI) is listed as excluded, never emitted as runnable."""

from __future__ import annotations

from burst.plan.catalog import load_catalog
from burst.plan.placement import plan
from burst.providers import PROVIDER_STACKS

from .conftest import make_spec


def test_plan_over_all_providers() -> None:
    spec = make_spec(
        **{
            "compute.providers": ["aws", "gcp", "azure", "nebius", "oci"],
            "compute.regions": [
                "ap-southeast-3",
                "asia-southeast1",
                "uaenorth",
                "eu-north1",
                "me-dubai-1",
            ],
            "budget.max_usd": 1e7,
            "budget.max_hours": 5000,
        }
    )
    cat = load_catalog(use_env=False)
    doc = plan(spec, cat)
    cands = doc["candidates"]
    providers = {c["provider"] for c in cands}
    assert providers == {"aws", "gcp", "azure", "nebius"} == set(PROVIDER_STACKS)
    oci = [e for e in doc["excluded"] if (e["provider"], e["region"]) == ("oci", "me-dubai-1")]
    assert [e["reason"] for e in oci] == [
        "no Terraform stack provisions provider oci (stacks exist for aws, azure, gcp, nebius): "
        "not runnable"
    ]
    nebius_spot = next(c for c in cands if c["provider"] == "nebius" and c["capacity"] == "spot")
    offer = cat.offer("nebius", "eu-north1", spec.compute.gpu_type)
    assert offer is not None
    spot = offer.facts["spot_usd_per_hour"]
    assert spot.value == 10.0 and "nebius" in spot.source
    assert nebius_spot["price_per_hour"] == spot.value * nebius_spot["nodes"]
    assert nebius_spot["price_source"] and nebius_spot["price_basis"] != "unknown"
    # a provider whose prices the sources do not give is priced conservatively, not dropped
    assert any(c["provider"] == "azure" for c in cands)


def test_spot_prices_are_sourced_and_ranked_across_providers() -> None:
    """AWS and GCP spot prices come from the catalog's sourced snapshot rows; every priced
    candidate says where its price comes from, and GCP's spot is cheaper than its on-demand."""
    spec = make_spec(
        **{
            "compute.providers": ["aws", "gcp", "azure", "nebius"],
            "compute.regions": ["ap-southeast-3", "asia-southeast1", "southeastasia", "eu-north1"],
            "budget.max_usd": 1e7,
            "budget.max_hours": 5000,
        }
    )
    cat = load_catalog(use_env=False)
    cands = plan(spec, cat)["candidates"]

    def one(provider: str, capacity: str) -> dict[str, object]:
        return next(c for c in cands if c["provider"] == provider and c["capacity"] == capacity)

    for provider, region in (("aws", "ap-southeast-3"), ("gcp", "asia-southeast1")):
        offer = cat.offer(provider, region, spec.compute.gpu_type)
        assert offer is not None
        spot = offer.facts["spot_usd_per_hour"]
        assert spot.value is not None and spot.source.startswith("skypilot-"), spot
        cand = one(provider, "spot")
        assert cand["region"] == region
        assert cand["price_per_hour"] == spot.value * cand["nodes"]  # type: ignore[operator]
        assert cand["price_basis"] == "catalog"
    gcp_spot, gcp_od = one("gcp", "spot"), one("gcp", "on_demand")
    assert gcp_spot["price_per_hour"] < gcp_od["price_per_hour"]  # type: ignore[operator]
    ranked = [(c["provider"], c["capacity"]) for c in cands]
    assert len(set(p for p, _ in ranked)) == 4, ranked
